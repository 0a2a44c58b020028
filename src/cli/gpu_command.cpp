// `perseus gpu`: what NVML says about this machine's GPUs. Read-only: it changes nothing.
#include <fmt/format.h>

#include <cstdio>

#include "perseus/cli/commands.hpp"
#include "perseus/gpu/gpu.hpp"
#include "perseus/util/error.hpp"

namespace perseus::cli {
namespace {

template <typename F>
std::string or_reason(F read) {
  try {
    return read();
  } catch (const gpu::GpuError& e) {
    return fmt::format("unavailable ({})", e.kind() == gpu::GpuErrorKind::not_supported ? "not supported" : e.what());
  }
}

std::string clock_list(const std::vector<unsigned>& clocks) {
  if (clocks.size() <= 8) return fmt::format("{}", fmt::join(clocks, " "));
  return fmt::format("{} values, {} .. {} MHz", clocks.size(), clocks.front(), clocks.back());
}

}  // namespace

Runner add_gpu_command(CLI::App& app) {
  auto library = std::make_shared<std::string>();
  auto all_clocks = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("gpu", "List GPUs, their supported clocks, current clocks, power limit and energy "
                                        "counter (read-only)");
  cmd->add_option("--nvml", *library, "NVML library to load (default: $PERSEUS_NVML_LIBRARY, else libnvidia-ml.so.1)");
  cmd->add_flag("--all-clocks", *all_clocks, "Print every supported graphics clock");
  return [library, all_clocks] {
    std::unique_ptr<gpu::GpuLibrary> nvml;
    try {
      nvml = gpu::load_nvml(*library);
    } catch (const gpu::GpuError& e) {
      throw Error(e.what(), kExitNoInput);
    }
    unsigned count = nvml->device_count();
    std::printf("%u GPU%s (NVML: %s)\n", count, count == 1 ? "" : "s",
                library->empty() ? gpu::default_nvml_path().c_str() : library->c_str());
    for (unsigned d = 0; d < count; ++d) {
      std::printf("GPU %u: %s\n", d, or_reason([&] { return nvml->name(d); }).c_str());
      std::vector<unsigned> memory;
      std::printf("  memory clocks:    %s MHz\n", or_reason([&] {
                    memory = nvml->supported_memory_clocks(d);
                    return fmt::format("{}", fmt::join(memory, " "));
                  }).c_str());
      if (!memory.empty()) {
        std::printf("  graphics clocks:  %s\n", or_reason([&] {
                      auto clocks = nvml->supported_graphics_clocks(d, memory.front());
                      return *all_clocks ? fmt::format("{} MHz", fmt::join(clocks, " ")) : clock_list(clocks);
                    }).c_str());
      }
      std::printf("  current clocks:   %s\n", or_reason([&] {
                    return fmt::format("graphics {} MHz, memory {} MHz", nvml->current_graphics_clock(d),
                                       nvml->current_memory_clock(d));
                  }).c_str());
      std::printf("  power limit:      %s\n", or_reason([&] {
                    auto range = nvml->power_limit_range(d);
                    return fmt::format("{:.0f} W (range {:.0f} .. {:.0f} W)", nvml->power_limit_mw(d) / 1000.0,
                                       range.min_mw / 1000.0, range.max_mw / 1000.0);
                  }).c_str());
      std::printf("  power draw:       %s\n",
                  or_reason([&] { return fmt::format("{:.1f} W", nvml->power_usage_mw(d) / 1000.0); }).c_str());
      std::printf("  energy counter:   %s\n",
                  or_reason([&] { return fmt::format("{:.3f} J", nvml->total_energy_mj(d) / 1000.0); }).c_str());
    }
    return kExitOk;
  };
}

}  // namespace perseus::cli
