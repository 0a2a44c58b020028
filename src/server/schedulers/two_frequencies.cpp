// Forwards at one clock and backwards at another on every rank, forever; the other
// instructions inherit the preceding forward's or backward's clock.
#include <fmt/format.h>

#include <algorithm>

#include "scheduler_args.hpp"
#include "schedulers.hpp"

namespace perseus::server {
namespace {

std::vector<PowerStateSchedule> two_frequency_schedules(const SchedulerContext& context, int forward, int backward) {
  std::vector<PowerStateSchedule> schedules;
  for (const auto& r : context.ranks) {
    for (int clock : {forward, backward}) {
      if (std::find(r.power_state_range.begin(), r.power_state_range.end(), clock) == r.power_state_range.end())
        throw std::runtime_error(fmt::format("TwoFrequencies: rank {}'s GPU does not support {} MHz", r.rank, clock));
    }
    std::vector<int> compute;
    for (auto kind : compute_kinds(r.pipe_schedule))
      compute.push_back(kind == InstructionKind::forward ? forward : backward);
    schedules.push_back(
        {r.rank, expand_compute_clocks(r.pipe_schedule, compute, fmt::format("TwoFrequencies, rank {}", r.rank))});
  }
  return schedules;
}

}  // namespace

SchedulerFactory configure_two_frequencies(const nlohmann::json& args) {
  SchedulerArgs checked("TwoFrequencies", args, {"forward_freq", "backward_freq"});
  auto forward = checked.integer("forward_freq");
  auto backward = checked.integer("backward_freq");
  if (!forward) checked.fail("forward_freq", "is required");
  if (!backward) checked.fail("backward_freq", "is required");
  if (*forward <= 0) checked.fail("forward_freq", "must be positive");
  if (*backward <= 0) checked.fail("backward_freq", "must be positive");
  return [f = *forward, b = *backward](const SchedulerContext& context) {
    return fixed_schedules(two_frequency_schedules(context, f, b));
  };
}

}  // namespace perseus::server
