// The planner on random noisy profiles (random_profiles.hpp): every valid profile plans under the
// default cost model, to the fastest iteration time, and every frontier plan keeps its promise on
// the emulator. A few seconds' worth of cases here; PERSEUS_RANDOM_CASES=5000 for thousands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "perseus/baselines/all_max.hpp"
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
  config.virtual_stages = c.virtual_stages;
  config.unit_time = c.unit_time;
  config.p_block = c.p_block;
  return config;
}

EmulatorConfig emulator_config(const RandomProfileCase& c, double quantum) {
  EmulatorConfig config;
  config.num_stages = c.stages;
  config.num_microbatches = c.microbatches;
  config.schedule = c.schedule;
  config.virtual_stages = c.virtual_stages;
  config.p_block = c.p_block;
  config.quantum = quantum;
  return config;
}

bool near(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)); }

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
  // Quantized times fall point by point, but for the fitted fastest point, which runs faster on
  // the profile at the same quantized time.
  int previous = frontier.start_quant_time + (planned.only_the_start ? 1 : 0);
  for (std::size_t i = 0; i < frontier.points.size(); ++i) {
    const auto& point = frontier.points[i];
    if (frontier.fastest_fitted && i + 1 == frontier.points.size()) {
      EXPECT_EQ(point.quant_time, previous);
      EXPECT_LT(point.exact_time, frontier.points[i - 1].exact_time);
      continue;
    }
    EXPECT_LT(point.quant_time, previous) << "the frontier's times must fall";
    previous = point.quant_time;
  }
  EXPECT_EQ(frontier.points.back().quant_time, planned.fastest_quant_time);

  // Every plan on the emulator: its emulated time and energy are the frontier's; with the planner's
  // floored times it runs no longer than the planner says.
  const Emulator emulator(profile, emulator_config(c, 0));
  const Emulator quantized(profile, emulator_config(c, c.unit_time));
  const FrontierRecord record = make_frontier_record(planned.problem, frontier, {"random.csv", "auto"});
  Plan plan = plan_at(record, 0);
  for (std::size_t i = 0; i < record.points.size(); ++i) {
    advance_plan(record, plan, i);
    const auto [time, energy] = emulator.time_and_energy(plan.frequencies);
    EXPECT_TRUE(near(record.points[i].emulated_time, time))
        << "point " << i << ": " << record.points[i].emulated_time << " s against the emulator's " << time << " s";
    EXPECT_TRUE(near(record.points[i].emulated_energy, energy))
        << "point " << i << ": " << record.points[i].emulated_energy << " J against the emulator's " << energy << " J";
    EXPECT_LE(quantized.time_and_energy(plan.frequencies).time, record.points[i].time * (1 + 1e-9)) << "point " << i;
    if (::testing::Test::HasFailure()) return true;
  }
  // The fastest point is the last, and no plan of every instruction at its fastest clock is faster.
  EXPECT_EQ(fastest_point(record), record.points.size() - 1);
  const auto all_max = all_max_plan(emulator);
  if (c.top_clock_fastest) {
    EXPECT_TRUE(near(record.points.back().emulated_time, all_max.time))
        << record.points.back().emulated_time << " s against all-max's " << all_max.time << " s";
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

// On every schedule, a profile whose top clock is each operation's fastest: the fastest point runs
// exactly as fast as all-max on the profile, and every point's emulated time is the emulator's.
TEST(PlanningOnRandomProfiles, TheFastestPointRunsAsFastAsAllMaxOnEverySchedule) {
  const int cases = random_case_count(4);
  for (ScheduleKind schedule : all_schedule_kinds()) {
    for (int seed = 1; seed <= cases; ++seed) {
      RandomProfileRequest request;
      request.schedule = schedule;
      request.top_clock_fastest = true;
      request.duplicate_rows = false;
      const auto c = random_profile_case(static_cast<std::uint64_t>(1000 + seed), request);
      ASSERT_TRUE(c.top_clock_fastest);
      check_case(c);
      if (HasFailure()) return;
    }
  }
}
