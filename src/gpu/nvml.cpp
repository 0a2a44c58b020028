// NVML loaded with dlopen: each function is resolved once, and every failing call becomes a
// GpuError that names the call, the device and NVML's own message.
#include <cstdlib>
#include <fmt/format.h>

#include "perseus/gpu/gpu.hpp"
#include "perseus/gpu/nvml_api.hpp"
#include "shared_library.hpp"

namespace perseus::gpu {
namespace {

GpuErrorKind kind_of(nvmlReturn_t code) {
  switch (code) {
    case nvml::kNoPermission:
      return GpuErrorKind::no_permission;
    case nvml::kNotSupported:
      return GpuErrorKind::not_supported;
    case nvml::kInvalidArgument:
    case nvml::kNotFound:
      return GpuErrorKind::invalid_argument;
    default:
      return GpuErrorKind::other;
  }
}

class NvmlLibrary final : public GpuLibrary {
 public:
  explicit NvmlLibrary(const std::string& path)
      : library_(path, "NVML", "Install the NVIDIA driver, or set PERSEUS_NVML_LIBRARY to the library's path",
                 "the NVIDIA driver is too old") {
    resolve(init_, "nvmlInit_v2");
    resolve(shutdown_, "nvmlShutdown");
    resolve(error_string_, "nvmlErrorString");
    resolve(get_count_, "nvmlDeviceGetCount_v2");
    resolve(get_handle_, "nvmlDeviceGetHandleByIndex_v2");
    resolve(get_name_, "nvmlDeviceGetName");
    get_uuid_ = library_.optional<nvml::GetNameFn>("nvmlDeviceGetUUID");  // optional: uuid() says so
    resolve(get_mem_clocks_, "nvmlDeviceGetSupportedMemoryClocks");
    resolve(get_gr_clocks_, "nvmlDeviceGetSupportedGraphicsClocks");
    resolve(set_gpu_locked_, "nvmlDeviceSetGpuLockedClocks");
    resolve(reset_gpu_locked_, "nvmlDeviceResetGpuLockedClocks");
    resolve(set_mem_locked_, "nvmlDeviceSetMemoryLockedClocks");
    resolve(reset_mem_locked_, "nvmlDeviceResetMemoryLockedClocks");
    resolve(get_limit_, "nvmlDeviceGetPowerManagementLimit");
    resolve(get_constraints_, "nvmlDeviceGetPowerManagementLimitConstraints");
    resolve(set_limit_, "nvmlDeviceSetPowerManagementLimit");
    get_default_limit_ = library_.optional<nvml::GetUintFn>("nvmlDeviceGetPowerManagementDefaultLimit");
    resolve(get_energy_, "nvmlDeviceGetTotalEnergyConsumption");
    resolve(get_power_, "nvmlDeviceGetPowerUsage");
    resolve(get_clock_, "nvmlDeviceGetClockInfo");
    check(init_(), "nvmlInit", -1);
  }

  ~NvmlLibrary() override {
    if (shutdown_ != nullptr) shutdown_();
  }

  unsigned device_count() override {
    unsigned count = 0;
    check(get_count_(&count), "nvmlDeviceGetCount", -1);
    return count;
  }

  std::string name(unsigned device) override {
    char buffer[96] = {};
    check(get_name_(handle(device), buffer, sizeof buffer), "nvmlDeviceGetName", device);
    return buffer;
  }

  std::string uuid(unsigned device) override {
    if (get_uuid_ == nullptr)
      throw GpuError(GpuErrorKind::not_supported, fmt::format("{} does not export nvmlDeviceGetUUID", library_.path()));
    char buffer[96] = {};  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
    check(get_uuid_(handle(device), buffer, sizeof buffer), "nvmlDeviceGetUUID", device);
    return buffer;
  }

  std::vector<unsigned> supported_memory_clocks(unsigned device) override {
    return list([&](unsigned* count, unsigned* out) { return get_mem_clocks_(handle(device), count, out); },
                "nvmlDeviceGetSupportedMemoryClocks", device);
  }

  std::vector<unsigned> supported_graphics_clocks(unsigned device, unsigned memory_clock) override {
    return list(
        [&](unsigned* count, unsigned* out) { return get_gr_clocks_(handle(device), memory_clock, count, out); },
        "nvmlDeviceGetSupportedGraphicsClocks", device);
  }

  unsigned current_graphics_clock(unsigned device) override { return clock(device, nvml::kClockGraphics); }
  unsigned current_memory_clock(unsigned device) override { return clock(device, nvml::kClockMem); }

  void lock_graphics_clock(unsigned device, unsigned min_mhz, unsigned max_mhz) override {
    check(set_gpu_locked_(handle(device), min_mhz, max_mhz), "nvmlDeviceSetGpuLockedClocks", device);
  }
  void reset_graphics_clock(unsigned device) override {
    check(reset_gpu_locked_(handle(device)), "nvmlDeviceResetGpuLockedClocks", device);
  }
  void lock_memory_clock(unsigned device, unsigned min_mhz, unsigned max_mhz) override {
    check(set_mem_locked_(handle(device), min_mhz, max_mhz), "nvmlDeviceSetMemoryLockedClocks", device);
  }
  void reset_memory_clock(unsigned device) override {
    check(reset_mem_locked_(handle(device)), "nvmlDeviceResetMemoryLockedClocks", device);
  }

