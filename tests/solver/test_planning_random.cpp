// The planner on random noisy profiles (random_profiles.hpp): every valid profile plans under the
// default cost model, to the fastest iteration time, and every frontier plan keeps its promise on
// the emulator. A few seconds' worth of cases here; PERSEUS_RANDOM_CASES=5000 for thousands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "perseus/emulate/emulator.hpp"
#include "perseus/plan/frontier_record.hpp"
#include "perseus/solver/planning.hpp"
#include "perseus/util/error.hpp"
#include "random_profiles.hpp"

using namespace perseus;
using namespace perseus::fixtures;

namespace {

PlanningConfig config_of(const RandomProfileCase& c) {
  PlanningConfig config;
  config.num_stages = c.stages;
  config.num_microbatches = c.microbatches;
  config.schedule = c.schedule;
  config.unit_time = c.unit_time;
  config.p_block = c.p_block;
  return config;
}

EmulatorConfig emulator_config(const RandomProfileCase& c, double quantum) {
  EmulatorConfig config;
  config.num_stages = c.stages;
  config.num_microbatches = c.microbatches;
  config.schedule = c.schedule;
  config.p_block = c.p_block;
  config.quantum = quantum;
  return config;
}

// Checks one case; returns false when the profile was (rightly) rejected.
bool check_case(const RandomProfileCase& c) {
  SCOPED_TRACE(c.describe());
  if (c.duplicate_row) {
    EXPECT_THROW(parse_profile(c.csv, "random.csv"), InputError);
    return false;
  }
  const Profile profile = parse_profile(c.csv, "random.csv");
  const PlannedFrontier planned = plan_frontier(profile, config_of(c));
  const Frontier& frontier = planned.frontier;
  EXPECT_FALSE(planned.stopped_early()) << frontier.stop_text();
  EXPECT_FALSE(frontier.points.empty());
  if (frontier.points.empty()) return true;
  int previous = frontier.start_quant_time + (planned.only_the_start ? 1 : 0);
  for (const auto& point : frontier.points) {
    EXPECT_LT(point.quant_time, previous) << "the frontier's times must fall";
    previous = point.quant_time;
  }
  EXPECT_EQ(frontier.points.back().quant_time, planned.fastest_quant_time);

  // On the emulator with the planner's floored times, no plan runs longer than the planner says.
  const Emulator quantized(profile, emulator_config(c, c.unit_time));
  const FrontierRecord record = make_frontier_record(planned.problem, frontier, {"random.csv", "auto"});
  Plan plan = plan_at(record, 0);
  for (std::size_t i = 0; i < record.points.size(); ++i) {
    advance_plan(record, plan, i);
    const auto [time, energy] = quantized.time_and_energy(plan.frequencies);
    EXPECT_LE(time, record.points[i].time * (1 + 1e-9)) << "point " << i;
  }
  return true;
}

}  // namespace

TEST(PlanningOnRandomProfiles, EveryValidProfilePlansToItsFastestTime) {
  const int cases = random_case_count(40);
  int planned = 0;
  for (int seed = 1; seed <= cases; ++seed) {
    planned += check_case(random_profile_case(static_cast<std::uint64_t>(seed))) ? 1 : 0;
    if (HasFailure()) break;  // the first failing case says enough
  }
  RecordProperty("planned", planned);
  EXPECT_GT(planned, cases * 8 / 10);
}
