// gpud's metrics in the Prometheus text exposition format 0.0.4, and the metrics address's syntax.
#include <boost/asio/ip/address.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <optional>

#include "perseus/gpud/metrics_endpoint.hpp"
#include "perseus/util/error.hpp"
#include "perseus/util/prometheus_text.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus::gpud {
namespace {

class Exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    fmt::format_to(std::back_inserter(text), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  template <typename Value>
  void sample(std::string_view name, std::string_view labels, Value value) {
    if (labels.empty()) fmt::format_to(std::back_inserter(text), "{} {}\n", name, value);
    else fmt::format_to(std::back_inserter(text), "{}{{{}}} {}\n", name, labels, value);
  }
  std::string text;
};

// One live read of one GPU: its value, or nothing when it failed (logged once until it works again).
template <typename Read>
auto read_gpu(ReadFailures& failures, unsigned device, const char* what, Read read) -> std::optional<decltype(read())> {
  std::string key = fmt::format("GPU {} {}", device, what);
  try {
    auto value = read();
    if (failures.failing.erase(key) > 0) spdlog::info("metrics: {} can be read again", key);
    return value;
  } catch (const std::exception& e) {
    ++failures.total;
    if (failures.failing.insert(key).second)
      spdlog::warn("metrics: cannot read {}: {} (left out of /metrics until it can; logged once)", key,
                   safe_text(e.what()));
    return std::nullopt;
  }
}

}  // namespace

MetricsAddress parse_metrics_address(std::string_view text) {
  auto usage = [&](std::string_view why) {
    return SettingError("metrics_address",
                        fmt::format("metrics_address '{}': {} (expected PORT, HOST:PORT or [IPV6]:PORT, e.g. "
                                    "127.0.0.1:9400)",
                                    safe_text(text, 100), why));
  };
  MetricsAddress out{"127.0.0.1", 0};
  std::string_view port = text;
  if (auto colon = text.rfind(':'); colon != std::string_view::npos) {
    std::string_view host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    else if (host.find(':') != std::string_view::npos) throw usage("an IPv6 address goes in brackets");
    out.host = std::string(host);
    boost::system::error_code ec;
    boost::asio::ip::make_address(out.host, ec);
    if (ec) throw usage(fmt::format("'{}' is not an IP address", safe_text(host, 100)));
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535)
    throw usage("the port must be a number from 0 to 65535");
  out.port = static_cast<unsigned short>(value);
  return out;
}

bool is_loopback(const std::string& host) {
  boost::system::error_code ec;
  auto address = boost::asio::ip::make_address(host, ec);
  return !ec && address.is_loopback();
}

std::vector<std::string> gpu_labels(gpu::GpuLibrary& gpu, unsigned device_count) {
  std::vector<std::string> out;
  for (unsigned d = 0; d < device_count; ++d) {
    std::string id;
    try {
      id = gpu.uuid(d);
    } catch (const std::exception& e) {
      spdlog::info("metrics: GPU {} has no UUID ({}): its uuid label is its name", d, safe_text(e.what()));
      try {
        id = gpu.name(d);
      } catch (const std::exception&) {}
    }
    out.push_back(fmt::format("gpu=\"{}\",uuid=\"{}\"", d, prometheus_label_value(safe_text(id, 200))));
  }
  return out;
}

