// A fake libamd_smi for tests and demos without an AMD GPU: the AMD SMI functions perseus uses
// (perseus/gpu/amdsmi_api.hpp), answered from the fake NVML's simulated GPUs (fake_nvml.cpp),
// which this library links. Both fakes therefore show the same GPUs, follow the same settings
// (PERSEUS_FAKE_NVML_GPUS, _DENY, _POWER_W, _REPLAY, ...) and log every call that changes a GPU to
// $PERSEUS_FAKE_NVML_LOG under its NVML name.
//
// Shaped like an AMD Instinct GPU as AMD SMI shows it:
//   - one socket per GPU, one GPU processor per socket;
//   - clocks take a range (amdsmi_set_gpu_clk_range): the fake accepts one clock (min = max) the
//     simulated GPU supports, or the GPU's whole range, which unlocks it; AUTO performance level
//     unlocks both clocks;
//   - power caps in µW; power readings in whole W; the energy counter in units of 15.259 µJ, as
//     MI200 and MI300 count.
// PERSEUS_FAKE_AMDSMI_POWER=average reports average_socket_power only (as MI200 and earlier do);
// otherwise current_socket_power only (as MI300 does).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "perseus/gpu/amdsmi_api.hpp"
#include "perseus/gpu/nvml_api.hpp"

namespace am = perseus::gpu::amdsmi;
namespace nv = perseus::gpu::nvml;

extern "C" {
// The fake NVML's exports these are written with.
nvmlReturn_t nvmlInit_v2();
nvmlReturn_t nvmlShutdown();
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length);
nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned* count, unsigned* clocks);
nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned memory, unsigned* count,
                                                  unsigned* clocks);
nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device, unsigned min_mhz, unsigned max_mhz);
nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device);
nvmlReturn_t nvmlDeviceSetMemoryLockedClocks(nvmlDevice_t device, unsigned min_mhz, unsigned max_mhz);
nvmlReturn_t nvmlDeviceResetMemoryLockedClocks(nvmlDevice_t device);
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned* limit);
nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned* min_limit,
                                                          unsigned* max_limit);
nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device, unsigned limit);
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* energy);
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned* power);
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned* clock);
}

namespace {

constexpr float kEnergyResolutionUj = 15.259f;
constexpr amdsmi_status_t kUnknownError = 0xFFFFFFFFu;

bool gpus_initialized = false;  // amdsmi_init was asked for AMD GPUs

amdsmi_status_t status_of(nvmlReturn_t code) {
  switch (code) {
    case nv::kSuccess:
      return am::kSuccess;
    case nv::kUninitialized:
      return am::kNotInitialized;
    case nv::kInvalidArgument:
      return am::kInvalid;
    case nv::kNotSupported:
      return am::kNotSupported;
    case nv::kNoPermission:
      return am::kNoPermission;
    case nv::kNotFound:
      return am::kNotFound;
    default:
      return kUnknownError;
  }
}

// Handles are the GPU's index plus one, for sockets and processors alike.
void* handle_of(unsigned index) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(index) + 1); }

// The simulated GPU behind a handle; INVAL for one no GPU has.
amdsmi_status_t device_of(void* handle, nvmlDevice_t* device) {
  auto raw = reinterpret_cast<std::uintptr_t>(handle);
  if (raw == 0) return am::kInvalid;
  return status_of(nvmlDeviceGetHandleByIndex_v2(static_cast<unsigned>(raw - 1), device));
}

// A supported clock list of the simulated GPU (descending), read the NVML way.
template <typename Call>
std::vector<unsigned> clock_list(Call call) {
  std::vector<unsigned> out(256);
  unsigned count = static_cast<unsigned>(out.size());
  if (call(&count, out.data()) != nv::kSuccess) return {};
  out.resize(count);
  return out;
}

std::vector<unsigned> memory_clocks(nvmlDevice_t device) {
  return clock_list(
      [&](unsigned* count, unsigned* out) { return nvmlDeviceGetSupportedMemoryClocks(device, count, out); });
}

std::vector<unsigned> graphics_clocks(nvmlDevice_t device) {
  std::vector<unsigned> memory = memory_clocks(device);
  if (memory.empty()) return {};
  return clock_list([&](unsigned* count, unsigned* out) {
    return nvmlDeviceGetSupportedGraphicsClocks(device, memory.front(), count, out);
  });
}

// One clock locks it, the whole range unlocks it, anything else is refused.
template <typename Lock, typename Reset>
amdsmi_status_t set_range(const std::vector<unsigned>& supported, std::uint64_t min_mhz, std::uint64_t max_mhz,
                          Lock lock, Reset reset) {
  if (supported.empty()) return am::kNotSupported;
  if (min_mhz == supported.back() && max_mhz == supported.front()) return status_of(reset());
  if (min_mhz != max_mhz || max_mhz > supported.front()) return am::kInvalid;
  return status_of(lock(static_cast<unsigned>(max_mhz)));
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) amdsmi_status_t amdsmi_init(std::uint64_t flags) {
  amdsmi_status_t status = status_of(nvmlInit_v2());
  if (status == am::kSuccess) gpus_initialized = (flags & am::kInitAmdGpus) != 0;
  return status;
}

