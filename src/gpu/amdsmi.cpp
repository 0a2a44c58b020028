// AMD GPUs through AMD SMI (libamd_smi), loaded with dlopen as NVML is: each function is resolved
// once, and every failing call becomes a GpuError that names the call, the device and AMD SMI's
// own message.
//
// How perseus's GPU operations map onto AMD SMI:
//   clocks a plan may use   the range amdsmi_get_clock_info reports when the library is opened,
//                           in 15 MHz steps from the top (AMD GPUs take any clock in the range;
//                           15 MHz keeps plans as fine as on NVIDIA's A100 and H100)
//   lock a clock            amdsmi_set_gpu_clk_range(min, max) for the graphics or memory clock
//   reset the clocks        the range back to the one found at open, then amdsmi_set_gpu_perf_level
//                           AUTO (setting a range leaves the driver in its manual level)
//   power limit             amdsmi_get_power_cap_info / amdsmi_set_power_cap (µW), sensor 0
//   energy counter          amdsmi_get_energy_count: the accumulator times its resolution (µJ)
//   power draw              amdsmi_get_power_info: current_socket_power, else average_socket_power (W)
// GPUs are numbered in AMD SMI's order: every GPU processor of every socket.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "perseus/gpu/amdsmi_api.hpp"
#include "perseus/gpu/gpu.hpp"
#include "shared_library.hpp"

namespace perseus::gpu {
namespace {

constexpr unsigned kGraphicsClockStepMhz = 15;

GpuErrorKind kind_of(amdsmi_status_t code) {
  switch (code) {
    case amdsmi::kNoPermission:
      return GpuErrorKind::no_permission;
    case amdsmi::kNotSupported:
      return GpuErrorKind::not_supported;
    case amdsmi::kInvalid:
    case amdsmi::kInputOutOfBounds:
    case amdsmi::kNotFound:
      return GpuErrorKind::invalid_argument;
    case amdsmi::kBusy:
      return GpuErrorKind::busy;
    default:
      return GpuErrorKind::other;
  }
}

struct ClockRange {
  unsigned min_mhz = 0, max_mhz = 0;
};

class AmdSmiLibrary final : public GpuLibrary {
 public:
  explicit AmdSmiLibrary(const std::string& path)
      : library_(path, "AMD SMI", "Install ROCm's amd-smi-lib, or set PERSEUS_AMDSMI_LIBRARY to the library's path",
                 "AMD SMI 24 (ROCm 6.1) or later is needed") {
    resolve(init_, "amdsmi_init");
    resolve(shut_down_, "amdsmi_shut_down");
    resolve(status_string_, "amdsmi_status_code_to_string");
    resolve(get_sockets_, "amdsmi_get_socket_handles");
    resolve(get_processors_, "amdsmi_get_processor_handles");
    resolve(get_asic_info_, "amdsmi_get_gpu_asic_info");
    resolve(get_uuid_, "amdsmi_get_gpu_device_uuid");
    resolve(get_clock_info_, "amdsmi_get_clock_info");
    resolve(set_clock_range_, "amdsmi_set_gpu_clk_range");
    resolve(set_perf_level_, "amdsmi_set_gpu_perf_level");
    resolve(get_power_cap_info_, "amdsmi_get_power_cap_info");
    resolve(set_power_cap_, "amdsmi_set_power_cap");
    resolve(get_power_info_, "amdsmi_get_power_info");
    resolve(get_energy_, "amdsmi_get_energy_count");
    check(init_(amdsmi::kInitAmdGpus), "amdsmi_init", -1);
    try {
      list_gpus();
    } catch (const GpuError&) {
      shut_down_();
      throw;
    }
  }

  ~AmdSmiLibrary() override { shut_down_(); }

  unsigned device_count() override { return static_cast<unsigned>(gpus_.size()); }

  std::string name(unsigned device) override {
    alignas(8) std::array<char, amdsmi::kAsicInfoBufferSize> info{};
    check(get_asic_info_(gpu(device).handle, info.data()), "amdsmi_get_gpu_asic_info", device);
    info.back() = '\0';
    return info.data();
  }

  std::string uuid(unsigned device) override {
    std::array<char, 96> buffer{};
    unsigned length = static_cast<unsigned>(buffer.size());
    check(get_uuid_(gpu(device).handle, &length, buffer.data()), "amdsmi_get_gpu_device_uuid", device);
    buffer.back() = '\0';
    return buffer.data();
  }

  std::vector<unsigned> supported_memory_clocks(unsigned device) override {
    const ClockRange& range = clock_range(device, gpu(device).memory, "memory");
    if (range.min_mhz == range.max_mhz) return {range.max_mhz};
    return {range.max_mhz, range.min_mhz};
  }