std::string render_metrics(const DaemonStats& stats, gpu::GpuLibrary& gpu, const std::vector<std::string>& labels,
                           ReadFailures& failures) {
  Exposition out;
  const unsigned count = static_cast<unsigned>(std::min(stats.gpus.size(), labels.size()));

  out.family("perseus_gpud_gpus", "gauge", "GPUs the daemon manages.");
  out.sample("perseus_gpud_gpus", "", count);
  out.family("perseus_gpud_connections", "gauge", "Client connections open on the daemon's socket.");
  out.sample("perseus_gpud_connections", "", stats.connections);
  out.family("perseus_gpud_requests_total", "counter",
             "Requests answered, by operation (malformed: not a request) and outcome (ok or the error kind).");
  for (const auto& [key, n] : stats.requests)
    out.sample("perseus_gpud_requests_total", fmt::format("op=\"{}\",outcome=\"{}\"", key.first, key.second), n);

  // What the daemon knows of each GPU.
  out.family("perseus_gpud_gpu_owned", "gauge", "1 while a client connection owns the GPU (its owner is logged).");
  for (unsigned d = 0; d < count; ++d) out.sample("perseus_gpud_gpu_owned", labels[d], stats.gpus[d].owned ? 1 : 0);
  out.family("perseus_gpud_graphics_clock_locked", "gauge", "1 while a client has the GPU's SM clock locked.");
  for (unsigned d = 0; d < count; ++d)
    out.sample("perseus_gpud_graphics_clock_locked", labels[d], stats.gpus[d].locked_graphics_mhz != 0 ? 1 : 0);
  out.family("perseus_gpud_locked_graphics_clock_megahertz", "gauge",
             "The SM clock a client locked the GPU to (only GPUs with a locked SM clock).");
  for (unsigned d = 0; d < count; ++d)
    if (stats.gpus[d].locked_graphics_mhz != 0)
      out.sample("perseus_gpud_locked_graphics_clock_megahertz", labels[d], stats.gpus[d].locked_graphics_mhz);
  out.family("perseus_gpud_locked_memory_clock_megahertz", "gauge",
             "The memory clock a client locked the GPU to (only GPUs with a locked memory clock).");
  for (unsigned d = 0; d < count; ++d)
    if (stats.gpus[d].locked_memory_mhz != 0)
      out.sample("perseus_gpud_locked_memory_clock_megahertz", labels[d], stats.gpus[d].locked_memory_mhz);
  out.family("perseus_gpud_resets_total", "counter",
             "Resets of what a client set on the GPU: when it disconnected, released the GPU or asked for a reset.");
  for (unsigned d = 0; d < count; ++d) out.sample("perseus_gpud_resets_total", labels[d], stats.gpus[d].resets);
  out.family("perseus_gpud_reset_failures_total", "counter", "Those resets that failed in part (see the log).");
  for (unsigned d = 0; d < count; ++d)
    out.sample("perseus_gpud_reset_failures_total", labels[d], stats.gpus[d].reset_failures);

  // Live reads from NVML; a GPU that fails one is left out of that family only.
  struct Live {
    std::optional<unsigned> clock_mhz, limit_mw, power_mw;
    std::optional<std::uint64_t> energy_mj;
  };
  std::vector<Live> live(count);
  for (unsigned d = 0; d < count; ++d) {
    live[d].clock_mhz = read_gpu(failures, d, "SM clock", [&] { return gpu.current_graphics_clock(d); });
    live[d].limit_mw = read_gpu(failures, d, "power limit", [&] { return gpu.power_limit_mw(d); });
    live[d].power_mw = read_gpu(failures, d, "power", [&] { return gpu.power_usage_mw(d); });
    live[d].energy_mj = read_gpu(failures, d, "energy counter", [&] { return gpu.total_energy_mj(d); });
  }
  out.family("perseus_gpud_graphics_clock_megahertz", "gauge", "The GPU's current SM clock.");
  for (unsigned d = 0; d < count; ++d)
    if (live[d].clock_mhz) out.sample("perseus_gpud_graphics_clock_megahertz", labels[d], *live[d].clock_mhz);
  out.family("perseus_gpud_power_limit_watts", "gauge", "The GPU's current power limit.");
  for (unsigned d = 0; d < count; ++d)
    if (live[d].limit_mw) out.sample("perseus_gpud_power_limit_watts", labels[d], *live[d].limit_mw / 1000.0);
  out.family("perseus_gpud_power_watts", "gauge", "The GPU's power draw.");
  for (unsigned d = 0; d < count; ++d)
    if (live[d].power_mw) out.sample("perseus_gpud_power_watts", labels[d], *live[d].power_mw / 1000.0);
  out.family("perseus_gpud_energy_joules_total", "counter",
             "The GPU's energy counter (NVML's, since the driver loaded).");
  for (unsigned d = 0; d < count; ++d)
    if (live[d].energy_mj) out.sample("perseus_gpud_energy_joules_total", labels[d], *live[d].energy_mj / 1000.0);
  out.family("perseus_gpud_gpu_read_failures_total", "counter",
             "GPU reads for /metrics that failed (each logged once).");
  out.sample("perseus_gpud_gpu_read_failures_total", "", failures.total);
  return std::move(out.text);
}

}  // namespace perseus::gpud
