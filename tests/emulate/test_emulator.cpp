// The emulator on hand-computable pipelines, the judge and deadline fitting.
#include <gtest/gtest.h>

#include "perseus/emulate/deadline_fit.hpp"
#include "perseus/emulate/emulator.hpp"
#include "perseus/emulate/judge.hpp"
#include "perseus/plan/frontier_record.hpp"
#include "perseus/util/error.hpp"
#include "emulate_fixtures.hpp"
#include "solver_fixtures.hpp"

namespace perseus {
namespace {

using fixtures::two_clock_profile;

EmulatorConfig two_by_two(double p_block = 5) {
  EmulatorConfig c;
  c.num_stages = 2;
  c.num_microbatches = 2;
  c.p_block = p_block;
  return c;
}

const std::vector<std::vector<int>> kAllMax{{1000, 1000, 1000, 1000}, {1000, 1000, 1000, 1000}};

TEST(Emulator, TwoStagesTwoMicrobatchesExact) {
  const Emulator emulator(two_clock_profile(2), two_by_two());
  // 1F1B: stage 0 runs F0 F1 B0 B1, stage 1 runs F0 B0 F1 B1.
  ASSERT_EQ(emulator.layout()[0][1].kind, InstructionKind::forward);
  ASSERT_EQ(emulator.layout()[1][1].kind, InstructionKind::backward);
  const auto r = emulator.run(kAllMax);
  EXPECT_DOUBLE_EQ(r.iteration_time, 9);
  const std::vector<std::vector<double>> starts{{0, 1, 4, 7}, {1, 2, 4, 5}};
  for (int s = 0; s < 2; ++s) {
    for (int k = 0; k < 4; ++k) EXPECT_DOUBLE_EQ(r.instructions[s][k].start, starts[s][k]) << s << "," << k;
    EXPECT_DOUBLE_EQ(r.stages[s].busy_time, 6);
    EXPECT_DOUBLE_EQ(r.stages[s].idle_time, 3);
    EXPECT_DOUBLE_EQ(r.stages[s].compute_energy, 60);
    EXPECT_DOUBLE_EQ(r.stages[s].idle_energy, 15);
  }
  EXPECT_DOUBLE_EQ(r.energy, 150);
  const auto [time, energy] = emulator.time_and_energy(kAllMax);
  EXPECT_DOUBLE_EQ(time, 9);
  EXPECT_DOUBLE_EQ(energy, 150);
  // Critical path: s0F0 -> s1F0 -> s1B0 -> s1F1 -> s1B1 -> s0B1; stage 0's F1 and B0 have slack.
  const std::vector<std::vector<bool>> critical{{true, false, false, true}, {true, true, true, true}};
  for (int s = 0; s < 2; ++s) {
    for (int k = 0; k < 4; ++k) EXPECT_EQ(r.instructions[s][k].critical, critical[s][k]) << s << "," << k;
  }
}

TEST(Emulator, SlowerClockOffThePathSavesEnergyWithoutSlowdown) {
  const Emulator emulator(two_clock_profile(2), two_by_two());
  // Stage 0's F1 has 1 s of slack: at 500 MHz it takes 2 s and 8 J.
  const auto r = emulator.run({{1000, 500, 1000, 1000}, {1000, 1000, 1000, 1000}});
  EXPECT_DOUBLE_EQ(r.iteration_time, 9);
  EXPECT_DOUBLE_EQ(r.energy, 150 - 2 - 5);  // 2 J less compute, 1 s less waiting at 5 W
}

TEST(Emulator, MissingClockAndWrongShapeAreNamedErrors) {
  const Emulator emulator(two_clock_profile(2), two_by_two());
  try {
    emulator.run({{1000, 1000, 1000, 1000}, {1000, 1234, 1000, 1000}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1 slot 1 (B0) runs at 1234 MHz"), std::string::npos) << e.what();
    EXPECT_EQ(e.kind(), ErrorKind::bad_input);
  }
  EXPECT_THROW(emulator.run({{1000, 1000, 1000, 1000}}), Error);
  EXPECT_THROW(emulator.run({{1000, 1000, 1000}, {1000, 1000, 1000, 1000}}), Error);
  EmulatorConfig three = two_by_two();
  three.num_stages = 3;
  EXPECT_THROW(Emulator(two_clock_profile(2), three), InputError);  // the profile lacks stage 2
}

TEST(Emulator, QuantumFloorsTimes) {
  auto config = two_by_two(0);
  config.quantum = 0.75;  // 1 s -> 0.75 s, 2 s -> 1.5 s
  const Emulator emulator(two_clock_profile(2), config);
  const auto r = emulator.run(kAllMax);
  EXPECT_DOUBLE_EQ(r.iteration_time, 9 * 0.75);
  EXPECT_DOUBLE_EQ(r.energy, 120);  // energies are the measured ones
}

TEST(Emulator, NoiseIsSeededAndMultiplicative) {
  const Emulator emulator(two_clock_profile(2), two_by_two());
  const auto a = emulator.run(kAllMax, EmulatorNoise{0.1, 7});
  const auto b = emulator.run(kAllMax, EmulatorNoise{0.1, 7});
  const auto c = emulator.run(kAllMax, EmulatorNoise{0.1, 8});
  EXPECT_EQ(a.iteration_time, b.iteration_time);
  EXPECT_EQ(a.energy, b.energy);
  EXPECT_NE(a.energy, c.energy);
  EXPECT_EQ(emulator.run(kAllMax, EmulatorNoise{0, 7}).energy, 150);
  // Power is unchanged by the noise: each instruction's energy/time stays 10 W.
  for (const auto& stage : a.instructions) {
    for (const auto& i : stage) EXPECT_NEAR(i.energy / i.duration, 10, 1e-9);
  }
}

TEST(Emulator, ExtraForwardsScheduleRuns) {
  EmulatorConfig config = two_by_two();
  config.num_microbatches = 4;
  config.extra_forwards = {1, 0};  // stage 0 runs 3 forwards before its first backward
  const Emulator emulator(two_clock_profile(2), config);
  EXPECT_EQ(emulator.layout()[0][2].kind, InstructionKind::forward);
  EXPECT_EQ(emulator.layout()[0][3].kind, InstructionKind::backward);
  config.extra_forwards = {0, 1};  // the last stage cannot
  EXPECT_THROW(Emulator(two_clock_profile(2), config), Error);
}

TEST(Judge, QuantizedEmulationNeverSlowerThanThePlannerPredicts) {
  const auto problem = fixtures::synthetic_problem(3, 4, 0.02, 5);
  const auto frontier = solve_frontier(problem);
  const auto record = make_frontier_record(problem, frontier, {"synthetic.csv", "exp"});
  SyntheticGpu gpu;
  gpu.num_stages = 3;
  gpu.noise = 0.02;
  gpu.seed = 5;
  gpu.forward_time = 0.02 + 0.005 * (5 % 3);
  const Profile profile = parse_profile(synthetic_profile_csv(gpu), "synthetic.csv");
  EmulatorConfig config;
  config.num_stages = 3;
  config.num_microbatches = 4;
  config.p_block = 70;
  config.quantum = 0.001;
  const Emulator emulator(profile, config);
  const auto judged = judge_frontier(record, emulator);
  ASSERT_EQ(judged.size(), record.points.size());
  ASSERT_FALSE(judged.empty());
  for (const auto& p : judged) {
    // The solver's durations are at least the quantized times of the clocks it picked.
    EXPECT_LE(p.emulated_time, p.model_time + 1e-9) << p.index;
    EXPECT_DOUBLE_EQ(p.model_energy, record.points[p.index].energy);
  }
  const auto summary = summarize(judged);
  EXPECT_EQ(summary.points, judged.size());
  EXPECT_GE(summary.max_abs_energy_error, summary.mean_abs_energy_error);

  EmulatorConfig other = config;
  other.num_microbatches = 5;
  EXPECT_THROW(judge_frontier(record, Emulator(profile, other)), Error);
}

// Megatron's interleaved 1F1B, 2 stages x 2 chunks, 2 microbatches, forwards 1 s, backwards 2 s.
// Stage 0 runs F0c0 F1c0 F0c1 F1c1 B0c1 B1c1 B0c0 B1c0, stage 1 F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 B0c0
// B1c0; model stages 0..3 sit on GPUs 0, 1, 0, 1. By hand: stage 1's B1c1 (model stage 3) ends at
// 9, stage 0's B1c1 at 11, stage 1's B1c0 at 13 and stage 0's B1c0 at 15.
TEST(Emulator, InterleavedHandComputedCriticalPath) {
  EmulatorConfig config = two_by_two();
  config.schedule = ScheduleKind::interleaved;
  config.virtual_stages = 2;
  const Emulator emulator(two_clock_profile(4), config);
  const std::vector<std::vector<int>> all_max(2, std::vector<int>(8, 1000));
  const auto r = emulator.run(all_max);
  EXPECT_DOUBLE_EQ(r.iteration_time, 15);
  const std::vector<std::vector<double>> ends{{1, 2, 3, 4, 8, 11, 13, 15}, {2, 3, 4, 6, 7, 9, 11, 13}};
  for (int s = 0; s < 2; ++s) {
    for (int k = 0; k < 8; ++k) {
      const auto& run = r.instructions[s][k];
      EXPECT_DOUBLE_EQ(run.start + run.duration, ends[s][k]) << s << "," << k;
    }
    EXPECT_DOUBLE_EQ(r.stages[s].busy_time, 12);
  }
  EXPECT_DOUBLE_EQ(r.energy, 2 * (4 * 10 + 4 * 20) + 2 * 3 * 5.0);

  // The same model stages as (pipeline stage, chunk) rows: model stage = chunk * S + stage.
  std::string csv = "stage,chunk,instruction,frequency,time,energy\n";
  for (int s = 0; s < 2; ++s)
    for (int c = 0; c < 2; ++c)
      csv += fmt::format(
          "{0},{1},forward,1000,1,10\n{0},{1},forward,500,2,8\n{0},{1},backward,1000,2,20\n"
          "{0},{1},backward,500,4,16\n",
          s, c);
  const Emulator chunked(parse_profile(csv, "chunks.csv"), config);
  EXPECT_DOUBLE_EQ(chunked.run(all_max).iteration_time, 15);
  // A slower chunk 1 on stage 1 (model stage 3) is found under its model stage.
  const Profile slow = two_clock_profile(4, 3, 2.0);
  EXPECT_GT(Emulator(slow, config).run(all_max).iteration_time, 15);
}

TEST(Judge, InterleavedFrontierPlansEmulateAsPredicted) {
  const auto problem =
      fixtures::synthetic_problem(2, 4, 0.0, 3, CostModelKind::exponential, ScheduleKind::interleaved, 2);
  const auto frontier = solve_frontier(problem);
  const auto record = make_frontier_record(problem, frontier, {"synthetic.csv", "exp"});
  EXPECT_EQ(record.virtual_stages, 2);
  SyntheticGpu gpu;
  gpu.num_stages = 4;
  gpu.seed = 3;
  gpu.forward_time = 0.02 + 0.005 * (3 % 3);
  EmulatorConfig config;
  config.num_stages = 2;
  config.num_microbatches = 4;
  config.p_block = 70;
  config.quantum = 0.001;
  config.schedule = ScheduleKind::interleaved;
  config.virtual_stages = 2;
  const Emulator emulator(parse_profile(synthetic_profile_csv(gpu), "synthetic.csv"), config);
  const auto judged = judge_frontier(record, emulator);
  ASSERT_GT(judged.size(), 10u);
  for (const auto& p : judged) EXPECT_LE(p.emulated_time, p.model_time + 1e-9) << p.index;
  // The fastest plan is all-max: the emulator's time for it is the planner's.
  EXPECT_NEAR(judged.back().emulated_time, judged.back().model_time, 1e-9);
}

TEST(DeadlineFit, RaisesCriticalClocksUntilTheDeadlineHolds) {
  const Emulator emulator(two_clock_profile(2), two_by_two());
  const std::vector<std::vector<int>> all_min{{500, 500, 500, 500}, {500, 500, 500, 500}};
  ASSERT_DOUBLE_EQ(emulator.run(all_min).iteration_time, 18);
  const auto fit = fit_to_deadline(emulator, all_min, 9);
  ASSERT_TRUE(fit);
  EXPECT_LE(fit->time, 9);
  EXPECT_GT(fit->steps, 0);
  // Only the off-path units may stay slow.
  EXPECT_EQ(fit->frequencies[1], (std::vector<int>{1000, 1000, 1000, 1000}));
  EXPECT_LT(fit->energy, 150);
  EXPECT_FALSE(fit_to_deadline(emulator, all_min, 8.5));  // faster than all-max: impossible
  const auto already = fit_to_deadline(emulator, all_min, 20);
  ASSERT_TRUE(already);
  EXPECT_EQ(already->steps, 0);
}

}  // namespace
}  // namespace perseus

namespace perseus {
namespace {

// Recomputation: every backward runs its forward again first, at the backward's clock.
TEST(Recomputation, BackwardsGetTheirForwardsTimeAndEnergyAtTheSameClock) {
  const Profile profile = parse_profile(
      "stage,instruction,frequency,time,energy\n"
      "0,forward,1410,1.0,10\n0,forward,1200,1.5,8\n0,backward,1410,2.0,20\n0,backward,1200,3.0,16\n"
      "1,forward,1410,1.0,10\n1,backward,1410,2.0,20\n",
      "recompute.csv");
  const Profile with = with_recomputation(profile);
  ASSERT_EQ(with.rows.size(), profile.rows.size());
  EXPECT_DOUBLE_EQ(with.rows[2].time, 3.0);   // 2 + 1 at 1410
  EXPECT_DOUBLE_EQ(with.rows[3].time, 4.5);   // 3 + 1.5 at 1200
  EXPECT_DOUBLE_EQ(with.rows[3].energy, 24);  // 16 + 8
  EXPECT_DOUBLE_EQ(with.rows[0].time, 1.0);   // forwards unchanged

  // The 1F1B order is the same, so the all-max critical path of 2 stages x 2 microbatches with F = 1
  // and B = 2 + 1 is, by hand: s0 F0[0,1] F1[1,2]; s1 F0[1,2] B0[2,5] F1[5,6] B1[6,9]; s0 B0[5,8] B1[9,12].
  EmulatorConfig config;
  config.num_stages = 2;
  config.num_microbatches = 2;
  const std::vector<std::vector<int>> top{{1410, 1410, 1410, 1410}, {1410, 1410, 1410, 1410}};
  EXPECT_DOUBLE_EQ(Emulator(with, config).run(top).iteration_time, 12.0);
  EXPECT_DOUBLE_EQ(Emulator(profile, config).run(top).iteration_time, 9.0);  // without (B = 2): ... B1[7,9]

  const Profile missing = parse_profile(
      "stage,instruction,frequency,time,energy\n0,forward,1410,1,1\n0,backward,1410,2,2\n0,backward,1200,3,3\n",
      "m.csv");
  try {
    (void)with_recomputation(missing);
    ADD_FAILURE() << "a backward without its forward's clock was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("m.csv:4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no forward at that clock"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace perseus
