// `perseus serve`: the control plane training ranks talk to (docs/design.md#the-http-protocol).
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <sys/resource.h>

#include <unistd.h>  // environ

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "perseus/cli/arguments.hpp"
#include "perseus/cli/commands.hpp"
#include "perseus/protocol/power_mode.hpp"
#include "perseus/server/http_server.hpp"
#include "perseus/server/scheduler.hpp"
#include "perseus/util/csv.hpp"
#include "perseus/util/error.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus::cli {
namespace {

// Defaults come from ServerSettings, so that the flags and the library agree.
const server::ServerSettings kDefaults;
// Durations: longer ones would overflow the clocks (and fire at once); refused as a usage error.
const CLI::Validator kSeconds = between(0.0, server::kMaxSettingSeconds);

// --scheduler's help: every scheduler the registry knows (each also as <name>3D).
std::string scheduler_help() {
  std::vector<std::string> names;
  for (const auto& name : server::scheduler_names())
    if (!name.ends_with("3D")) names.push_back(name);
  return fmt::format("{}, or one of those + '3D' (else PERSEUS_SCHEDULER, then ZEUS_PFO_SCHEDULER)",
                     fmt::join(names, ", "));
}

struct ServeArgs {
  std::string host = "127.0.0.1";
  int port = 7787;
  std::string scheduler = kDefaults.scheduler;
  std::string scheduler_args = kDefaults.scheduler_args.dump();
  std::string mode{protocol::to_string(kDefaults.mode)};
  std::string dump_dir = kDefaults.dump_dir;
  bool no_dump = !kDefaults.dump_data;
  std::string log_level = kDefaults.log_level;
  double round_timeout = kDefaults.round_timeout_s;
  double job_retention = kDefaults.job_retention_s;
  int max_world_size = kDefaults.max_world_size;
  double dead_rank_timeout = kDefaults.dead_rank_timeout_s;
  double max_job_idle = kDefaults.max_job_idle_s;
  int max_jobs = kDefaults.max_jobs;
  long long max_total_ranks = kDefaults.max_total_ranks;
  long long max_job_entries = kDefaults.max_job_entries;
  std::size_t max_body_bytes = server::HttpLimits{}.max_body_bytes;
  long long max_connections_per_peer = -1;  // -1: half the open-file limit
  long long max_connections = -1;           // -1: the open-file limit less a reserve for files
  double idle_timeout = std::chrono::duration<double>(server::HttpLimits{}.idle_timeout).count();
  double write_timeout = std::chrono::duration<double>(server::HttpLimits{}.write_timeout).count();
  bool record_ranks = kDefaults.record_ranks;
  long long max_result_iterations = static_cast<long long>(kDefaults.max_result_iterations);
  bool metrics_public = false;
  int record_rounds = kDefaults.record_rounds;
  std::optional<double> power_budget;
  unsigned threads = 0;  // 0: one per CPU core
  std::string token_file;
  // Options Zeus's server reads from ZEUS_PFO_* when neither the flag nor PERSEUS_* gave them.
  CLI::Option *scheduler_opt = nullptr, *scheduler_args_opt = nullptr, *log_level_opt = nullptr,
              *dump_dir_opt = nullptr, *max_job_idle_opt = nullptr, *mode_opt = nullptr;
};

// A ZEUS_PFO_* setting as Zeus's settings read it: the name in any case (zeus_pfo_scheduler too),
// the exact spelling first.
const char* zeus_getenv(const char* name) {
  if (const char* exact = std::getenv(name); exact != nullptr) return exact;
  const std::size_t length = std::strlen(name);
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const char* eq = std::strchr(*entry, '=');
    if (eq == nullptr || static_cast<std::size_t>(eq - *entry) != length) continue;
    if (std::equal(static_cast<const char*>(*entry), eq, name,
                   [](char a, char b) { return std::toupper(static_cast<unsigned char>(a)) == b; }))
      return eq + 1;
  }
  return nullptr;
}