  // AMD's graphics clock range does not depend on the memory clock.
  std::vector<unsigned> supported_graphics_clocks(unsigned device, unsigned) override {
    const ClockRange& range = clock_range(device, gpu(device).graphics, "graphics");
    std::vector<unsigned> out;
    for (unsigned f = range.max_mhz;; f -= kGraphicsClockStepMhz) {
      out.push_back(f);
      if (f < range.min_mhz + kGraphicsClockStepMhz) break;
    }
    return out;
  }

  unsigned current_graphics_clock(unsigned device) override { return clock_info(device, amdsmi::kClockGraphics).clk; }
  unsigned current_memory_clock(unsigned device) override { return clock_info(device, amdsmi::kClockMemory).clk; }

  void lock_graphics_clock(unsigned device, unsigned min_mhz, unsigned max_mhz) override {
    set_range(device, min_mhz, max_mhz, amdsmi::kClockGraphics);
  }
  void reset_graphics_clock(unsigned device) override {
    reset_clock(device, gpu(device).graphics, "graphics", amdsmi::kClockGraphics);
  }
  void lock_memory_clock(unsigned device, unsigned min_mhz, unsigned max_mhz) override {
    set_range(device, min_mhz, max_mhz, amdsmi::kClockMemory);
  }
  void reset_memory_clock(unsigned device) override {
    reset_clock(device, gpu(device).memory, "memory", amdsmi::kClockMemory);
  }

  unsigned power_limit_mw(unsigned device) override {
    return static_cast<unsigned>(power_caps(device).power_cap / 1000);
  }
  PowerLimitRange power_limit_range(unsigned device) override {
    amdsmi_power_cap_info_t caps = power_caps(device);
    return {static_cast<unsigned>(caps.min_power_cap / 1000), static_cast<unsigned>(caps.max_power_cap / 1000),
            static_cast<unsigned>(caps.default_power_cap / 1000)};
  }
  void set_power_limit_mw(unsigned device, unsigned limit_mw) override {
    check(set_power_cap_(gpu(device).handle, 0, std::uint64_t{limit_mw} * 1000), "amdsmi_set_power_cap", device);
  }

  std::uint64_t total_energy_mj(unsigned device) override {
    std::uint64_t accumulator = 0, timestamp = 0;
    float resolution_uj = 0;
    check(get_energy_(gpu(device).handle, &accumulator, &resolution_uj, &timestamp), "amdsmi_get_energy_count", device);
    return static_cast<std::uint64_t>(std::llround(static_cast<double>(accumulator) * resolution_uj / 1000.0));
  }

  unsigned power_usage_mw(unsigned device) override {
    amdsmi_power_info_t info{};
    check(get_power_info_(gpu(device).handle, &info), "amdsmi_get_power_info", device);
    std::uint32_t watts =
        info.current_socket_power != amdsmi::kNotReported ? info.current_socket_power : info.average_socket_power;
    if (watts == amdsmi::kNotReported)
      throw GpuError(GpuErrorKind::not_supported,
                     fmt::format("amdsmi_get_power_info on GPU {}: the GPU reports no socket power", device));
    return watts * 1000;
  }

 private:
  struct Gpu {
    amdsmi_processor_handle handle = nullptr;
    // The ranges found at open, restored by a reset; nullopt with the reason where AMD SMI gave none.
    std::optional<ClockRange> graphics, memory;
    std::string graphics_error, memory_error;
  };

  template <typename Fn>
  void resolve(Fn& fn, const char* symbol) {
    library_.resolve(fn, symbol);
  }

  void check(amdsmi_status_t code, const char* call, long device) {
    if (code == amdsmi::kSuccess) return;
    const char* text = nullptr;
    if (status_string_(code, &text) != amdsmi::kSuccess || text == nullptr) text = "unknown status";
    std::string where = device >= 0 ? fmt::format(" on GPU {}", device) : "";
    std::string hint;
    if (code == amdsmi::kNoPermission) hint = " (changing clocks or power limits needs root)";
    throw GpuError(kind_of(code), fmt::format("{}{} failed: {} (AMD SMI status {}){}", call, where, text, code, hint));
  }

