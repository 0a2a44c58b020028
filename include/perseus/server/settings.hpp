#pragma once
// `perseus serve` settings: flags first, then the artifact's environment variables
// (PERSEUS_SCHEDULER, PERSEUS_SCHEDULER_ARGS, PERSEUS_MODE, PERSEUS_DUMP_DATA, PERSEUS_DUMP_DIR,
// PERSEUS_LOG_LEVEL), then these defaults.
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "perseus/protocol/power_mode.hpp"

namespace perseus::server {

struct ServerSettings {
  std::string scheduler = "AllMaxFrequency";
  nlohmann::json scheduler_args = nlohmann::json::object();
  std::string log_level = "INFO";
  protocol::PowerMode mode = protocol::PowerMode::frequency;
  bool dump_data = true;
  std::string dump_dir = "./dump";
  double round_timeout_s = 1800;  // a round (all ranks ask, then all report) must finish in this; 0: never
  double job_retention_s = 3600;  // an ended job is forgotten this long after it ended; 0: kept until exit
  // A job's memory grows with its ranks (~300 bytes each before any round): a bound on what one
  // register_job may make the server allocate. The largest training jobs today are ~100k GPUs.
  int max_world_size = 131072;
  // A rank that sends heartbeats and then stops (killed: no heartbeat; hung: no progress while
  // others wait for it at the barrier) fails its job after max(this, 3 x the job's typical round
  // time), naming it, instead of holding every rank at the barrier until round_timeout_s. 0: off.
  double dead_rank_timeout_s = 30;
  // A job of Zeus's client (which asks for one schedule and never reports) is forgotten this long
  // after its schedule went out (Zeus's max_job_idle_time; its records stay on disk). 0: kept.
  double max_job_idle_s = 7 * 24 * 3600;
  // Jobs held in memory (running, or ended and kept for job_retention_s). At the limit the job
  // that ended first is forgotten early; when every job held is running, register_job gets 503.
  int max_jobs = 100;
  // The world sizes of every job held, summed: what register_job allocates before any rank
  // registered (~300 bytes a rank), so that jobs nobody trains in cannot take the server's memory.
  // Beyond it (after forgetting ended jobs), register_job gets 503. 0: no limit.
  long long max_total_ranks = 262144;
  // A job's world size times the length of a rank's pipe_schedule: what its schedules and each
  // round's results grow with. A register_rank beyond it gets 422 before anything is stored.
  // 0: no limit. The default holds 16,384 ranks of 1,024 instructions each.
  long long max_job_entries = 16384LL * 1024;
  // Per-round records: by default N.prof.json holds one result per pipeline stage (its ranks folded:
  // time max, energy sum) and N.sched.json the schedules of each stage's first rank plus any rank
  // whose schedule differs, so a round's records grow with stages and pipelines, not ranks. On:
  // every rank's result and schedule, as the artifact writes them.
  bool record_ranks = false;
  // Iterations one POST /result may hold (413 beyond, refused while it is decoded): with the
  // rank's schedule (physical_bounds.hpp: oversized_result) it bounds what a round holds per rank
  // and records. The client reports every 5 iterations by default.
  std::size_t max_result_iterations = 100;
  int record_rounds = 0;  // keep the record files of the last this many rounds per job; 0: all
  // The cluster's power budget at start (W, every job's GPUs together; power_budget.hpp); none: no budget.
  std::optional<double> power_budget_w;
};

// The longest duration a setting may have (~31.7 years): longer ones would overflow the clock's
// nanoseconds (and fire at once).
inline constexpr double kMaxSettingSeconds = 1e9;
// `seconds` as a steady-clock duration, clamped to [0, kMaxSettingSeconds].
std::chrono::steady_clock::duration clamped_duration(double seconds);

// The body of GET /info.
nlohmann::json info_json(const ServerSettings& settings);
// The artifact's ServerInfo, field for field, as its load_info() reads <job dir>/perseus.json:
// {scheduler, scheduler_args, log_level (upper case), mode, dump_data, dump_dir}.
nlohmann::json artifact_server_info(const ServerSettings& settings);

}  // namespace perseus::server