const char* zeus_env(const CLI::Option* given, const char* name) {
  if (given != nullptr && given->count() > 0) return nullptr;
  const char* value = zeus_getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// Zeus's pipeline-frequency server settings (ZEUS_PFO_*), so that Zeus's documented commands work
// as written; the flags and PERSEUS_* come first.
void apply_zeus_env(ServeArgs& args) {
  if (const char* v = zeus_env(args.scheduler_opt, "ZEUS_PFO_SCHEDULER")) {
    args.scheduler = v;
  } else if (args.scheduler_opt != nullptr && args.scheduler_opt->count() == 0 &&
             zeus_env(nullptr, "ZEUS_PFO_SCHEDULER_ARGS") != nullptr) {
    // Zeus's server configured as its docs show (only the scheduler's arguments): its default
    // scheduler, PointSolution, not perseus's.
    args.scheduler = "PointSolution";
  }
  if (const char* v = zeus_env(args.scheduler_args_opt, "ZEUS_PFO_SCHEDULER_ARGS")) args.scheduler_args = v;
  if (const char* v = zeus_env(args.log_level_opt, "ZEUS_PFO_LOG_LEVEL")) args.log_level = v;
  if (const char* v = zeus_env(args.dump_dir_opt, "ZEUS_PFO_DUMP_DIR")) args.dump_dir = v;
  if (const char* v = zeus_env(args.max_job_idle_opt, "ZEUS_PFO_MAX_JOB_IDLE_TIME")) {
    auto seconds = parse_double(v);
    if (!seconds || !(*seconds >= 0 && *seconds <= server::kMaxSettingSeconds))
      throw Error(fmt::format("ZEUS_PFO_MAX_JOB_IDLE_TIME='{}' is not a number of seconds", v), ErrorKind::bad_setting);
    args.max_job_idle = *seconds;
  }
}

// The bearer token: the file's first line, surrounding whitespace removed.
std::string read_token(const std::string& path) {
  if (path.empty()) return "";
  std::ifstream in(path);
  if (!in)
    throw Error(fmt::format("--token-file '{}': cannot read it: {}", path, std::strerror(errno)), ErrorKind::not_found);
  std::string token;
  std::getline(in, token);
  auto first = token.find_first_not_of(" \t\r");
  auto last = token.find_last_not_of(" \t\r");
  token = first == std::string::npos ? "" : token.substr(first, last - first + 1);
  if (token.size() < 16)
    throw Error(fmt::format("--token-file '{}': the token (its first line) must have at least 16 characters", path),
                ErrorKind::bad_setting);
  return token;
}

bool is_loopback(const std::string& host) {
  boost::system::error_code ec;
  auto address = boost::asio::ip::make_address(host, ec);
  return !ec && address.is_loopback();
}

// `value`: the variable `name`'s (null when unset).
bool env_bool(const char* name, const char* value, bool fallback) {
  if (value == nullptr || *value == '\0') return fallback;
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(), ::tolower);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw Error(fmt::format("{}='{}' is not a boolean (true/false)", name, value), ErrorKind::bad_setting);
}

spdlog::level::level_enum parse_level(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), ::tolower);
  if (text == "warning") text = "warn";
  if (text == "error") text = "err";
  if (text == "fatal") text = "critical";
  auto level = spdlog::level::from_str(text);
  if (level == spdlog::level::off && text != "off")
    throw Error(fmt::format("--log-level '{}' is not one of debug, info, warning, error, critical, off", text),
                ErrorKind::bad_setting);
  return level;
}

