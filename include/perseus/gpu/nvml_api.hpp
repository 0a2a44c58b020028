#pragma once
// The handful of NVML declarations perseus uses, written from NVML's public reference so that
// nothing needs the CUDA toolkit's nvml.h at build time. The library itself is loaded at run
// time (src/gpu/nvml.cpp); the fake NVML used by the tests (src/gpu/fake/fake_nvml.cpp) exports
// the same symbols.
#include <cstdint>

extern "C" {
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef int nvmlClockType_t;
}

namespace perseus::gpu::nvml {

inline constexpr nvmlReturn_t kSuccess = 0;
inline constexpr nvmlReturn_t kUninitialized = 1;
inline constexpr nvmlReturn_t kInvalidArgument = 2;
inline constexpr nvmlReturn_t kNotSupported = 3;
inline constexpr nvmlReturn_t kNoPermission = 4;
inline constexpr nvmlReturn_t kNotFound = 6;
inline constexpr nvmlReturn_t kInsufficientSize = 7;
inline constexpr nvmlReturn_t kUnknown = 999;

inline constexpr nvmlClockType_t kClockGraphics = 0;
inline constexpr nvmlClockType_t kClockMem = 2;

// Function types, one per symbol resolved with dlsym.
using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using ErrorStringFn = const char* (*)(nvmlReturn_t);
using GetCountFn = nvmlReturn_t (*)(unsigned int*);
using GetHandleByIndexFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using GetNameFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);  // also nvmlDeviceGetUUID
using GetSupportedMemoryClocksFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*);
using GetSupportedGraphicsClocksFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, unsigned int*, unsigned int*);
using SetLockedClocksFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, unsigned int);
using ResetLockedClocksFn = nvmlReturn_t (*)(nvmlDevice_t);
using GetUintFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);
using GetConstraintsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*);
using SetUintFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int);
using GetEnergyFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*);
using GetClockInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlClockType_t, unsigned int*);

}  // namespace perseus::gpu::nvml
