#pragma once
// The handful of AMD SMI declarations perseus uses, written from AMD SMI's public C reference
// (amd_smi/amdsmi.h of ROCm 6.1 and later, library version 24 and up) so that nothing needs ROCm
// at build time. The library itself is loaded at run time (src/gpu/amdsmi.cpp); the fake AMD SMI
// the tests use (src/gpu/fake/fake_amdsmi.cpp) exports the same symbols.
#include <cstdint>

extern "C" {
typedef std::uint32_t amdsmi_status_t;
typedef void* amdsmi_socket_handle;
typedef void* amdsmi_processor_handle;
typedef int amdsmi_clk_type_t;
typedef int amdsmi_dev_perf_level_t;

// Power readings in W; a member the GPU does not report holds UINT32_MAX (MI300 and later
// report current_socket_power, earlier GPUs average_socket_power).
typedef struct {
  std::uint64_t socket_power;
  std::uint32_t current_socket_power;
  std::uint32_t average_socket_power;
  std::uint64_t gfx_voltage;
  std::uint64_t soc_voltage;
  std::uint64_t mem_voltage;
  std::uint32_t power_limit;
  std::uint64_t reserved[18];
} amdsmi_power_info_t;

// Power caps in microwatts.
typedef struct {
  std::uint64_t power_cap;
  std::uint64_t default_power_cap;
  std::uint64_t dpm_cap;
  std::uint64_t min_power_cap;
  std::uint64_t max_power_cap;
  std::uint64_t reserved[3];
} amdsmi_power_cap_info_t;

// Clocks in MHz: the current one and the range the driver runs it in.
typedef struct {
  std::uint32_t clk;
  std::uint32_t min_clk;
  std::uint32_t max_clk;
  std::uint8_t clk_locked;
  std::uint8_t clk_deep_sleep;
  std::uint32_t reserved[4];
} amdsmi_clk_info_t;
}

namespace perseus::gpu::amdsmi {

inline constexpr amdsmi_status_t kSuccess = 0;
inline constexpr amdsmi_status_t kInvalid = 1;
inline constexpr amdsmi_status_t kNotSupported = 2;
inline constexpr amdsmi_status_t kNoPermission = 10;
inline constexpr amdsmi_status_t kInputOutOfBounds = 17;
inline constexpr amdsmi_status_t kBusy = 30;
inline constexpr amdsmi_status_t kNotFound = 31;
inline constexpr amdsmi_status_t kNotInitialized = 32;

inline constexpr std::uint64_t kInitAmdGpus = 1u << 1;
inline constexpr amdsmi_clk_type_t kClockGraphics = 0;  // AMDSMI_CLK_TYPE_GFX
inline constexpr amdsmi_clk_type_t kClockMemory = 4;    // AMDSMI_CLK_TYPE_MEM
inline constexpr amdsmi_dev_perf_level_t kPerfLevelAuto = 0;
inline constexpr std::uint32_t kNotReported = 0xFFFFFFFFu;  // a power member the GPU does not report
inline constexpr unsigned kUuidSize = 38;                   // AMDSMI_GPU_UUID_SIZE
// amdsmi_get_gpu_asic_info fills an amdsmi_asic_info_t whose first member is the GPU's name
// (char market_name[256]); perseus reads only that, into a buffer larger than the whole struct.
inline constexpr unsigned kAsicInfoBufferSize = 4096;

// Function types, one per symbol resolved with dlsym.
using InitFn = amdsmi_status_t (*)(std::uint64_t);
using ShutDownFn = amdsmi_status_t (*)();
using StatusStringFn = amdsmi_status_t (*)(amdsmi_status_t, const char**);
using GetSocketHandlesFn = amdsmi_status_t (*)(std::uint32_t*, amdsmi_socket_handle*);
using GetProcessorHandlesFn = amdsmi_status_t (*)(amdsmi_socket_handle, std::uint32_t*, amdsmi_processor_handle*);
using GetAsicInfoFn = amdsmi_status_t (*)(amdsmi_processor_handle, void*);
using GetUuidFn = amdsmi_status_t (*)(amdsmi_processor_handle, unsigned int*, char*);
using GetClockInfoFn = amdsmi_status_t (*)(amdsmi_processor_handle, amdsmi_clk_type_t, amdsmi_clk_info_t*);
using SetClockRangeFn = amdsmi_status_t (*)(amdsmi_processor_handle, std::uint64_t, std::uint64_t, amdsmi_clk_type_t);
using SetPerfLevelFn = amdsmi_status_t (*)(amdsmi_processor_handle, amdsmi_dev_perf_level_t);
using GetPowerCapInfoFn = amdsmi_status_t (*)(amdsmi_processor_handle, std::uint32_t, amdsmi_power_cap_info_t*);
using SetPowerCapFn = amdsmi_status_t (*)(amdsmi_processor_handle, std::uint32_t, std::uint64_t);
using GetPowerInfoFn = amdsmi_status_t (*)(amdsmi_processor_handle, amdsmi_power_info_t*);
using GetEnergyCountFn = amdsmi_status_t (*)(amdsmi_processor_handle, std::uint64_t*, float*, std::uint64_t*);

}  // namespace perseus::gpu::amdsmi
