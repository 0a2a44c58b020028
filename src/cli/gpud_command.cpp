// `perseus gpud`: the per-node privileged daemon that owns NVML (gpud/daemon.hpp).
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "perseus/cli/commands.hpp"
#include "perseus/gpu/backends.hpp"
#include "perseus/gpud/daemon.hpp"
#include "perseus/gpud/metrics_endpoint.hpp"
#include "perseus/gpud/protocol.hpp"
#include "perseus/util/error.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus::cli {
namespace {

struct GpudArgs {
  std::string socket = gpud::kDefaultSocket;
  std::string socket_mode = "0660";
  std::string socket_group;
  std::string nvml;
  std::string gpu_library;  // "": $PERSEUS_GPU_LIBRARY, else nvml
  std::string log_level = "info";
  std::string metrics_address;  // "": no metrics listener
  double idle_timeout_s = 60;
  long long max_connections_per_user = -1;  // -1: half the open-file limit
  long long max_connections = -1;           // -1: the open-file limit less a reserve
};

int run_gpud(const GpudArgs& args) {
  unsigned mode = 0;
  try {
    std::size_t used = 0;
    mode = static_cast<unsigned>(std::stoul(args.socket_mode, &used, 8));
    if (used != args.socket_mode.size() || mode > 0777) throw std::invalid_argument("range");
  } catch (const std::exception&) {
    throw Error(fmt::format("--socket-mode '{}' is not an octal file mode such as 0660", args.socket_mode),
                ErrorKind::bad_setting);
  }
  if (!(args.idle_timeout_s >= 0 && args.idle_timeout_s <= 86400))
    throw Error(fmt::format("--idle-timeout {} must be between 0 and 86400 seconds", args.idle_timeout_s),
                ErrorKind::bad_setting);
  spdlog::set_default_logger(spdlog::stderr_color_mt("perseus-gpud"));
  auto level = spdlog::level::from_str(args.log_level);
  if (level == spdlog::level::off && args.log_level != "off")
    throw Error(fmt::format("--log-level '{}' is not one of debug, info, warning, error, off", args.log_level),
                ErrorKind::bad_setting);
  spdlog::set_level(level);
  std::optional<gpud::MetricsAddress> metrics_address;
  if (!args.metrics_address.empty()) {
    metrics_address = gpud::parse_metrics_address(args.metrics_address);
    if (!gpud::is_loopback(metrics_address->host))
      spdlog::warn(
          "--metrics-address {}: not a loopback address, so anyone who can reach it reads which GPUs are "
          "owned and locked (no authentication; keep it behind a firewall)",
          args.metrics_address);
  }

  std::shared_ptr<gpu::GpuLibrary> library;
  try {
    library = gpu::load_gpu_library(args.gpu_library, args.nvml);
  } catch (const gpu::GpuError& e) {
    throw Error(e.what(),
                e.kind() == gpu::GpuErrorKind::invalid_argument ? ErrorKind::bad_setting : ErrorKind::not_found);
  }
  boost::asio::io_context io(1);
  gpud::DaemonOptions options{args.socket, mode, args.socket_group};
  options.idle_timeout = std::chrono::milliseconds(static_cast<long long>(args.idle_timeout_s * 1000));
  // Defaults from the open-file limit: a user may hold half; all connections, all but a reserve.
  rlimit files{};
  bool limited = getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY;
  if (args.max_connections_per_user >= 0)
    options.max_connections_per_user = static_cast<std::size_t>(args.max_connections_per_user);
  else if (limited)
    options.max_connections_per_user = std::max<std::size_t>(8, static_cast<std::size_t>(files.rlim_cur / 2));
  if (args.max_connections >= 0) options.max_connections = static_cast<std::size_t>(args.max_connections);
  else if (limited)
    options.max_connections =
        static_cast<std::size_t>(std::max<rlim_t>(16, files.rlim_cur - std::max<rlim_t>(16, files.rlim_cur / 8)));
  gpud::Daemon daemon(io, library, options);
  std::optional<gpud::MetricsEndpoint> metrics;  // after the daemon: it reads the daemon's state
  if (metrics_address) metrics.emplace(io, daemon, library, *metrics_address);
  boost::asio::signal_set signals(io, SIGINT, SIGTERM, SIGHUP);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    spdlog::info("signal {}: stopping", signal);
    if (metrics) metrics->stop();
    daemon.stop();
    io.stop();
  });
  std::printf("perseus gpud: listening on %s (%u GPU%s, mode %04o%s)\n", args.socket.c_str(), library->device_count(),
              library->device_count() == 1 ? "" : "s", mode,
              args.socket_group.empty() ? "" : fmt::format(", group {}", args.socket_group).c_str());
  if (metrics) {
    const std::string& host = metrics_address->host;
    std::printf("perseus gpud: metrics on http://%s:%u/metrics\n",
                host.find(':') != std::string::npos ? fmt::format("[{}]", host).c_str() : host.c_str(),
                metrics->port());
  }
  std::fflush(stdout);
  // Every request's failure is answered on its connection; should anything still escape a
  // handler, the daemon goes on serving: stopping would reset every GPU under the running ranks.
  for (;;) {
    try {
      io.run();
      break;
    } catch (const std::exception& e) {
      spdlog::error("internal error, still serving: {}", safe_text(e.what()));
    }
  }
  return kExitOk;
}

}  // namespace

Runner add_gpud_command(CLI::App& app) {
  auto args = std::make_shared<GpudArgs>();
  auto* cmd = app.add_subcommand(
      "gpud",
      "Run the per-node GPU daemon: owns NVML, serves training ranks over a Unix socket so they need no "
      "privileges, and resets what a rank set the moment its connection closes (even when it was killed)");
  cmd->add_option("--socket", args->socket, "Unix socket to listen on")->capture_default_str();
  cmd->add_option("--socket-mode", args->socket_mode, "The socket's file mode (octal): who may connect")
      ->capture_default_str();
  cmd->add_option("--socket-group", args->socket_group, "Group that owns the socket (with mode 0660: who may connect)");
  cmd->add_option("--gpu-library", args->gpu_library, gpu::gpu_library_help());
  cmd->add_option("--nvml", args->nvml, gpu::gpu_library_file_help());
  cmd->add_option("--idle-timeout", args->idle_timeout_s,
                  "Seconds after which a connection that owns no GPU and sends nothing is closed (0: never)")
      ->capture_default_str();
  cmd->add_option("--max-connections-per-user", args->max_connections_per_user,
                  "Most connections one user (uid) may hold; more are closed as they are accepted (default: half "
                  "the open-file limit; 0: no cap)")
      ->check(CLI::Range(0LL, 1LL << 30));
  cmd->add_option("--max-connections", args->max_connections,
                  "Most connections in all; at the bound the longest-idle one that owns no GPU is closed to make "
                  "room (default: the open-file limit less 16 or an eighth of it; 0: no bound)")
      ->check(CLI::Range(0LL, 1LL << 30));
  cmd->add_option("--metrics-address", args->metrics_address,
                  "Serve Prometheus metrics (GET /metrics: per GPU its locked clock, owner, power, energy, resets) "
                  "on HOST:PORT, or on 127.0.0.1:PORT given a PORT alone; off by default");
  cmd->add_option("--log-level", args->log_level, "debug, info, warning, error or off")->capture_default_str();
  return [args] { return run_gpud(*args); };
}

}  // namespace perseus::cli
