// The NVML functions NVIDIA's Python bindings (nvidia-ml-py's pynvml) call on behalf of Zeus 0.16
// that perseus itself does not use, so the real `zeus` package runs on the fake NVML: put a
// `libnvidia-ml.so.1` symlink to this library in a directory on LD_LIBRARY_PATH. They are written
// in terms of the fake's own exports, so they answer from the same simulated GPUs:
//   nvmlInitWithFlags                    nvmlInit_v2 (the flags change nothing here)
//   nvmlDeviceGetArchitecture            Ampere (the fake's clocks are an A100's), so Zeus reads
//                                        the energy counter rather than integrating power
//   nvmlDeviceGetC2cModeInfoV            NOT_SUPPORTED: not a Grace Hopper superchip
//   nvmlDeviceGet/SetPersistenceMode     a per-GPU flag (setting it obeys PERSEUS_FAKE_NVML_DENY)
//   nvmlDeviceGetFieldValues             NVML_FI_DEV_POWER_INSTANT of the GPU (nvmlDeviceGetPowerUsage);
//                                        every other field or scope NOT_SUPPORTED, as on a GPU
//                                        without averaged or memory power readings
//   nvmlSystemGetDriverVersion           "perseus-fake"
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "perseus/gpu/nvml_api.hpp"

namespace nv = perseus::gpu::nvml;

extern "C" {
// The fake's own exports (fake_nvml.cpp) these are written with.
nvmlReturn_t nvmlInit_v2();
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned* limit);
nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned* min_limit,
                                                          unsigned* max_limit);
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned* power);
}

namespace {

constexpr unsigned kArchitectureAmpere = 7;   // NVML_DEVICE_ARCH_AMPERE
constexpr unsigned kFieldPowerInstant = 186;  // NVML_FI_DEV_POWER_INSTANT
constexpr unsigned kPowerScopeGpu = 0;        // NVML_POWER_SCOPE_GPU
constexpr int kValueTypeUnsignedInt = 1;      // NVML_VALUE_TYPE_UNSIGNED_INT

// nvmlFieldValue_t, laid out as nvml.h has it.
struct FieldValue {
  unsigned field_id;
  unsigned scope_id;
  long long timestamp_us;
  long long latency_us;
  int value_type;
  nvmlReturn_t result;
  union {
    double d;
    unsigned ui;
    unsigned long ul;
    unsigned long long ull;
    long long sll;
    int si;
    unsigned short us;
  } value;
};
static_assert(sizeof(FieldValue) == 40, "nvmlFieldValue_t is 40 bytes");

// UNINITIALIZED or INVALID_ARGUMENT exactly where the fake's own getters say so.
nvmlReturn_t check_device(nvmlDevice_t device) {
  unsigned limit = 0;
  return nvmlDeviceGetPowerManagementLimit(device, &limit);
}

struct Persistence {
  std::mutex mutex;
  std::map<std::uintptr_t, int> enabled;  // by handle; absent: disabled
};

Persistence& persistence() {
  static Persistence p;
  return p;
}

bool denied() {
  const char* deny = std::getenv("PERSEUS_FAKE_NVML_DENY");
  return deny != nullptr && std::strcmp(deny, "1") == 0;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvmlReturn_t nvmlInitWithFlags(unsigned /*flags*/) { return nvmlInit_v2(); }

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device,
                                                                              unsigned* architecture) {
  if (nvmlReturn_t result = check_device(device); result != nv::kSuccess) return result;
  if (architecture == nullptr) return nv::kInvalidArgument;
  *architecture = kArchitectureAmpere;
  return nv::kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetC2cModeInfoV(nvmlDevice_t device, void* info) {
  if (nvmlReturn_t result = check_device(device); result != nv::kSuccess) return result;
  return info == nullptr ? nv::kInvalidArgument : nv::kNotSupported;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int* mode) {
  if (nvmlReturn_t result = check_device(device); result != nv::kSuccess) return result;
  if (mode == nullptr) return nv::kInvalidArgument;
  Persistence& p = persistence();
  std::lock_guard lock(p.mutex);
  auto found = p.enabled.find(reinterpret_cast<std::uintptr_t>(device));
  *mode = found == p.enabled.end() ? 0 : found->second;
  return nv::kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceSetPersistenceMode(nvmlDevice_t device, int mode) {
  if (nvmlReturn_t result = check_device(device); result != nv::kSuccess) return result;
  if (mode != 0 && mode != 1) return nv::kInvalidArgument;
  if (denied()) return nv::kNoPermission;
  Persistence& p = persistence();
  std::lock_guard lock(p.mutex);
  p.enabled[reinterpret_cast<std::uintptr_t>(device)] = mode;
  return nv::kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count,
                                                                             FieldValue* values) {
  if (nvmlReturn_t result = check_device(device); result != nv::kSuccess) return result;
  if (count < 0 || (count > 0 && values == nullptr)) return nv::kInvalidArgument;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  for (int i = 0; i < count; ++i) {
    FieldValue& field = values[i];
    field.timestamp_us = std::chrono::duration_cast<std::chrono::microseconds>(now).count();
    field.latency_us = 0;
    if (field.field_id == kFieldPowerInstant && field.scope_id == kPowerScopeGpu) {
      field.value_type = kValueTypeUnsignedInt;
      field.result = nvmlDeviceGetPowerUsage(device, &field.value.ui);
    } else {
      field.result = nv::kNotSupported;
    }
  }
  return nv::kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned length) {
  const char* text = "perseus-fake";
  if (version == nullptr || length <= std::strlen(text)) return nv::kInsufficientSize;
  std::strcpy(version, text);
  return nv::kSuccess;
}

}  // extern "C"
