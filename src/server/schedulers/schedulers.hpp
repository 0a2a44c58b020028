#pragma once
// Each scheduler's configure function: reads its arguments at server start and returns the
// factory the job manager calls once all ranks of a job registered.
#include <memory>
#include <nlohmann/json.hpp>

#include "perseus/server/scheduler.hpp"

namespace perseus::server {

SchedulerFactory configure_all_max_frequency(const nlohmann::json& args);
SchedulerFactory configure_two_frequencies(const nlohmann::json& args);
SchedulerFactory configure_instruction_profiler(const nlohmann::json& args);
SchedulerFactory configure_point_solution(const nlohmann::json& args);
SchedulerFactory configure_all_max_power_limit(const nlohmann::json& args);
SchedulerFactory configure_zeus_global_power_limit(const nlohmann::json& args);
SchedulerFactory configure_zeus_local_power_state(const nlohmann::json& args);
SchedulerFactory configure_perseus(const nlohmann::json& args);

// Stage-based schedulers see one rank per stage; they refuse jobs with dp or tp > 1 and point
// at their 3D-parallel version.
void require_pure_pipeline(const SchedulerContext& context, const char* scheduler);

// Every instruction of every rank at the rank's highest power state (all-max and warm-up rounds).
std::vector<PowerStateSchedule> top_clock_schedules(const std::vector<RankInfo>& ranks);

// What the power-limit baselines measure of a round, per iteration, after dropping each rank's
// first warmup_step_ratio of iterations (at least one), as the artifact's baselines do: the slowest
// rank's time, and every rank's energy and power (energy / time) summed. Throws when a rank
// reported too few iterations to drop any, naming `scheduler`.
struct RoundMeans {
  double time = 0, energy = 0, power = 0;
};
RoundMeans measure_round(const std::vector<ProfilingResult>& results, double warmup_step_ratio, const char* scheduler);

// A scheduler that hands out the same schedules every round and ignores what was measured.
std::unique_ptr<Scheduler> fixed_schedules(std::vector<PowerStateSchedule> schedules);

}  // namespace perseus::server
