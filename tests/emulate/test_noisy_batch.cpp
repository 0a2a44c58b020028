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

}  // namespace
}  // namespace perseus