  // Every GPU processor of every socket, with the clock ranges it runs in now (before perseus
  // changes them).
  void list_gpus() {
    std::uint32_t sockets = 0;
    check(get_sockets_(&sockets, nullptr), "amdsmi_get_socket_handles", -1);
    std::vector<amdsmi_socket_handle> socket_handles(sockets);
    check(get_sockets_(&sockets, socket_handles.data()), "amdsmi_get_socket_handles", -1);
    socket_handles.resize(sockets);
    for (amdsmi_socket_handle socket : socket_handles) {
      std::uint32_t count = 0;
      check(get_processors_(socket, &count, nullptr), "amdsmi_get_processor_handles", -1);
      std::vector<amdsmi_processor_handle> processors(count);
      check(get_processors_(socket, &count, processors.data()), "amdsmi_get_processor_handles", -1);
      processors.resize(count);
      for (amdsmi_processor_handle processor : processors) gpus_.push_back(Gpu{processor, {}, {}, {}, {}});
    }
    for (unsigned d = 0; d < gpus_.size(); ++d) {
      read_range(d, amdsmi::kClockGraphics, gpus_[d].graphics, gpus_[d].graphics_error);
      read_range(d, amdsmi::kClockMemory, gpus_[d].memory, gpus_[d].memory_error);
    }
  }

  void read_range(unsigned device, amdsmi_clk_type_t type, std::optional<ClockRange>& range, std::string& error) {
    try {
      amdsmi_clk_info_t info = clock_info(device, type);
      if (info.min_clk == 0 || info.min_clk > info.max_clk)
        throw GpuError(GpuErrorKind::not_supported, fmt::format("amdsmi_get_clock_info on GPU {}: range {} .. {} MHz",
                                                                device, info.min_clk, info.max_clk));
      range = ClockRange{info.min_clk, info.max_clk};
    } catch (const GpuError& e) {
      error = e.what();
    }
  }

  const ClockRange& clock_range(unsigned device, const std::optional<ClockRange>& range, const char* which) {
    if (range) return *range;
    const Gpu& g = gpus_[device];
    throw GpuError(GpuErrorKind::not_supported,
                   fmt::format("GPU {}: no {} clock range from AMD SMI ({})", device, which,
                               &range == &g.graphics ? g.graphics_error : g.memory_error));
  }

  const Gpu& gpu(unsigned device) const {
    if (device >= gpus_.size())
      throw GpuError(GpuErrorKind::invalid_argument,
                     fmt::format("GPU {}: AMD SMI lists {} GPU{}", device, gpus_.size(), gpus_.size() == 1 ? "" : "s"));
    return gpus_[device];
  }

  amdsmi_clk_info_t clock_info(unsigned device, amdsmi_clk_type_t type) {
    amdsmi_clk_info_t info{};
    check(get_clock_info_(gpu(device).handle, type, &info), "amdsmi_get_clock_info", device);
    return info;
  }

  // Back to the range read when the library opened, then the driver's automatic performance level.
  void reset_clock(unsigned device, const std::optional<ClockRange>& opened, const char* which,
                   amdsmi_clk_type_t type) {
    const ClockRange& range = clock_range(device, opened, which);
    set_range(device, range.min_mhz, range.max_mhz, type);
    check(set_perf_level_(gpu(device).handle, amdsmi::kPerfLevelAuto), "amdsmi_set_gpu_perf_level", device);
  }
  void set_range(unsigned device, unsigned min_mhz, unsigned max_mhz, amdsmi_clk_type_t type) {
    check(set_clock_range_(gpu(device).handle, min_mhz, max_mhz, type), "amdsmi_set_gpu_clk_range", device);
  }

  amdsmi_power_cap_info_t power_caps(unsigned device) {
    amdsmi_power_cap_info_t caps{};
    check(get_power_cap_info_(gpu(device).handle, 0, &caps), "amdsmi_get_power_cap_info", device);
    return caps;
  }

  SharedLibrary library_;
  std::vector<Gpu> gpus_;
  amdsmi::InitFn init_ = nullptr;
  amdsmi::ShutDownFn shut_down_ = nullptr;
  amdsmi::StatusStringFn status_string_ = nullptr;
  amdsmi::GetSocketHandlesFn get_sockets_ = nullptr;
  amdsmi::GetProcessorHandlesFn get_processors_ = nullptr;
  amdsmi::GetAsicInfoFn get_asic_info_ = nullptr;
  amdsmi::GetUuidFn get_uuid_ = nullptr;
  amdsmi::GetClockInfoFn get_clock_info_ = nullptr;
  amdsmi::SetClockRangeFn set_clock_range_ = nullptr;
  amdsmi::SetPerfLevelFn set_perf_level_ = nullptr;
  amdsmi::GetPowerCapInfoFn get_power_cap_info_ = nullptr;
  amdsmi::SetPowerCapFn set_power_cap_ = nullptr;
  amdsmi::GetPowerInfoFn get_power_info_ = nullptr;
  amdsmi::GetEnergyCountFn get_energy_ = nullptr;
};

}  // namespace

std::unique_ptr<GpuLibrary> load_amdsmi(const std::string& path) { return std::make_unique<AmdSmiLibrary>(path); }

}  // namespace perseus::gpu
