// One emulator core: the emulator's single run, its noisy batches (what the noise-aware choice
// judges plans with) and the cost tables the simulated cluster reads agree on random profiles,
// schedules, plans and clock latencies.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "perseus/emulate/cost_tables.hpp"
#include "perseus/emulate/emulator.hpp"
#include "perseus/emulate/noisy_batch.hpp"
#include "perseus/profile/profile.hpp"
#include "random_profiles.hpp"

namespace perseus {
namespace {

constexpr int kCases = 60;

struct RandomEmulation {
  fixtures::RandomProfileCase source;
  Profile profile;
  EmulatorConfig config;
};

RandomEmulation random_emulation(std::uint64_t seed) {
  const ScheduleKind schedules[] = {ScheduleKind::one_f_one_b, ScheduleKind::gpipe, ScheduleKind::interleaved,
                                    ScheduleKind::zb_h1,       ScheduleKind::zbv,   ScheduleKind::dualpipev};
  fixtures::RandomProfileRequest request;
  request.schedule = schedules[seed % 6];
  request.duplicate_rows = false;
  RandomEmulation e;
  e.source = fixtures::random_profile_case(seed, request);
  e.profile = parse_profile(e.source.csv, "random.csv");
  e.config.num_stages = e.source.stages;
  e.config.num_microbatches = e.source.microbatches;
  e.config.schedule = e.source.schedule;
  e.config.virtual_stages = e.source.virtual_stages;
  e.config.p_block = e.source.p_block;
  std::mt19937_64 rng(seed);
  if (seed % 3 == 1) e.config.quantum = e.source.unit_time;
  // Latencies from none to longer than some instructions (they then run at the old clock whole).
  if (seed % 2 == 1) e.config.clock_latency = std::uniform_real_distribution<double>(0, 0.05)(rng);
  return e;
}

std::vector<std::vector<int>> random_plan(const Emulator& emulator, std::mt19937_64& rng) {
  std::vector<std::vector<int>> plan;
  for (const auto& stage : emulator.layout()) {
    plan.emplace_back();
    for (const auto& inst : stage) {
      const auto& clocks = emulator.clocks(inst);
      plan.back().push_back(clocks[std::uniform_int_distribution<std::size_t>(0, clocks.size() - 1)(rng)]);
    }
  }
  return plan;
}

TEST(NoisyBatch, WithoutNoiseIsTheEmulatorsTimeAndEnergy) {
  for (std::uint64_t seed = 0; seed < kCases; ++seed) {
    const auto e = random_emulation(seed);
    const Emulator emulator(e.profile, e.config);
    NoisyBatchOptions options;
    options.clock_latency = e.config.clock_latency;
    options.pipelines = 4;  // without noise every pipeline is the same: one is drawn
    const NoisyBatch batch(emulator, options);
    ASSERT_EQ(batch.samples(), 1);
    ASSERT_EQ(batch.pipelines(), 1);
    std::mt19937_64 rng(seed);
    for (int p = 0; p < 3; ++p) {
      const auto plan = random_plan(emulator, rng);
      const auto [time, energy] = emulator.time_and_energy(plan);
      const auto r = batch.evaluate(plan, NoisyBatch::Detail::time).estimate;
      EXPECT_EQ(r.time, time) << e.source.describe();
      EXPECT_NEAR(r.energy, energy, 1e-12 * energy) << e.source.describe();  // summed in another order
      EXPECT_EQ(r.time_stddev, 0);
      const auto run = emulator.run(plan);
      EXPECT_EQ(run.iteration_time, time) << e.source.describe();
      EXPECT_NEAR(run.energy, energy, 1e-12 * energy) << e.source.describe();
    }
  }
}

TEST(NoisyBatch, OneDrawIsTheEmulatorsNoisyRun) {
  for (std::uint64_t seed = 0; seed < kCases; ++seed) {
    const auto e = random_emulation(seed);
    const Emulator emulator(e.profile, e.config);
    std::vector<std::array<double, 2>> sigma;
    std::mt19937_64 rng(seed);
    for (int s = 0; s < e.config.num_stages; ++s)
      sigma.push_back({std::uniform_real_distribution<double>(0, 0.05)(rng), seed % 4 == 0 ? 0.0 : 0.03});
    const EmulatorNoise noise(0, 100 + seed, sigma);
    NoisyBatchOptions options;
    options.noise = noise;
    options.samples = 1;
    options.clock_latency = e.config.clock_latency;
    const NoisyBatch batch(emulator, options);
    const auto plan = random_plan(emulator, rng);
    const auto r = batch.evaluate(plan, NoisyBatch::Detail::gradient);
    const auto run = emulator.run(plan, noise);
    EXPECT_EQ(r.estimate.time, run.iteration_time) << e.source.describe();
    EXPECT_NEAR(r.estimate.energy, run.energy, 1e-12 * run.energy) << e.source.describe();
    // The batch's gradient (one draw: the noise factor of each critical node) marks the run's critical path.
    for (std::size_t s = 0; s < run.instructions.size(); ++s)
      for (std::size_t k = 0; k < run.instructions[s].size(); ++k) {
        const int node = batch.walk().stage_nodes[s][k];
        EXPECT_EQ(r.gradient[static_cast<std::size_t>(node)] > 0, run.instructions[s][k].critical)
            << e.source.describe() << " stage " << s << " slot " << k;
      }
  }
}

TEST(CostTables, AClockBetweenProfiledOnesRunsAtTheNextSlowerOne) {
  const auto e = random_emulation(3);
  const CostTables tables(e.profile, e.config);
  const auto& t = tables.of(0, InstructionKind::forward);
  ASSERT_FALSE(t.clocks.empty());
  EXPECT_EQ(t.at_or_below(t.clocks.front() + 500), 0u);                // above them all: the top one
  EXPECT_EQ(t.at_or_below(t.clocks.back() - 1), t.clocks.size() - 1);  // below them all: the slowest one
  for (std::size_t i = 0; i < t.clocks.size(); ++i) {
    EXPECT_EQ(t.at_or_below(t.clocks[i]), i);
    if (i + 1 < t.clocks.size() && t.clocks[i] - 1 > t.clocks[i + 1]) {
      EXPECT_EQ(t.at_or_below(t.clocks[i] - 1), i + 1);  // between two: the slower one
    }
    const auto c = tables.cost(0, InstructionKind::forward, t.clocks[i]);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->time, t.costs[i].time);
  }
  EXPECT_FALSE(tables.cost(0, InstructionKind::forward, t.clocks.front() + 1));
}

// The cost at a clock the profile has no row for, where an instruction runs until a change of clock
// takes effect: between two profiled clocks, linear; beyond them, as another kind of the stage
// changes between the same two clocks; with no such kind, the time inversely proportional to the
// clock.
TEST(CostTables, TheCostAtAClockBeforeAChangeIsEstimatedWhereTheProfileHasNoRow) {
  const std::string csv =
      "stage,instruction,frequency,time,energy\n"
      "0,forward,1000,1.0,10\n0,forward,800,1.3,9\n0,forward,500,2.0,8\n"
      "0,backward,1000,2.0,20\n0,backward,800,2.8,17\n"
      "1,forward,1000,1.0,10\n1,backward,1000,2.0,20\n";
  const Profile profile = parse_profile(csv, "partial.csv");
  PipelineShape shape;
  shape.num_stages = 2;
  shape.num_microbatches = 2;
  const CostTables tables(profile, shape);
  const auto exact = tables.cost_or_estimate(0, InstructionKind::backward, 800);
  ASSERT_TRUE(exact);
  EXPECT_EQ(exact->time, 2.8);
  EXPECT_FALSE(tables.cost(0, InstructionKind::forward, 900));
  const auto between = tables.cost_or_estimate(0, InstructionKind::forward, 900);
  ASSERT_TRUE(between);
  EXPECT_NEAR(between->time, 1.15, 1e-12);
  EXPECT_NEAR(between->energy, 9.5, 1e-12);
  // Below the backward's rows: from its slowest (800), as the forward goes from 800 to 500.
  const auto below = tables.cost_or_estimate(0, InstructionKind::backward, 500);
  ASSERT_TRUE(below);
  EXPECT_NEAR(below->time, 2.8 * 2.0 / 1.3, 1e-12);
  EXPECT_NEAR(below->energy, 17 * 8.0 / 9, 1e-12);
  // Stage 1 has only its top clock: the time scales with the clock, the energy stays.
  const auto alone = tables.cost_or_estimate(1, InstructionKind::backward, 500);
  ASSERT_TRUE(alone);
  EXPECT_NEAR(alone->time, 4.0, 1e-12);
  EXPECT_NEAR(alone->energy, 20, 1e-12);
}

// A profile measured online stops each kind's clocks where it can save no more, a backward's above
// the forwards' lowest: a plan running forwards there and a backward at the top right after them
// still pays the clock latency, as on the GPU (which runs every clock).
TEST(Emulator, AClockLatencyCountsWhereTheClockBeforeIsBelowTheInstructionsProfiledClocks) {
  std::string full_csv = "stage,instruction,frequency,time,energy\n", partial_csv = full_csv;
  for (int s = 0; s < 2; ++s)
    for (int f = 1000; f >= 500; f -= 100) {
      // The backward slows a little less than the forward as the clock falls (more memory-bound).
      const double forward = std::pow(1000.0 / f, 0.9), backward = 2 * std::pow(1000.0 / f, 0.8);
      const auto rows = fmt::format("{0},forward,{1},{2},{3}\n{0},backward,{1},{4},{5}\n", s, f, forward,
                                    100 * forward * f / 1000, backward, 100 * backward * f / 1000);
      full_csv += rows;
      partial_csv += f >= 700 ? rows : fmt::format("{},forward,{},{},{}\n", s, f, forward, 100 * forward * f / 1000);
    }
  EmulatorConfig config;
  config.num_stages = 2;
  config.num_microbatches = 4;
  config.p_block = 20;
  config.clock_latency = 0.3;
  const Emulator truth(parse_profile(full_csv, "full.csv"), config);
  const Emulator model(parse_profile(partial_csv, "partial.csv"), config);
  config.clock_latency = 0;
  const Emulator at_once(parse_profile(partial_csv, "partial.csv"), config);
  std::vector<std::vector<int>> plan;
  for (const auto& stage : truth.layout()) {
    plan.emplace_back();
    for (const auto& inst : stage) plan.back().push_back(inst.kind == InstructionKind::forward ? 500 : 1000);
  }
  const auto r_truth = truth.run(plan), r_model = model.run(plan), r_at_once = at_once.run(plan);
  int changes = 0;
  for (std::size_t s = 0; s < plan.size(); ++s)
    for (std::size_t k = 1; k < plan[s].size(); ++k) {
      if (plan[s][k] != 1000 || plan[s][k - 1] != 500) continue;  // a backward right after a forward
      ++changes;
      const double truth_s = r_truth.instructions[s][k].duration, model_s = r_model.instructions[s][k].duration;
      const double at_once_s = r_at_once.instructions[s][k].duration;
      // Its first 0.3 s at 500 MHz; the estimate of a backward there (from its row at 700, as the
      // forward slows from 700 to 500) is off only as far as the two kinds slow down differently.
      EXPECT_GT(truth_s - at_once_s, 0.05) << s << "," << k;
      EXPECT_NEAR(model_s, truth_s, 0.05 * (truth_s - at_once_s)) << s << "," << k;
    }
  EXPECT_GT(changes, 0);
  EXPECT_NEAR(r_model.iteration_time, r_truth.iteration_time, 0.01 * r_truth.iteration_time);
}
}  // namespace
}  // namespace perseus