__attribute__((visibility("default"))) amdsmi_status_t amdsmi_shut_down() { return status_of(nvmlShutdown()); }

__attribute__((visibility("default"))) amdsmi_status_t amdsmi_status_code_to_string(amdsmi_status_t status,
                                                                                    const char** text) {
  if (text == nullptr) return am::kInvalid;
  switch (status) {
    case am::kSuccess:
      *text = "AMDSMI_STATUS_SUCCESS: Call succeeded";
      break;
    case am::kInvalid:
      *text = "AMDSMI_STATUS_INVAL: Invalid parameters";
      break;
    case am::kNotSupported:
      *text = "AMDSMI_STATUS_NOT_SUPPORTED: Command not supported";
      break;
    case am::kNoPermission:
      *text = "AMDSMI_STATUS_NO_PERM: Permission Denied";
      break;
    case am::kNotInitialized:
      *text = "AMDSMI_STATUS_NOT_INIT: Processor not initialized";
      break;
    default:
      *text = "AMDSMI_STATUS_UNKNOWN_ERROR: An unknown error occurred";
  }
  return am::kSuccess;
}

__attribute__((visibility("default"))) amdsmi_status_t amdsmi_get_socket_handles(std::uint32_t* count,
                                                                                 amdsmi_socket_handle* sockets) {
  if (count == nullptr) return am::kInvalid;
  unsigned gpus = 0;
  if (amdsmi_status_t status = status_of(nvmlDeviceGetCount_v2(&gpus)); status != am::kSuccess) return status;
  if (!gpus_initialized) gpus = 0;
  if (sockets == nullptr) {
    *count = gpus;
    return am::kSuccess;
  }
  *count = *count < gpus ? *count : gpus;
  for (unsigned i = 0; i < *count; ++i) sockets[i] = handle_of(i);
  return am::kSuccess;
}

__attribute__((visibility("default"))) amdsmi_status_t amdsmi_get_processor_handles(
    amdsmi_socket_handle socket, std::uint32_t* count, amdsmi_processor_handle* processors) {
  nvmlDevice_t device = nullptr;
  if (count == nullptr) return am::kInvalid;
  if (amdsmi_status_t status = device_of(socket, &device); status != am::kSuccess) return status;
  if (processors != nullptr && *count >= 1) processors[0] = socket;
  *count = 1;
  return am::kSuccess;
}

__attribute__((visibility("default"))) amdsmi_status_t amdsmi_get_gpu_asic_info(amdsmi_processor_handle processor,
                                                                                void* info) {
  nvmlDevice_t device = nullptr;
  if (info == nullptr) return am::kInvalid;
  if (amdsmi_status_t status = device_of(processor, &device); status != am::kSuccess) return status;
  return status_of(nvmlDeviceGetName(device, static_cast<char*>(info), 256));  // market_name[256]
}

__attribute__((visibility("default"))) amdsmi_status_t amdsmi_get_gpu_device_uuid(amdsmi_processor_handle processor,
                                                                                  unsigned* length, char* uuid) {
  nvmlDevice_t device = nullptr;
  if (length == nullptr || uuid == nullptr || *length < am::kUuidSize) return am::kInvalid;
  if (amdsmi_status_t status = device_of(processor, &device); status != am::kSuccess) return status;
  return status_of(nvmlDeviceGetUUID(device, uuid, *length));
}

__attribute__((visibility("default"))) amdsmi_status_t amdsmi_get_clock_info(amdsmi_processor_handle processor,
                                                                             amdsmi_clk_type_t type,
                                                                             amdsmi_clk_info_t* info) {
  nvmlDevice_t device = nullptr;
  if (info == nullptr) return am::kInvalid;
  if (amdsmi_status_t status = device_of(processor, &device); status != am::kSuccess) return status;
  if (type != am::kClockGraphics && type != am::kClockMemory) return am::kNotSupported;
  const bool graphics = type == am::kClockGraphics;
  std::vector<unsigned> supported = graphics ? graphics_clocks(device) : memory_clocks(device);
  if (supported.empty()) return am::kNotSupported;
  *info = amdsmi_clk_info_t{};
  info->min_clk = supported.back();
  info->max_clk = supported.front();
  return status_of(nvmlDeviceGetClockInfo(device, graphics ? nv::kClockGraphics : nv::kClockMem, &info->clk));
}

__attribute__((visibility("default"))) amdsmi_status_t amdsmi_set_gpu_clk_range(amdsmi_processor_handle processor,
                                                                                std::uint64_t min_mhz,
                                                                                std::uint64_t max_mhz,
                                                                                amdsmi_clk_type_t type) {
  nvmlDevice_t device = nullptr;
  if (amdsmi_status_t status = device_of(processor, &device); status != am::kSuccess) return status;
  if (type == am::kClockGraphics)
    return set_range(
        graphics_clocks(device), min_mhz, max_mhz,
        [&](unsigned mhz) { return nvmlDeviceSetGpuLockedClocks(device, mhz, mhz); },
        [&] { return nvmlDeviceResetGpuLockedClocks(device); });
  if (type == am::kClockMemory)
    return set_range(
        memory_clocks(device), min_mhz, max_mhz,
        [&](unsigned mhz) { return nvmlDeviceSetMemoryLockedClocks(device, mhz, mhz); },
        [&] { return nvmlDeviceResetMemoryLockedClocks(device); });
  return am::kNotSupported;
}

