#include "perseus/gpu/visible_devices.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace perseus::gpu {
namespace {

std::string trimmed(const std::string& text) {
  auto begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t comma; (comma = text.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(trimmed(text.substr(start, comma - start)));
  out.push_back(trimmed(text.substr(start)));
  return out;
}

// The device an entry names, nullopt when it names none (CUDA ends the list there).
std::optional<unsigned> device_of(GpuLibrary& gpus, unsigned count, const std::string& entry,
                                  std::vector<std::string>& uuids) {
  if (entry.rfind("MIG-", 0) == 0)
    throw GpuError(GpuErrorKind::not_supported,
                   fmt::format("{} entry '{}': MIG instances are not supported (name whole GPUs by index or GPU-UUID)",
                               kCudaVisibleDevicesEnv, entry));
  if (!entry.empty() && std::all_of(entry.begin(), entry.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
    if (entry.size() > 9) return std::nullopt;
    unsigned index = static_cast<unsigned>(std::stoul(entry));
    return index < count ? std::optional(index) : std::nullopt;
  }
  if (entry.rfind("GPU-", 0) != 0 || entry.size() == 4) return std::nullopt;
  if (uuids.empty())
    for (unsigned d = 0; d < count; ++d) uuids.push_back(gpus.uuid(d));
  std::optional<unsigned> found;
  for (unsigned d = 0; d < count; ++d) {
    if (uuids[d].rfind(entry, 0) != 0) continue;
    if (found) return std::nullopt;  // ambiguous prefix
    found = d;
  }
  return found;
}

unsigned mapped(const std::vector<unsigned>& nvml, unsigned cuda_index, const std::optional<std::string>& visible) {
  if (cuda_index < nvml.size()) return nvml[cuda_index];
  throw GpuError(
      GpuErrorKind::invalid_argument,
      fmt::format("GPU index {}: {} GPU{} visible ({}={})", cuda_index, nvml.size(), nvml.size() == 1 ? " is" : "s are",
                  kCudaVisibleDevicesEnv, visible ? "'" + *visible + "'" : "unset"));
}

class CudaNumbered final : public GpuLibrary {
 public:
  CudaNumbered(std::shared_ptr<GpuLibrary> gpus, std::vector<unsigned> nvml, std::optional<std::string> visible)
      : gpus_(std::move(gpus)), nvml_(std::move(nvml)), visible_(std::move(visible)) {}

  unsigned device_count() override { return static_cast<unsigned>(nvml_.size()); }
  std::string name(unsigned d) override { return gpus_->name(at(d)); }
  std::string uuid(unsigned d) override { return gpus_->uuid(at(d)); }
  std::vector<unsigned> supported_memory_clocks(unsigned d) override { return gpus_->supported_memory_clocks(at(d)); }
  std::vector<unsigned> supported_graphics_clocks(unsigned d, unsigned memory) override {
    return gpus_->supported_graphics_clocks(at(d), memory);
  }
  unsigned current_graphics_clock(unsigned d) override { return gpus_->current_graphics_clock(at(d)); }
  unsigned current_memory_clock(unsigned d) override { return gpus_->current_memory_clock(at(d)); }
  void lock_graphics_clock(unsigned d, unsigned low, unsigned high) override {
    gpus_->lock_graphics_clock(at(d), low, high);
  }
  void reset_graphics_clock(unsigned d) override { gpus_->reset_graphics_clock(at(d)); }
  void lock_memory_clock(unsigned d, unsigned low, unsigned high) override {
    gpus_->lock_memory_clock(at(d), low, high);
  }
  void reset_memory_clock(unsigned d) override { gpus_->reset_memory_clock(at(d)); }
  unsigned power_limit_mw(unsigned d) override { return gpus_->power_limit_mw(at(d)); }
  PowerLimitRange power_limit_range(unsigned d) override { return gpus_->power_limit_range(at(d)); }
  void set_power_limit_mw(unsigned d, unsigned limit) override { gpus_->set_power_limit_mw(at(d), limit); }
  std::uint64_t total_energy_mj(unsigned d) override { return gpus_->total_energy_mj(at(d)); }
  unsigned power_usage_mw(unsigned d) override { return gpus_->power_usage_mw(at(d)); }

 private:
  unsigned at(unsigned cuda_index) const { return mapped(nvml_, cuda_index, visible_); }

  std::shared_ptr<GpuLibrary> gpus_;
  std::vector<unsigned> nvml_;
  std::optional<std::string> visible_;
};

}  // namespace

std::optional<std::string> cuda_visible_devices_from_env() {
  const char* value = std::getenv(kCudaVisibleDevicesEnv);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::vector<unsigned> visible_nvml_indices(GpuLibrary& gpus, const std::optional<std::string>& visible) {
  unsigned count = gpus.device_count();
  std::vector<unsigned> out;
  if (!visible) {
    for (unsigned d = 0; d < count; ++d) out.push_back(d);
    return out;
  }
  std::vector<std::string> uuids;  // read once, only when an entry is a UUID
  for (const std::string& entry : split(*visible)) {
    auto device = device_of(gpus, count, entry, uuids);
    if (!device || std::find(out.begin(), out.end(), *device) != out.end()) break;
    out.push_back(*device);
  }
  return out;
}

unsigned nvml_index(GpuLibrary& gpus, unsigned cuda_index, const std::optional<std::string>& visible) {
  return mapped(visible_nvml_indices(gpus, visible), cuda_index, visible);
}

std::shared_ptr<GpuLibrary> cuda_numbered(std::shared_ptr<GpuLibrary> gpus, const std::optional<std::string>& visible) {
  auto indices = visible_nvml_indices(*gpus, visible);
  return std::make_shared<CudaNumbered>(std::move(gpus), std::move(indices), visible);
}

}  // namespace perseus::gpu