int serve(ServeArgs args) {
  apply_zeus_env(args);
  server::ServerSettings settings;
  settings.scheduler = args.scheduler;
  try {
    check_json_depth(args.scheduler_args);
    settings.scheduler_args = nlohmann::json::parse(args.scheduler_args);
  } catch (const JsonTooDeep& e) {
    throw Error(fmt::format("--scheduler-args: {}", e.what()), ErrorKind::bad_setting);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("--scheduler-args is not valid JSON (byte {}): {}", e.byte, args.scheduler_args),
                ErrorKind::bad_setting);
  }
  const auto mode = protocol::parse_power_mode(args.mode);
  if (!mode)
    throw Error(fmt::format("--mode '{}' must be 'frequency' or 'power limit'", args.mode), ErrorKind::bad_setting);
  // A scheduler made for one mode sets it; a --mode (or PERSEUS_MODE) that contradicts it is refused.
  auto own_mode = server::scheduler_mode(args.scheduler);
  if (own_mode && args.mode_opt->count() > 0 && *own_mode != *mode)
    throw Error(fmt::format("--mode '{}' contradicts scheduler {}, which sets {}s", args.mode, args.scheduler,
                            protocol::to_string(*own_mode)),
                ErrorKind::bad_setting);
  settings.mode = own_mode.value_or(*mode);
  settings.dump_dir = args.dump_dir;
  settings.dump_data = args.no_dump ? false
                                    : env_bool("PERSEUS_DUMP_DATA", std::getenv("PERSEUS_DUMP_DATA"),
                                               env_bool("ZEUS_PFO_DUMP_DATA", zeus_getenv("ZEUS_PFO_DUMP_DATA"), true));
  settings.log_level = args.log_level;
  settings.round_timeout_s = args.round_timeout;
  settings.job_retention_s = args.job_retention;
  settings.max_world_size = args.max_world_size;
  settings.dead_rank_timeout_s = args.dead_rank_timeout;
  settings.max_job_idle_s = args.max_job_idle;
  settings.max_jobs = args.max_jobs;
  settings.max_total_ranks = args.max_total_ranks;
  settings.max_job_entries = args.max_job_entries;
  settings.record_ranks = args.record_ranks;
  settings.max_result_iterations = static_cast<std::size_t>(args.max_result_iterations);
  settings.record_rounds = args.record_rounds;
  settings.power_budget_w = args.power_budget;
  if (args.port < 0 || args.port > 65535)
    throw Error(fmt::format("--port {} is not a TCP port", args.port), ErrorKind::bad_setting);
  boost::system::error_code bad_host;
  (void)boost::asio::ip::make_address(args.host, bad_host);
  if (bad_host)
    throw Error(fmt::format("--host '{}' is not an IP address: {}", args.host, bad_host.message()),
                ErrorKind::bad_setting);

  spdlog::set_default_logger(spdlog::stderr_color_mt("perseus"));
  spdlog::set_level(parse_level(args.log_level));
  auto factory = server::configure_scheduler(settings.scheduler, settings.scheduler_args);

  // A file-size limit reached (a full quota) must fail the write, which is retried, not kill the server.
  std::signal(SIGXFSZ, SIG_IGN);

  // Every waiting rank holds a connection: allow as many as the hard limit permits.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  server::HttpLimits limits;
  limits.max_body_bytes = args.max_body_bytes;
  // By default one address may hold half the descriptors: it cannot starve the others.
  if (args.max_connections_per_peer >= 0)
    limits.max_connections_per_peer = static_cast<std::size_t>(args.max_connections_per_peer);
  else if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY)
    limits.max_connections_per_peer = std::max<std::size_t>(16, static_cast<std::size_t>(files.rlim_cur / 2));
  // By default every descriptor but a reserve (the store, record files, the log: 16, or an eighth).
  if (args.max_connections >= 0) limits.max_connections = static_cast<std::size_t>(args.max_connections);
  else if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY)
    limits.max_connections =
        static_cast<std::size_t>(std::max<rlim_t>(16, files.rlim_cur - std::max<rlim_t>(16, files.rlim_cur / 8)));
  auto milliseconds = [](double seconds) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(seconds));
  };
  limits.idle_timeout = milliseconds(args.idle_timeout);
  limits.write_timeout = milliseconds(args.write_timeout);
  limits.public_metrics = args.metrics_public;

  unsigned threads = args.threads != 0 ? args.threads : std::max(1u, std::thread::hardware_concurrency());
  boost::asio::io_context io(static_cast<int>(threads));
  server::JobManager jobs(boost::asio::make_strand(io), settings, factory);
  std::string token = read_token(args.token_file);
  if (token.empty() && !is_loopback(args.host))
    spdlog::warn(
        "listening on {} without --token-file: anyone who can reach this port can register jobs and read "
        "their schedules",
        args.host);
  server::HttpServer http(io, jobs, args.host, static_cast<std::uint16_t>(args.port), token, limits);

  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  boost::asio::steady_timer grace(io);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    spdlog::info("signal {}: stopping", signal);
    http.stop();
    boost::asio::post(jobs.executor(), [&] { jobs.shutdown("the perseus server is stopping"); });
    // Let the answers to waiting requests go out, then stop.
    grace.expires_after(std::chrono::milliseconds(200));
    grace.async_wait([&](const boost::system::error_code&) { io.stop(); });
  });

  std::printf("perseus serve: listening on http://%s:%u (scheduler %s, mode %s, %s)\n", args.host.c_str(),
              static_cast<unsigned>(http.port()), settings.scheduler.c_str(),
              std::string(protocol::to_string(settings.mode)).c_str(),
              settings.dump_data ? fmt::format("records in {}", settings.dump_dir).c_str() : "no records");
  std::fflush(stdout);
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back([&] { io.run(); });
  io.run();
  for (auto& t : pool) t.join();
  spdlog::info("stopped");
  return kExitOk;
}

}  // namespace