  unsigned power_limit_mw(unsigned device) override {
    unsigned value = 0;
    check(get_limit_(handle(device), &value), "nvmlDeviceGetPowerManagementLimit", device);
    return value;
  }
  PowerLimitRange power_limit_range(unsigned device) override {
    PowerLimitRange range;
    check(get_constraints_(handle(device), &range.min_mw, &range.max_mw),
          "nvmlDeviceGetPowerManagementLimitConstraints", device);
    // The default is extra: a GPU that does not report it (NOT_SUPPORTED) still has its range.
    if (get_default_limit_ != nullptr && get_default_limit_(handle(device), &range.default_mw) != nvml::kSuccess)
      range.default_mw = 0;
    return range;
  }
  void set_power_limit_mw(unsigned device, unsigned limit_mw) override {
    check(set_limit_(handle(device), limit_mw), "nvmlDeviceSetPowerManagementLimit", device);
  }
  std::uint64_t total_energy_mj(unsigned device) override {
    unsigned long long value = 0;
    check(get_energy_(handle(device), &value), "nvmlDeviceGetTotalEnergyConsumption", device);
    return value;
  }
  unsigned power_usage_mw(unsigned device) override {
    unsigned value = 0;
    check(get_power_(handle(device), &value), "nvmlDeviceGetPowerUsage", device);
    return value;
  }

 private:
  template <typename Fn>
  void resolve(Fn& fn, const char* symbol) {
    library_.resolve(fn, symbol);
  }

  void check(nvmlReturn_t code, const char* call, long device) {
    if (code == nvml::kSuccess) return;
    std::string where = device >= 0 ? fmt::format(" on GPU {}", device) : "";
    std::string hint;
    if (code == nvml::kNoPermission) hint = " (changing clocks or power limits needs root or CAP_SYS_ADMIN)";
    throw GpuError(kind_of(code),
                   fmt::format("{}{} failed: {} (NVML error {}){}", call, where, error_string_(code), code, hint));
  }

  nvmlDevice_t handle(unsigned device) {
    nvmlDevice_t out = nullptr;
    check(get_handle_(device, &out), "nvmlDeviceGetHandleByIndex", device);
    return out;
  }

  unsigned clock(unsigned device, nvmlClockType_t type) {
    unsigned value = 0;
    check(get_clock_(handle(device), type, &value), "nvmlDeviceGetClockInfo", device);
    return value;
  }

  // NVML's two-call pattern: ask with room for many, and retry with the size it asks for.
  template <typename Call>
  std::vector<unsigned> list(Call call, const char* name, unsigned device) {
    std::vector<unsigned> out(256);
    unsigned count = static_cast<unsigned>(out.size());
    nvmlReturn_t code = call(&count, out.data());
    if (code == nvml::kInsufficientSize) {
      out.resize(count);
      code = call(&count, out.data());
    }
    check(code, name, device);
    out.resize(count);
    return out;
  }

  SharedLibrary library_;
  nvml::InitFn init_ = nullptr;
  nvml::ShutdownFn shutdown_ = nullptr;
  nvml::ErrorStringFn error_string_ = nullptr;
  nvml::GetCountFn get_count_ = nullptr;
  nvml::GetHandleByIndexFn get_handle_ = nullptr;
  nvml::GetNameFn get_name_ = nullptr;
  nvml::GetNameFn get_uuid_ = nullptr;
  nvml::GetSupportedMemoryClocksFn get_mem_clocks_ = nullptr;
  nvml::GetSupportedGraphicsClocksFn get_gr_clocks_ = nullptr;
  nvml::SetLockedClocksFn set_gpu_locked_ = nullptr;
  nvml::ResetLockedClocksFn reset_gpu_locked_ = nullptr;
  nvml::SetLockedClocksFn set_mem_locked_ = nullptr;
  nvml::ResetLockedClocksFn reset_mem_locked_ = nullptr;
  nvml::GetUintFn get_limit_ = nullptr;
  nvml::GetUintFn get_default_limit_ = nullptr;  // optional: the range's default is then unknown
  nvml::GetConstraintsFn get_constraints_ = nullptr;
  nvml::SetUintFn set_limit_ = nullptr;
  nvml::GetEnergyFn get_energy_ = nullptr;
  nvml::GetUintFn get_power_ = nullptr;
  nvml::GetClockInfoFn get_clock_ = nullptr;
};

}  // namespace

std::string default_nvml_path() {
  const char* env = std::getenv("PERSEUS_NVML_LIBRARY");
  return env != nullptr && *env != '\0' ? env : "libnvidia-ml.so.1";
}

std::unique_ptr<GpuLibrary> load_nvml(const std::string& path) {
  return std::make_unique<NvmlLibrary>(path.empty() ? default_nvml_path() : path);
}

}  // namespace perseus::gpu
