#pragma once
// What the server shows of a job (GET /jobs, GET /jobs/{id}, the metrics), typed: the job
// manager and the schedulers fill these structs, the metrics read them, and job_status.cpp alone
// turns them into the JSON of the HTTP API (which the web page, `perseus status`, DESIGN.md and
// docs/server.md read by key). Renaming a field here fails to compile where it is read.
#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "perseus/online/statistics.hpp"
#include "perseus/server/job_phase.hpp"
#include "perseus/server/wire.hpp"

namespace perseus::server {

// A 95% interval, shown as [low, high].
struct Interval {
  double low = 0, high = 0;
};

// The all-max baseline the turnkey loop measured, per iteration of the whole job.
struct BaselineStatus {
  double iteration_time = 0, energy = 0;
  Interval iteration_time_ci, energy_ci;
  int rounds = 0, rejected = 0, probes = 0;
};

// The plan the turnkey loop aims at, in the job's units.
struct PlanStatus {
  std::optional<std::size_t> index;  // its frontier point; none: all-max
  std::string label;
  double predicted_time = 0, predicted_energy = 0;
  std::size_t frontier_points = 0;
  double planning_seconds = 0, unit_time = 0;
  std::map<std::string, std::string> cost_models;  // "stage 0 forward" -> exp | pwl | constant
  int step_ups = 0;                                // steps to a faster plan since the job began
  std::string reason;
};

// The mean of the rounds on the current plans, per iteration of the whole job.
struct MeasuredStatus {
  double iteration_time = 0, energy = 0;
  int rounds = 0;
};

// What the reported saving and slowdown are measured against.
struct ReferenceStatus {
  std::string name;
  double iteration_time = 0, energy = 0, conditions = 1;
};

enum class StragglerSource { api, baseline, detected };

struct StragglerStatus {
  double slowdown = 1;  // its time over the baseline's
  StragglerSource source = StragglerSource::detected;
  std::optional<int> dp_rank;            // the slow pipeline, when known
  std::optional<double> iteration_time;  // what the others slow down to (none: not followed yet)
};

// One data-parallel pipeline in the last round; a planning scheduler adds its plan.
struct PipelineStatus {
  std::size_t dp_rank = 0;
  double iteration_time = 0, energy = 0;
  std::optional<std::string> plan;
  std::optional<double> predicted_time;
};

// A scheduler's own part of its job's status (Scheduler::status). Every scheduler shows
// profiling, plan, baseline, saving, slowdown and straggler (null when it has none); one that plans
// online shows `online` too.
struct SchedulerStatus {
  nlohmann::json profiling = nullptr;  // its profiling progress, shown as it is
  std::optional<PlanStatus> plan;
  std::optional<BaselineStatus> baseline;
  std::optional<online::Estimate> saving, slowdown;  // ratios against the reference, with 95% intervals
  std::optional<StragglerStatus> straggler;

  struct Online {
    std::optional<MeasuredStatus> measured;
    std::optional<ReferenceStatus> reference;
    double energy_saved = 0;  // joules so far
    std::vector<PipelineStatus> pipelines;
    // The rest of its state, each key shown at the top level of the job's status as it is
    // (schedule, target, clocks, variability, decisions, history...); no metric reads these.
    nlohmann::json details = nlohmann::json::object();
  };
  std::optional<Online> online;
};

// The job's own measurement of its last round: time the slowest rank's, energy every rank's.
struct RoundMeasuredStatus {
  int round = 0;
  double iteration_time = 0, energy = 0;
};

// A power budget's view of one job (power_budget.hpp).
struct JobBudgetStatus {
  double weight = 1;
  int gpus = 1;
  double share = 0;                // W it is predicted to draw at its allocation
  std::optional<double> measured;  // W in its last round
  std::string counted_as;          // plans | measured | estimate
  std::optional<double> pace;      // the iteration time it is paced to
  std::optional<double> unpaced_time, throughput;
  double correction = 1;
  std::optional<double> power_limit;  // W per GPU, while the backstop holds
  bool probes_held = false;
  int rounds_since_change = 0;
};

// GET /jobs/{id}. GET /jobs lists the summary part of each (summary_json).
struct JobStatus {
  std::string job_id, scheduler;
  Dialect dialect = Dialect::perseus;
  JobPhase phase = JobPhase::registering;
  int round = 0, world_size = 0, registered = 0;

  nlohmann::json job = nullptr;  // the job's registration, without its secret
  int waiting_at_barrier = 0, reported = 0;
  double typical_round_s = 0;
  std::optional<std::string> end_detail;
  std::optional<RoundMeasuredStatus> measured;
  std::vector<PipelineStatus> pipelines;
  std::optional<JobBudgetStatus> power_budget;
  // The scheduler's part, its keys shown at the top level over the job's (none before the job's
  // scheduler exists).
  std::optional<SchedulerStatus> own;

  // Time and energy per iteration on the current plans as the status shows them: the planning
  // scheduler's mean when it has one, else the job's last round.
  struct Measured {
    double iteration_time = 0, energy = 0;
  };
  std::optional<Measured> shown_measured() const;
};

// GET /power_budget: the cluster's power budget, what the jobs are predicted to draw and drew.
struct PowerBudgetStatus {
  std::optional<double> budget;  // W; none: no budget
  std::string source;            // none | flag | api
  double seconds = 0;            // to comply within
  double set_seconds_ago = 0;
  bool deadline_passed = false;
  double predicted = 0;            // W at the jobs' allocation
  std::optional<double> measured;  // W, each job in its last round (none: no jobs)
  std::optional<double> all_max;   // W, every job at all-max (none: not known for all)
  bool within_reach = true, fairness_relaxed = false;
  struct Backstop {
    bool active = false;
    std::optional<double> power_limit;  // W per GPU
    std::optional<std::string> reason;
    std::optional<double> seconds;  // since it began
  } backstop;
  nlohmann::json since_set = nullptr;  // compliance since the budget was set, shown as it is
  struct Job {
    std::string job_id;
    JobPhase phase = JobPhase::running;
    JobBudgetStatus budget;
  };
  std::vector<Job> jobs;
  nlohmann::json history = nlohmann::json::array();  // the samples, shown as they are
};

// The JSON of the HTTP API, made here and nowhere else.
nlohmann::json to_json(const SchedulerStatus& status);
nlohmann::json to_json(const JobBudgetStatus& status);
nlohmann::json to_json(const JobStatus& status);
nlohmann::json summary_json(const JobStatus& status);  // what GET /jobs lists of a job
nlohmann::json to_json(const PowerBudgetStatus& status);

}  // namespace perseus::server
