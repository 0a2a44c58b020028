#pragma once
// Schedulers decide each round's power states. A scheduler is one class behind
// this interface plus one entry in the registry (scheduler_registry.cpp).
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "perseus/server/job_phase.hpp"
#include "perseus/server/job_status.hpp"
#include "perseus/online/power_allocation.hpp"
#include "perseus/server/wire.hpp"
#include "perseus/server/settings.hpp"

namespace perseus::server {

// Thrown by next_schedule() when the scheduler has nothing more to run; training should stop.
// The server answers every schedule request with 500 and "[profiling-done] <message>".
class SchedulerDone : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SchedulerContext {
  JobInfo job;
  std::vector<RankInfo> ranks;  // sorted by rank, one per rank of the job
  ServerSettings settings;
  std::filesystem::path job_dir;  // <dump_dir>/<job_id>, for outputs such as the profile CSV
  // Callable from any thread: the scheduler's ready() may have become true (see ready()).
  std::function<void()> wake = [] {};
  // Called on the planning thread before each plan choice of a scheduler that plans online (tests
  // hold a choice there to see that the server's rounds go on meanwhile).
  std::function<void()> before_plan_choice = [] {};
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // The next round's schedules, one per rank (any order). Throws SchedulerDone when finished,
  // anything else when it fails.
  virtual std::vector<PowerStateSchedule> next_schedule() = 0;
  // The results of the round just run, one per rank, sorted by rank.
  virtual void observe(const std::vector<ProfilingResult>& results) = 0;
  // Whether observe() depends on the results' values (a restarted server replays every round
  // into a new scheduler: with false, it keeps only the round count, not the measurements).
  virtual bool observes_results() const { return true; }
  // What a restarted server stores of a round to replay it (job_store.hpp): bounded by the job's
  // stages, instruction kinds and pipelines, never by its ranks. replay(round_record(results)) must
  // leave the scheduler as observe(results) does: the same later schedules. Default: the results
  // themselves (schedulers of pure pipelines see one rank per stage).
  virtual nlohmann::json round_record(const std::vector<ProfilingResult>& results) const;
  virtual void replay(const nlohmann::json& record);
  // Whether next_schedule() can answer now. While false, the job manager holds the round's
  // schedule requests (the ranks wait at the barrier) until the scheduler calls context.wake.
  virtual bool ready() const { return true; }
  // What GET /jobs/{id} shows of the scheduler's own state (job_status.hpp): none by default; only
  // a scheduler that plans online fills it in.
  virtual SchedulerStatus status() const { return {}; }
  // The job's phase while it runs, when the scheduler has phases of its own (warmup, profiling...).
  virtual std::optional<JobPhase> phase() const { return std::nullopt; }
  // POST /straggler (a notice) and DELETE /straggler (none). Schedulers that do not follow
  // stragglers refuse with RequestError 409.
  virtual void set_straggler(const std::optional<StragglerNotice>& notice);
  // What the web page draws (GET /jobs/{id}/frontier and /jobs/{id}/timeline.svg), for a scheduler
  // that plans: frontier(), the planned frontier, at most kMaxFrontierPoints points (null when none);
  // timeline(), a function that draws the deployed plan's pipeline timeline as SVG, holding what it
  // needs so that it may outlive the scheduler (empty when there is no plan). None by default.
  // Under a cluster's power budget (power_budget.hpp), a scheduler whose plans can run slower says
  // how: pace_options(), the unpaced plans first and then slower paces (empty: it cannot, now: not
  // deployed, or not a planning scheduler); under_power_limit(watts), what a power limit of that many
  // watts on every GPU would make of the unpaced job; and set_pace(), the iteration time it is to
  // keep from its next round (none: unpaced) and whether all-max probe rounds must wait.
  virtual std::vector<online::PaceOption> pace_options() const { return {}; }
  virtual std::optional<online::PaceOption> under_power_limit(double /*watts*/) const { return std::nullopt; }
  virtual void set_pace(std::optional<double> /*iteration_time*/, bool /*hold_probes*/) {}

  static constexpr std::size_t kMaxFrontierPoints = 1000;
  virtual nlohmann::json frontier() const { return nullptr; }
  virtual std::function<std::string()> timeline() const { return {}; }
};

using SchedulerFactory = std::function<std::unique_ptr<Scheduler>(const SchedulerContext&)>;

// Checks a scheduler name and its arguments when the server starts, so that mistakes show up
// before any job registers. Throws perseus::Error (usage) naming the argument.
SchedulerFactory configure_scheduler(const std::string& name, const nlohmann::json& args);
std::vector<std::string> scheduler_names();
// The mode a scheduler's power states are in; none when it works in either (InstructionProfiler)
// or is unknown.
std::optional<PowerMode> scheduler_mode(const std::string& name);

// Per-stage clocks for forward and backward -> one power state per pipe_schedule entry: other
// instructions inherit the clock of the preceding forward/backward (before the first, the
// first one's). Throws std::runtime_error when the counts differ.
std::vector<int> expand_compute_clocks(const std::vector<std::string>& pipe_schedule,
                                       const std::vector<int>& compute_clocks, const std::string& who);

// Wraps a scheduler written for pure pipeline parallelism: it sees one rank per stage (the
// dp 0, tp 0 rank, renumbered to its pp_rank), results folded per stage (time: max, energy:
// sum), and its schedules are copied to every rank of the stage.
SchedulerFactory make_3d_parallel(SchedulerFactory inner);

// `results` folded per pipeline stage as the 3D-parallel wrapper does (time: max, energy: sum, per
// iteration and per occurrence), one per stage with rank = the stage, by stage. `stage_of`: each
// rank's pp_rank, by rank.
std::vector<ProfilingResult> fold_stages(const std::vector<ProfilingResult>& results, const std::vector<int>& stage_of);

}  // namespace perseus::server