__attribute__((visibility("default"))) amdsmi_status_t amdsmi_set_gpu_perf_level(amdsmi_processor_handle processor,
                                                                                 amdsmi_dev_perf_level_t level) {
  nvmlDevice_t device = nullptr;
  if (amdsmi_status_t status = device_of(processor, &device); status != am::kSuccess) return status;
  if (level != am::kPerfLevelAuto) return am::kNotSupported;
  if (amdsmi_status_t status = status_of(nvmlDeviceResetGpuLockedClocks(device)); status != am::kSuccess) return status;
  return status_of(nvmlDeviceResetMemoryLockedClocks(device));
}

__attribute__((visibility("default"))) amdsmi_status_t amdsmi_get_power_cap_info(amdsmi_processor_handle processor,
                                                                                 std::uint32_t sensor,
                                                                                 amdsmi_power_cap_info_t* info) {
  nvmlDevice_t device = nullptr;
  if (info == nullptr || sensor != 0) return am::kInvalid;
  if (amdsmi_status_t status = device_of(processor, &device); status != am::kSuccess) return status;
  unsigned limit = 0, min_limit = 0, max_limit = 0;
  if (amdsmi_status_t status = status_of(nvmlDeviceGetPowerManagementLimit(device, &limit)); status != am::kSuccess)
    return status;
  if (amdsmi_status_t status = status_of(nvmlDeviceGetPowerManagementLimitConstraints(device, &min_limit, &max_limit));
      status != am::kSuccess)
    return status;
  *info = amdsmi_power_cap_info_t{};
  info->power_cap = std::uint64_t{limit} * 1000;
  info->default_power_cap = std::uint64_t{max_limit} * 1000;
  info->min_power_cap = std::uint64_t{min_limit} * 1000;
  info->max_power_cap = std::uint64_t{max_limit} * 1000;
  return am::kSuccess;
}

__attribute__((visibility("default"))) amdsmi_status_t amdsmi_set_power_cap(amdsmi_processor_handle processor,
                                                                            std::uint32_t sensor,
                                                                            std::uint64_t cap_uw) {
  nvmlDevice_t device = nullptr;
  if (sensor != 0) return am::kInvalid;
  if (amdsmi_status_t status = device_of(processor, &device); status != am::kSuccess) return status;
  if (cap_uw / 1000 > 0xFFFFFFFFull) return am::kInputOutOfBounds;
  nvmlReturn_t code = nvmlDeviceSetPowerManagementLimit(device, static_cast<unsigned>(cap_uw / 1000));
  return code == nv::kInvalidArgument ? am::kInputOutOfBounds : status_of(code);
}

__attribute__((visibility("default"))) amdsmi_status_t amdsmi_get_power_info(amdsmi_processor_handle processor,
                                                                             amdsmi_power_info_t* info) {
  nvmlDevice_t device = nullptr;
  if (info == nullptr) return am::kInvalid;
  if (amdsmi_status_t status = device_of(processor, &device); status != am::kSuccess) return status;
  unsigned power_mw = 0;
  if (amdsmi_status_t status = status_of(nvmlDeviceGetPowerUsage(device, &power_mw)); status != am::kSuccess)
    return status;
  const auto watts = static_cast<std::uint32_t>(std::lround(power_mw / 1000.0));
  const char* which = std::getenv("PERSEUS_FAKE_AMDSMI_POWER");
  const bool average = which != nullptr && std::strcmp(which, "average") == 0;
  *info = amdsmi_power_info_t{};
  info->socket_power = watts;
  info->current_socket_power = average ? am::kNotReported : watts;
  info->average_socket_power = average ? watts : am::kNotReported;
  info->power_limit = am::kNotReported;
  return am::kSuccess;
}

__attribute__((visibility("default"))) amdsmi_status_t amdsmi_get_energy_count(amdsmi_processor_handle processor,
                                                                               std::uint64_t* accumulator,
                                                                               float* resolution_uj,
                                                                               std::uint64_t* timestamp) {
  nvmlDevice_t device = nullptr;
  if (accumulator == nullptr || resolution_uj == nullptr || timestamp == nullptr) return am::kInvalid;
  if (amdsmi_status_t status = device_of(processor, &device); status != am::kSuccess) return status;
  unsigned long long energy_mj = 0;
  if (amdsmi_status_t status = status_of(nvmlDeviceGetTotalEnergyConsumption(device, &energy_mj));
      status != am::kSuccess)
    return status;
  *accumulator =
      static_cast<std::uint64_t>(std::llround(static_cast<double>(energy_mj) * 1000.0 / kEnergyResolutionUj));
  *resolution_uj = kEnergyResolutionUj;
  *timestamp = 0;
  return am::kSuccess;
}

}  // extern "C"
