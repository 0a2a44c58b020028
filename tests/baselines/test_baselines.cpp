// Baselines on small cases: all-max, EnvPipe (balanced, greedy, guard, reordered schedule) and
// the Zeus-style clocks; and the straggler what-if arithmetic.
#include <gtest/gtest.h>

#include "perseus/baselines/all_max.hpp"
#include "perseus/baselines/envpipe.hpp"
#include "perseus/baselines/registry.hpp"
#include "perseus/baselines/zeus.hpp"
#include "perseus/emulate/straggler.hpp"
#include "perseus/profile/synthetic.hpp"
#include "perseus/util/error.hpp"
#include "emulate_fixtures.hpp"

namespace perseus {
namespace {

using fixtures::two_clock_profile;

EmulatorConfig pipeline(int stages, int microbatches, double p_block = 5) {
  EmulatorConfig c;
  c.num_stages = stages;
  c.num_microbatches = microbatches;
  c.p_block = p_block;
  return c;
}

Profile synthetic(int stages) {
  SyntheticGpu gpu;
  gpu.num_stages = stages;
  return parse_profile(synthetic_profile_csv(gpu), "synthetic.csv");
}

TEST(AllMax, EveryInstructionAtTheTopClock) {
  const Emulator emulator(two_clock_profile(2), pipeline(2, 2));
  const Plan plan = all_max_plan(emulator);
  for (const auto& stage : plan.frequencies) EXPECT_EQ(stage, (std::vector<int>{1000, 1000, 1000, 1000}));
  EXPECT_DOUBLE_EQ(plan.time, 9);
  EXPECT_DOUBLE_EQ(plan.energy, 150);
}

TEST(EnvPipe, EnvelopeIsLastStageAndFirstForwardAndLastBackward) {
  const Emulator emulator(two_clock_profile(2), pipeline(2, 2));
  const auto envelope = envpipe_envelope(emulator);  // stage 0: F0 F1 B0 B1
  EXPECT_EQ(envelope[0], (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(envelope[1], (std::vector<bool>{true, true, true, true}));
}

TEST(EnvPipe, SlowsOffEnvelopeUnitsAndRaisesThoseOnTheCriticalPath) {
  const Emulator emulator(two_clock_profile(2), pipeline(2, 2));
  for (auto policy : {EnvPipePolicy::balanced, EnvPipePolicy::greedy}) {
    const auto r = envpipe_plan(emulator, policy);
    // Both off-envelope units start at 500 MHz (least energy); B0 then lies on the critical path
    // and is raised back; F1 keeps its slack.
    EXPECT_EQ(r.plan.frequencies[0], (std::vector<int>{1000, 500, 1000, 1000}));
    EXPECT_EQ(r.steps, 1);
    EXPECT_FALSE(r.guard);
    EXPECT_DOUBLE_EQ(r.plan.time, 9);
    EXPECT_DOUBLE_EQ(r.plan.energy, 143);
  }
}

TEST(EnvPipe, GuardStopsWhenANonLastStageIsHeaviest) {
  // Stage 0 takes 3x as long as stage 1: the critical path runs through stage 0's
  // off-envelope units even at the top clock, so EnvPipe can never reach its envelope.
  const Emulator emulator(two_clock_profile(2, 0, 3), pipeline(2, 4));
  for (auto policy : {EnvPipePolicy::balanced, EnvPipePolicy::greedy}) {
    const auto r = envpipe_plan(emulator, policy);
    EXPECT_TRUE(r.guard);
    EXPECT_NE(r.stop_reason.find("guard"), std::string::npos);
    EXPECT_LE(r.plan.time, all_max_plan(emulator).time + 1e-9);
  }
}

TEST(EnvPipe, BalancedAndGreedyKeepTheAllMaxTimeOnASyntheticPipeline) {
  const Profile profile = synthetic(4);
  const Emulator emulator(profile, pipeline(4, 8, 60));
  const Plan max = all_max_plan(emulator);
  const auto balanced = envpipe_plan(emulator, EnvPipePolicy::balanced);
  const auto greedy = envpipe_plan(emulator, EnvPipePolicy::greedy);
  for (const auto* r : {&balanced, &greedy}) {
    EXPECT_NEAR(r->plan.time, max.time, 1e-9 * max.time);
    EXPECT_LT(r->plan.energy, max.energy);
  }
  EXPECT_GE(greedy.steps, balanced.steps);  // greedy raises one unit per step
}

TEST(EnvPipe, ExtraForwardsFollowTheFormula) {
  // T_B,max = 2, T_F,opt = 2 (the 500 MHz forward): R_s = floor(2 * (S - s - 1) / 2) = S - s - 1,
  // capped by M - (S - s) and non-increasing.
  const Profile profile = two_clock_profile(4);
  EXPECT_EQ(envpipe_extra_forwards(profile, 4, 16), (std::vector<int>{3, 2, 1, 0}));
  EXPECT_EQ(envpipe_extra_forwards(profile, 4, 5), (std::vector<int>{1, 1, 1, 0}));      // M - (S - s)
  EXPECT_EQ(envpipe_extra_forwards(profile, 4, 16, 1), (std::vector<int>{1, 1, 1, 0}));  // memory
  // Stage 1 heavier: its own R would be larger, but R must not increase down the pipe.
  const Profile heavy = two_clock_profile(4, 1, 4);
  EXPECT_EQ(envpipe_extra_forwards(heavy, 4, 16), (std::vector<int>{3, 2, 1, 0}));
  const auto extra = envpipe_extra_forwards(heavy, 4, 16);
  EXPECT_NO_THROW(build_pipeline_dag(ScheduleKind::one_f_one_b, 4, 16, extra));
}

TEST(Zeus, EtaTradesEnergyAgainstTime) {
  const Profile profile = two_clock_profile(2);
  const Emulator emulator(profile, pipeline(2, 2, 0));
  ZeusOptions energy_only{1.0, 0};
  ZeusOptions time_only{0.0, 0};
  EXPECT_EQ(zeus_global_plan(emulator, profile, energy_only).frequencies[0][0], 500);
  EXPECT_EQ(zeus_global_plan(emulator, profile, time_only).frequencies[0][0], 1000);
  const Plan stage = zeus_stage_plan(emulator, profile, energy_only);
  for (const auto& s : stage.frequencies) EXPECT_EQ(s, (std::vector<int>{500, 500, 500, 500}));
  EXPECT_DOUBLE_EQ(profile_max_power(profile), 10);
  EXPECT_THROW(zeus_global_plan(emulator, profile, ZeusOptions{1.5, 0}), Error);
}

TEST(Zeus, PerStageClocksDifferWhenStagesDo) {
  // Stage 0 is 3x slower at the same energy: its time term weighs more, so it keeps the top
  // clock while stage 1 slows down. MaxPower 1 W, eta 0.5: cost per microbatch 0.5 E + 0.5 T.
  const Profile profile = two_clock_profile(2, 0, 3);
  const Emulator emulator(profile, pipeline(2, 2, 0));
  const Plan plan = zeus_stage_plan(emulator, profile, ZeusOptions{0.5, 1});
  EXPECT_EQ(plan.frequencies[0][0], 1000);  // 15 + 4.5 = 19.5 < 12 + 9 = 21
  EXPECT_EQ(plan.frequencies[1][0], 500);   // 15 + 1.5 = 16.5 > 12 + 3 = 15
}

TEST(Registry, NamesRunAndUnknownIsAUsageError) {
  const Profile profile = two_clock_profile(2);
  const Emulator emulator(profile, pipeline(2, 2));
  for (const auto& name : baseline_names()) {
    const auto r = run_baseline(name, profile, emulator);
    EXPECT_EQ(r.plan.frequencies.size(), 2u) << name;
    EXPECT_FALSE(r.note.empty()) << name;
  }
  try {
    run_baseline("nope", profile, emulator);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_setting);
  }
}

TEST(Straggler, HandComputedCluster) {
  // S = 2, P_block = 1 W, D = 3 pipelines.
  const PlanCost all_max{10, 100};
  const std::vector<std::pair<std::string, PlanCost>> fixed{{"envpipe", {10, 90}}};
  const std::vector<PlanCost> frontier{{12, 70}, {10, 85}};
  const auto rows = straggler_whatif(all_max, fixed, frontier, {2, 1.0, 3, {1.0, 1.2}});
  ASSERT_EQ(rows.size(), 6u);
  // T'/T = 1: straggler 100 J; others run their plans.
  EXPECT_EQ(rows[0].method, "all-max");
  EXPECT_DOUBLE_EQ(rows[0].energy, 300);
  EXPECT_DOUBLE_EQ(rows[1].energy, 280);
  EXPECT_EQ(rows[2].method, "perseus");
  EXPECT_DOUBLE_EQ(rows[2].energy, 270);
  EXPECT_DOUBLE_EQ(rows[2].plan_time, 10);
  EXPECT_DOUBLE_EQ(rows[2].saving, 0.1);
  EXPECT_DOUBLE_EQ(rows[2].saving_non_straggler, 30.0 / 200);
  // T'/T = 1.2: deadline 12 s, straggler 120 J; all-max blocks 2 s on 2 GPUs (4 J).
  EXPECT_DOUBLE_EQ(rows[3].energy, 120 + 2 * 104);
  EXPECT_DOUBLE_EQ(rows[4].energy, 120 + 2 * 94);
  EXPECT_DOUBLE_EQ(rows[5].energy, 120 + 2 * 70);
  EXPECT_DOUBLE_EQ(rows[5].plan_time, 12);
  EXPECT_THROW(straggler_whatif(all_max, fixed, frontier, {2, 1.0, 3, {0.9}}), Error);
}

// The Perseus evaluation notebook's meter: T is the planner's fastest (9.5 s here, all-max emulates
// at 10 s), each method's straggler runs its own plan for T'/T = 1 stretched, perseus picks the
// frontier plan with the least energy of its own. S = 2, P_block = 1 W, D = 3.
TEST(Straggler, PaperConventionHandComputed) {
  const PlanCost all_max{10, 100};
  const std::vector<std::pair<std::string, PlanCost>> fixed{{"envpipe", {10, 90}}};
  const std::vector<PlanCost> predicted{{12, 70}, {11, 75}, {9.5, 88}};
  StragglerConfig config{2, 1.0, 3, {1.0, 1.2}};
  config.convention = StragglerConvention::paper;
  config.reference_time = 9.5;
  const auto rows = straggler_whatif(all_max, fixed, predicted, config);
  ASSERT_EQ(rows.size(), 6u);
  // T'/T = 1: deadline 9.5 s; all-max and EnvPipe still take 10 s, their stragglers run their own plans.
  EXPECT_DOUBLE_EQ(rows[0].iteration_time, 10);
  EXPECT_DOUBLE_EQ(rows[0].energy, 300);
  EXPECT_DOUBLE_EQ(rows[1].energy, 270);
  EXPECT_DOUBLE_EQ(rows[2].plan_time, 9.5);
  EXPECT_DOUBLE_EQ(rows[2].energy, 3 * 88);
  // T'/T = 1.2: deadline 11.4 s. All-max's straggler takes 12 s: 120 J; the others block 2 s.
  EXPECT_DOUBLE_EQ(rows[3].iteration_time, 12);
  EXPECT_DOUBLE_EQ(rows[3].energy, 120 + 2 * 104);
  EXPECT_DOUBLE_EQ(rows[4].energy, 108 + 2 * 94);
  // Perseus: the 11 s plan (75 J) finishes by 11.4 s; its straggler is the 9.5 s plan stretched.
  EXPECT_DOUBLE_EQ(rows[5].plan_time, 11);
  EXPECT_DOUBLE_EQ(rows[5].iteration_time, 11.4);
  EXPECT_NEAR(rows[5].energy, 88 * 1.2 + 2 * (75 + 2 * 0.4), 1e-9);
  EXPECT_NEAR(rows[5].saving, (328 - rows[5].energy) / 328, 1e-12);
  // Under perseus's own meter the same inputs give other numbers: T = 10 s, all-max's straggler.
  const auto ours = straggler_whatif(all_max, fixed, predicted, {2, 1.0, 3, {1.0, 1.2}});
  EXPECT_DOUBLE_EQ(ours[5].iteration_time, 12);
  EXPECT_NE(ours[5].energy, rows[5].energy);
}

TEST(Straggler, SlowFixedPlanStretchesTheWholeCluster) {
  const auto rows = straggler_whatif({10, 100}, {{"slow", {11, 80}}}, {}, {2, 1.0, 2, {1.0}});
  EXPECT_DOUBLE_EQ(rows[1].iteration_time, 11);
  EXPECT_DOUBLE_EQ(rows[1].energy, (100 + 2) + 80);  // the straggler now waits 1 s
  EXPECT_EQ(cheapest_by_deadline({{11, 1}}, 10, 2, 1), -1);
}

}  // namespace
}  // namespace perseus
