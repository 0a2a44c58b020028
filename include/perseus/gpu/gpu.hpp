#pragma once
// GPU control behind one interface (docs/design.md#the-client): list devices and their clocks, lock and reset
// clocks, power limits, and the cumulative energy counter. The NVML implementation loads the
// library at run time, so perseus builds and runs on machines without a GPU.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace perseus::gpu {

// What went wrong, so callers can tell "no GPU here" from "not allowed" from "not supported".
// busy: another process owns the GPU (through perseus gpud).
enum class GpuErrorKind { library_missing, no_permission, not_supported, invalid_argument, busy, other };

class GpuError : public std::runtime_error {
 public:
  GpuError(GpuErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  GpuErrorKind kind() const { return kind_; }

 private:
  GpuErrorKind kind_;
};

struct PowerLimitRange {
  unsigned min_mw = 0, max_mw = 0;
  unsigned default_mw = 0;  // the limit the driver starts with; 0 where the backend cannot say

  // What a reset puts back: the driver's default, else the top of the range.
  unsigned reset_mw() const { return default_mw != 0 ? default_mw : max_mw; }
};

class GpuLibrary {
 public:
  virtual ~GpuLibrary() = default;
  virtual unsigned device_count() = 0;
  virtual std::string name(unsigned device) = 0;
  // NVML's stable identifier ("GPU-" and a UUID), which survives re-enumeration unlike the index.
  // Libraries that cannot tell throw GpuError(not_supported).
  virtual std::string uuid(unsigned device) {
    throw GpuError(GpuErrorKind::not_supported, "GPU " + std::to_string(device) + ": no UUID from this GPU library");
  }
  // Descending, as NVML lists them.
  virtual std::vector<unsigned> supported_memory_clocks(unsigned device) = 0;
  virtual std::vector<unsigned> supported_graphics_clocks(unsigned device, unsigned memory_clock) = 0;
  virtual unsigned current_graphics_clock(unsigned device) = 0;
  virtual unsigned current_memory_clock(unsigned device) = 0;
  virtual void lock_graphics_clock(unsigned device, unsigned min_mhz, unsigned max_mhz) = 0;
  virtual void reset_graphics_clock(unsigned device) = 0;
  virtual void lock_memory_clock(unsigned device, unsigned min_mhz, unsigned max_mhz) = 0;
  virtual void reset_memory_clock(unsigned device) = 0;
  virtual unsigned power_limit_mw(unsigned device) = 0;
  virtual PowerLimitRange power_limit_range(unsigned device) = 0;
  virtual void set_power_limit_mw(unsigned device, unsigned limit_mw) = 0;
  virtual std::uint64_t total_energy_mj(unsigned device) = 0;  // since the driver loaded
  virtual unsigned power_usage_mw(unsigned device) = 0;
};

// The library named by $PERSEUS_NVML_LIBRARY, else libnvidia-ml.so.1. Throws GpuError
// (library_missing) with the dlopen message and what to do about it.
std::unique_ptr<GpuLibrary> load_nvml(const std::string& path = "");

// The path load_nvml("") would open.
std::string default_nvml_path();

}  // namespace perseus::gpu
