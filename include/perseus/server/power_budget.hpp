#pragma once
// A power budget for the whole cluster (docs/server.md#a-power-budget-for-the-cluster): the
// facility says how many watts the jobs on this server may draw together (perseus serve
// --power-budget, PUT /power_budget) and how soon, and the coordinator keeps them within it with
// the least loss of weighted throughput.
//
// - The allocation (online/power_allocation.hpp): a job whose scheduler can pace it (the turnkey
//   loop, deployed) offers its frontier from its unpaced plans on, each pace as (power, value):
//   power = predicted energy per iteration / iteration time, times the job's correction factor
//   (measured over predicted); value = weight x GPUs x unpaced time / paced time (its throughput
//   relative to running unpaced, counted per GPU and by its priority weight). Every other job
//   counts at what it measured: a turnkey job still in warm-up, profiling or planning at the most
//   it drew so far (all-max), another scheduler's job at the most of its last rounds, a job not
//   measured yet at its GPUs times the most any GPU of the cluster drew. No job is paced slower than
//   a uniform power limit (budget / GPUs on every GPU) would make it run, unless the budget cannot be
//   met otherwise. The allocation aims 0.5% below the budget.
// - Re-solved when a job arrives, leaves or changes phase, when its plans change (deployed, a
//   straggler, a step-up), when the budget changes, and when the measured power says the prediction
//   is off (closed loop: per job, a correction factor from each round that ran its allocation).
// - The backstop: GPU power limits (a field of the schedule reply and of the heartbeat reply that
//   perseus's client applies and restores) when the frontiers cannot reach the budget (every job at
//   its slowest useful pace), and, when the budget must hold sooner than two rounds of the jobs it
//   slows, until every job ran two rounds since the change. Lifted when no longer needed; never
//   below a GPU's minimum limit; a job that ends leaves the allocation at once.
//
// Not thread-safe: the job manager calls it on its strand.
#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "perseus/server/job_phase.hpp"
#include "perseus/server/job_status.hpp"
#include "perseus/server/scheduler.hpp"

namespace perseus::server {

// What the facility asks: at most `watts` (none: no budget) within `comply_s` seconds.
struct BudgetRequest {
  std::optional<double> watts;
  double comply_s = 0;
};

// PUT /power_budget's body, checked: {"watts": W or null, "seconds": S} (seconds required with
// watts). Throws RequestError (invalid_request) naming the field.
BudgetRequest budget_request_from_json(const nlohmann::json& body);

// What a round of a job measured, as the budget sees it.
struct RoundPower {
  double iteration_time = 0;           // seconds per iteration
  double energy = 0;                   // joules per iteration, every GPU
  JobPhase phase = JobPhase::running;  // the job's phase now
  double round_seconds = 0;            // how long the job's rounds take (wall time)
};

class PowerBudget {
 public:
  using Clock = std::chrono::steady_clock;
  // The aim: this fraction below the budget, so that a round's noise stays under it.
  static constexpr double kMargin = 0.005;

  explicit PowerBudget(std::optional<double> watts, Clock::time_point now = Clock::now());
  ~PowerBudget();
  PowerBudget(const PowerBudget&) = delete;
  PowerBudget& operator=(const PowerBudget&) = delete;

  std::optional<double> watts() const { return watts_; }
  void set(const BudgetRequest& request, Clock::time_point now);

  // A job's rounds start (its scheduler exists); `scheduler` must outlive its leave().
  void join(const std::string& id, Scheduler& scheduler, const JobInfo& info, const std::vector<RankInfo>& ranks,
            Clock::time_point now);
  void leave(const std::string& id, Clock::time_point now);
  void round(const std::string& id, const RoundPower& round, Clock::time_point now);
  // The job's plans changed outside a round (a straggler told through the API).
  void plans_changed(const std::string& id, Clock::time_point now);

  // The power limit (W per GPU) the job's ranks are to run under, if the backstop holds.
  std::optional<double> power_limit(const std::string& id) const;
  // GET /power_budget; and a job's part of it for its status (none when it takes no part).
  PowerBudgetStatus status(Clock::time_point now) const;
  std::optional<JobBudgetStatus> job_status(const std::string& id) const;

 private:
  struct Job;
  struct Sample {
    double t = 0;  // seconds since the budget was set
    double measured = 0, predicted = 0;
    bool backstop = false;
    std::string job;                       // whose round it was
    double iteration_time = 0, power = 0;  // what that round measured
    int rounds = 0;                        // the fewest rounds any job had run since the budget was set
  };
  void solve(Clock::time_point now, const std::string& why);
  void refresh_options(Job& job) const;
  double estimate(const Job& job) const;   // watts, for a job the allocation does not pace
  double job_power(const Job& job) const;  // its predicted watts at its allocation (or estimate)
  double measured_total() const;
  void apply(Job& job, std::optional<double> pace, bool hold_probes);
  void update_backstop(Clock::time_point now);
  double cap_for(double target) const;
  bool settled() const;  // every job ran two rounds since its allocation changed

  std::optional<double> watts_;
  double comply_s_ = 0;
  Clock::time_point set_at_, comply_by_, started_;
  std::string source_ = "none";  // flag, api
  std::map<std::string, Job> jobs_;
  double predicted_ = 0;
  bool reachable_ = true;          // the frontiers reach the budget
  bool fairness_relaxed_ = false;  // a job runs slower than a uniform limit would make it
  bool transition_ = false;        // the deadline is shorter than two rounds: the backstop holds until they ran
  struct Backstop {
    double watts = 0;
    std::string reason;
    Clock::time_point since;
  };
  std::optional<Backstop> backstop_;
  double cap_gain_ = 1;  // the backstop's integral term: its limit over what the model says
  // Since the budget was last set: the samples (one per job round: the cluster's power as each
  // job last measured it), their sum, the worst of those in which every job's last round started
  // after the deadline, and the last over the budget (by 1%): the rounds every job had run by then
  // (the fewest of any job) and when it was.
  std::deque<Sample> history_;
  long long samples_ = 0, samples_after_deadline_ = 0;
  double sum_measured_ = 0, worst_after_deadline_ = 0;
  std::optional<int> last_over_rounds_;
  double last_over_s_ = 0;
  bool over_now_ = false;  // the latest sample is over
};

// The budget as stored under the dump directory, so that one acknowledged by PUT /power_budget
// survives a restart: {"flag": W or null, "watts": W or null, "seconds": S}. At start, a stored
// budget set through the API wins unless --power-budget differs from the flag stored with it
// (the operator changed it).
std::optional<BudgetRequest> stored_budget(const std::filesystem::path& file, std::optional<double> flag);
void store_budget(const std::filesystem::path& file, std::optional<double> flag, const BudgetRequest& request);
inline constexpr const char* kBudgetFile = ".power_budget.json";

}  // namespace perseus::server
