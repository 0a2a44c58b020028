// `perseus gpu`: what the GPU library says about this machine's GPUs (read-only), directly or through
// `perseus gpud`; `perseus gpu reset` puts clocks and power limits back to their defaults.
#include <fmt/format.h>

#include <cstdio>

#include "perseus/cli/arguments.hpp"
#include "perseus/cli/commands.hpp"
#include "perseus/gpu/backends.hpp"
#include "perseus/gpud/client.hpp"
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

// The library to use, as an Error with exit 66 when there is none (64 for a bad --gpu-library).
std::unique_ptr<gpu::GpuLibrary> open_library(const std::string& socket, const std::string& backend,
                                              const std::string& file) {
  try {
    if (gpud::gpud_socket_from(socket).empty()) return gpu::load_gpu_library(backend, file);
    return gpud::open_gpu_library(socket, file);
  } catch (const gpu::GpuError& e) {
    throw Error(e.what(),
                e.kind() == gpu::GpuErrorKind::invalid_argument ? ErrorKind::bad_setting : ErrorKind::not_found);
  }
}

int reset_gpus(gpu::GpuLibrary& library, int device) {
  unsigned count = library.device_count();
  if (device >= 0 && static_cast<unsigned>(device) >= count)
    throw Error(fmt::format("--device {}: this node has {} GPU{}", device, count, count == 1 ? "" : "s"),
                ErrorKind::bad_setting);
  int failures = 0;
  for (unsigned d = 0; d < count; ++d) {
    if (device >= 0 && d != static_cast<unsigned>(device)) continue;
    std::vector<std::string> failed;
    auto attempt = [&](const char* what, auto action) {
      try {
        action();
      } catch (const gpu::GpuError& e) {
        failed.push_back(fmt::format("{}: {}", what, e.what()));
      }
    };
    attempt("graphics clock", [&] { library.reset_graphics_clock(d); });
    attempt("memory clock", [&] { library.reset_memory_clock(d); });
    std::string limit;
    attempt("power limit", [&] {
      const auto range = library.power_limit_range(d);
      library.set_power_limit_mw(d, range.reset_mw());
      limit =
          fmt::format("{:.0f} W, {}", range.reset_mw() / 1000.0,
                      range.default_mw != 0 ? "the driver's default" : "the top of its range (no default reported)");
    });
    if (failed.empty()) {
      std::printf("GPU %u: clocks and power limit reset (%s)\n", d, limit.c_str());
    } else {
      ++failures;
      std::fprintf(stderr, "GPU %u: %s\n", d, fmt::format("{}", fmt::join(failed, "; ")).c_str());
    }
  }
  return failures == 0 ? kExitOk : kExitFailure;
}

}  // namespace

Runner add_gpu_command(CLI::App& app) {
  auto library = std::make_shared<std::string>();
  auto backend = std::make_shared<std::string>();
  auto socket = std::make_shared<std::string>();
  auto all_clocks = std::make_shared<bool>(false);
  auto device = std::make_shared<int>(-1);
  auto* cmd = app.add_subcommand("gpu",
                                 "List GPUs, their supported clocks, current clocks, power limit and energy "
                                 "counter (read-only); `gpu reset` resets clocks and power limits");
  cmd->add_option("--gpu-library", *backend, gpu::gpu_library_help());
  cmd->add_option("--nvml", *library, gpu::gpu_library_file_help());
  cmd->add_option("--gpud", *socket,
                  "Go through the perseus gpud listening on this socket (default: "
                  "$PERSEUS_GPUD_SOCKET when set, else NVML directly)");
  cmd->add_flag("--all-clocks", *all_clocks, "Print every supported graphics clock");
  auto* reset = cmd->add_subcommand("reset",
                                    "Reset GPUs' graphics and memory clocks and power limits to their "
                                    "defaults (needs root, or the gpud socket; a GPU a live rank owns through "
                                    "gpud is refused)");
  reset->fallthrough();  // --gpud / --nvml / --gpu-library after `reset` too
  reset->add_option("--device", *device, "Only this GPU (NVML index); default: all")->check(non_negative());
  return [library, backend, socket, all_clocks, device, reset]() -> int {
    std::unique_ptr<gpu::GpuLibrary> nvml = open_library(*socket, *backend, *library);
    if (reset->parsed()) return reset_gpus(*nvml, *device);
    std::string through = gpud::gpud_socket_from(*socket);
    unsigned count = nvml->device_count();
    std::printf("%u GPU%s (%s)\n", count, count == 1 ? "" : "s",
                !through.empty() ? fmt::format("through perseus gpud at {}", through).c_str()
                                 : gpu::describe_gpu_library(*backend, *library).c_str());
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
                                                  return *all_clocks ? fmt::format("{} MHz", fmt::join(clocks, " "))
                                                                     : clock_list(clocks);
                                                }).c_str());
      }
      std::printf("  current clocks:   %s\n", or_reason([&] {
                                                return fmt::format("graphics {} MHz, memory {} MHz",
                                                                   nvml->current_graphics_clock(d),
                                                                   nvml->current_memory_clock(d));
                                              }).c_str());
      std::printf("  power limit:      %s\n",
                  or_reason([&] {
                    auto range = nvml->power_limit_range(d);
                    return fmt::format(
                        "{:.0f} W (range {:.0f} .. {:.0f} W{})", nvml->power_limit_mw(d) / 1000.0,
                        range.min_mw / 1000.0, range.max_mw / 1000.0,
                        range.default_mw != 0 ? fmt::format(", default {:.0f} W", range.default_mw / 1000.0) : "");
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
