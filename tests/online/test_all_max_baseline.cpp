// The all-max baseline: the mean of its rounds, outliers left out, and (in the warm-up) the latest
// level where the rounds' time stepped clearly among them.
#include <gtest/gtest.h>

#include <random>

#include "perseus/online/all_max_baseline.hpp"

namespace perseus {
namespace {

constexpr double kFloor = 0.0;  // no floor on one round's spread: the rounds' own spread counts

online::AllMaxBaseline rounds(const std::vector<double>& times) {
  online::AllMaxBaseline baseline;
  for (double t : times) baseline.add({t, 100 * t});
  return baseline;
}

std::vector<double> noisy(std::mt19937_64& rng, int count, double level, double sigma) {
  std::normal_distribution<double> noise(0, sigma);
  std::vector<double> out;
  for (int i = 0; i < count; ++i) out.push_back(level * (1 + noise(rng)));
  return out;
}

// A straggler that began among the warm-up's rounds: the baseline is the pace after it, not a mean of
// the two paces; forgotten, the rounds before it stay out of estimates after the warm-up too.
TEST(AllMaxBaseline, TheLatestLevelIsTheBaselineWhereTheTimeSteppedAmongItsRounds) {
  std::mt19937_64 rng(7);
  auto times = noisy(rng, 20, 1.0, 0.004);
  const auto after = noisy(rng, 18, 1.03, 0.004);
  times.insert(times.end(), after.begin(), after.end());
  auto baseline = rounds(times);
  const auto kept = baseline.estimate([](double) { return kFloor; }, true);
  EXPECT_EQ(baseline.shifted(), 20);
  EXPECT_NEAR(baseline.time(), 1.03, 0.003);
  EXPECT_FALSE(kept.front());
  EXPECT_TRUE(kept.back());
  EXPECT_EQ(baseline.rejected(), 0);

  baseline.forget_before_level();
  baseline.add({1.03, 103});
  baseline.estimate([](double) { return kFloor; });
  EXPECT_EQ(baseline.rounds(), 19);
  EXPECT_NEAR(baseline.time(), 1.03, 0.003);

  // Without looking for a level: the mean of the two.
  auto mixed = rounds(times);
  mixed.estimate([](double) { return kFloor; });
  EXPECT_NEAR(mixed.time(), 1.014, 0.004);
  EXPECT_EQ(mixed.shifted(), 0);
}

// A slow spell that began and ended among the rounds: the rounds after it are the level.
TEST(AllMaxBaseline, ASlowSpellAmongTheRoundsLeavesTheRoundsAfterItAsTheLevel) {
  std::mt19937_64 rng(11);
  auto times = noisy(rng, 10, 1.0, 0.003);
  for (double t : noisy(rng, 10, 1.05, 0.003)) times.push_back(t);
  for (double t : noisy(rng, 12, 1.0, 0.003)) times.push_back(t);
  auto baseline = rounds(times);
  baseline.estimate([](double) { return kFloor; }, true);
  EXPECT_EQ(baseline.shifted(), 20);
  EXPECT_NEAR(baseline.time(), 1.0, 0.003);
}

// Noise alone, a lone outlying round, or a step within what the floor on one round's spread says noise
// makes: no level is looked for in vain (every round stays the baseline's).
TEST(AllMaxBaseline, NoiseAndOutliersAreNoStepInTime) {
  for (std::uint64_t seed = 0; seed < 500; ++seed) {
    std::mt19937_64 rng(seed);
    auto times = noisy(rng, 38, 1.0, 0.005);
    if (seed % 2) times[seed % 38] *= 1.08;
    auto baseline = rounds(times);
    baseline.estimate([](double) { return kFloor; }, true);
    EXPECT_EQ(baseline.shifted(), 0) << "seed " << seed;
  }
  std::vector<double> step(15, 1.0);
  step.insert(step.end(), 15, 1.004);
  auto small = rounds(step);
  small.estimate([](double t) { return 0.01 * t; }, true);
  EXPECT_EQ(small.shifted(), 0);
  small.estimate([](double) { return kFloor; }, true);  // no spread at all: the step is clear
  EXPECT_EQ(small.shifted(), 15);
}

}  // namespace
}  // namespace perseus