Runner add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve",
                                 "Run the server that hands clock schedules to training ranks and records "
                                 "what they measured");
  cmd->add_option("--host", args->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "TCP port (0: any free port, printed in the ready line)")
      ->capture_default_str();
  args->scheduler_opt = cmd->add_option("--scheduler", args->scheduler, scheduler_help())
                            ->envname("PERSEUS_SCHEDULER")
                            ->capture_default_str();
  args->scheduler_args_opt =
      cmd->add_option(
             "--scheduler-args", args->scheduler_args,
             "The scheduler's arguments as a JSON object (else PERSEUS_SCHEDULER_ARGS, then ZEUS_PFO_SCHEDULER_ARGS)")
          ->envname("PERSEUS_SCHEDULER_ARGS")
          ->capture_default_str();
  args->mode_opt = cmd->add_option("--mode", args->mode,
                                   "What power states mean to clients: 'frequency' or 'power limit' "
                                   "(set by a scheduler made for one; InstructionProfiler takes either)")
                       ->envname("PERSEUS_MODE")
                       ->capture_default_str();
  args->dump_dir_opt =
      cmd->add_option("--dump-dir", args->dump_dir,
                      "Where each job's records go (<dir>/<job_id>/) (else PERSEUS_DUMP_DIR, then ZEUS_PFO_DUMP_DIR)")
          ->envname("PERSEUS_DUMP_DIR")
          ->capture_default_str();
  cmd->add_flag("--no-dump", args->no_dump,
                "Keep no records (else PERSEUS_DUMP_DATA, then ZEUS_PFO_DUMP_DATA, default true)");
  args->log_level_opt =
      cmd->add_option("--log-level", args->log_level,
                      "debug, info, warning, error, critical or off (else PERSEUS_LOG_LEVEL, then ZEUS_PFO_LOG_LEVEL)")
          ->envname("PERSEUS_LOG_LEVEL")
          ->capture_default_str();
  cmd->add_option("--round-timeout", args->round_timeout,
                  "Seconds a round may take before the job fails with a reason every rank receives (0: never)")
      ->envname("PERSEUS_ROUND_TIMEOUT")
      ->check(kSeconds)
      ->capture_default_str();
  cmd->add_option("--job-retention", args->job_retention,
                  "Seconds an ended job is kept (late ranks get its end detail) before it is forgotten (0: kept "
                  "until exit); its records stay on disk")
      ->envname("PERSEUS_JOB_RETENTION")
      ->check(kSeconds)
      ->capture_default_str();
  cmd->add_option("--dead-rank-timeout", args->dead_rank_timeout,
                  "Seconds (at least; 3x the job's typical round time if longer) after which a rank that stopped "
                  "sending heartbeats, or stopped progressing while others wait for it, fails its job naming it "
                  "(0: off; then only --round-timeout)")
      ->envname("PERSEUS_DEAD_RANK_TIMEOUT")
      ->check(kSeconds)
      ->capture_default_str();
  cmd->add_option("--max-world-size", args->max_world_size,
                  "Most ranks one job may have: a register_job above it gets 422 (bounds what one request can make "
                  "the server allocate)")
      ->envname("PERSEUS_MAX_WORLD_SIZE")
      ->check(between(1, 1 << 30))
      ->capture_default_str();
  args->max_job_idle_opt =
      cmd->add_option(
             "--max-job-idle-time", args->max_job_idle,
             "Seconds a job of Zeus's client (one schedule request, no results) is kept after its schedule went "
             "out (else PERSEUS_MAX_JOB_IDLE_TIME, then ZEUS_PFO_MAX_JOB_IDLE_TIME; 0: kept until exit)")
          ->envname("PERSEUS_MAX_JOB_IDLE_TIME")
          ->check(kSeconds)
          ->capture_default_str();
  cmd->add_option("--max-jobs", args->max_jobs,
                  "Most jobs held in memory (running, or ended and kept for --job-retention): at the limit the job "
                  "that ended first is forgotten early; with every job running, register_job gets 503")
      ->envname("PERSEUS_MAX_JOBS")
      ->check(between(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option(
         "--max-total-ranks", args->max_total_ranks,
         "Most ranks of all jobs held, summed (register_job allocates ~300 bytes a rank before any rank "
         "registers): beyond it, once no ended job is left to forget early, register_job gets 503 (0: no limit)")
      ->envname("PERSEUS_MAX_TOTAL_RANKS")
      ->check(between(0LL, 1LL << 40))
      ->capture_default_str();
  cmd->add_option("--max-job-entries", args->max_job_entries,
                  "Most entries one job's schedules may have, world size x a rank's pipe_schedule length (what its "
                  "schedules and results grow with): a register_rank beyond it gets 422 (0: no limit)")
      ->envname("PERSEUS_MAX_JOB_ENTRIES")
      ->check(between(0LL, 1LL << 50))
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", args->max_body_bytes,
                  "Largest request body: a larger one gets 413 before it is read (the largest legitimate one, a "
                  "result of many iterations, is ~20 bytes per measurement)")
      ->envname("PERSEUS_MAX_BODY_BYTES")
      ->check(between(std::size_t{1024}, std::size_t{1} << 34))
      ->capture_default_str();
  cmd->add_option("--max-connections-per-peer", args->max_connections_per_peer,
                  "Most connections one remote address may hold; more are closed as they are accepted (default: "
                  "half the open-file limit; 0: no cap). Each rank holds two or three")
      ->envname("PERSEUS_MAX_CONNECTIONS_PER_PEER")
      ->check(between(0LL, 1LL << 30));
  cmd->add_option("--max-result-iterations", args->max_result_iterations,
                  "Most iterations one POST /result may hold (413 beyond, refused before it is held); with the "
                  "rank's schedule it bounds what a round holds and records per rank")
      ->envname("PERSEUS_MAX_RESULT_ITERATIONS")
      ->check(between(1LL, 1LL << 24))
      ->capture_default_str();
  cmd->add_option("--max-connections", args->max_connections,
                  "Most connections in all, from every address (default: the open-file limit less 16 or an eighth "
                  "of it; 0: no bound). Idle ones (no request in progress) may take all but an eighth: past "
                  "either bound the longest-idle connection is closed to make room")
      ->envname("PERSEUS_MAX_CONNECTIONS")
      ->check(between(0LL, 1LL << 30));
  cmd->add_option("--idle-timeout", args->idle_timeout,
                  "Seconds a kept-alive connection may wait for its next request, or a request take to arrive, "
                  "before it is closed (a schedule request waiting for its round is not idle)")
      ->envname("PERSEUS_IDLE_TIMEOUT")
      ->check(between(0.001, 86400.0))
      ->capture_default_str();
  cmd->add_option("--write-timeout", args->write_timeout,
                  "Seconds a client may take to receive a reply before its connection is dropped")
      ->envname("PERSEUS_WRITE_TIMEOUT")
      ->check(between(0.001, 86400.0))
      ->capture_default_str();
  cmd->add_flag(
         "--record-ranks", args->record_ranks,
         "Record every rank's result and schedule per round (N.prof.json, N.sched.json) instead of one result per "
         "pipeline stage (its ranks folded: time max, energy sum) and each stage's distinct schedules")
      ->envname("PERSEUS_RECORD_RANKS");
  cmd->add_option("--record-rounds", args->record_rounds,
                  "Keep each job's per-round record files of only its last this many rounds (0: all); the job store "
                  "keeps what a restart needs regardless")
      ->envname("PERSEUS_RECORD_ROUNDS")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_option("--power-budget", args->power_budget,
                  "The cluster's power budget in watts: every job on this server together draws at most this much "
                  "(PUT /power_budget changes it while the server runs)")
      ->envname("PERSEUS_POWER_BUDGET")
      ->check(CLI::Range(1e-3, 1e9));
  cmd->add_option("--token-file", args->token_file,
                  "File whose first line is a bearer token (at least 16 characters): every request must then send "
                  "'Authorization: Bearer <token>' (401 otherwise); clients: the token option or PERSEUS_TOKEN")
      ->envname("PERSEUS_TOKEN_FILE");
  cmd->add_flag("--metrics-public", args->metrics_public,
                "GET /metrics answers without the token (for a Prometheus scraper on a trusted network); every other "
                "route still needs it")
      ->envname("PERSEUS_METRICS_PUBLIC");
  cmd->add_option("--threads", args->threads,
                  "I/O threads parsing requests (0: one per CPU core); job state is "
                  "handled one request at a time regardless")
      ->capture_default_str();
  return [args] { return serve(*args); };
}

}  // namespace perseus::cli
