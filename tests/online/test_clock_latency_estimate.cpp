// The clock latency from changed slots, and how sure of it the loop is: errors shared by a round's
// samples, or by every sample compared with one baseline reference, are not taken for a latency.
#include <gtest/gtest.h>

#include <random>

#include "perseus/online/clock_latency_estimate.hpp"

namespace perseus {
namespace {

using online::ClockLatencyEstimate;

// `rounds` rounds of `per_round` changed slots with shares of both signs: excess = latency x share,
// plus each slot's own noise, plus `round_sd` x share shared by the round's samples (its conditions
// and references), plus a baseline reference's error of `baseline_sd` fixed for the run.
ClockLatencyEstimate drawn(std::mt19937_64& rng, double latency, int rounds, int per_round, double round_sd,
                           double baseline_sd) {
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> share(0.06, 0.4);
  const double baseline_error = baseline_sd * normal(rng);
  ClockLatencyEstimate estimate;
  for (int r = 0; r < rounds; ++r) {
    const double shared = round_sd * normal(rng);
    for (int i = 0; i < per_round; ++i) {
      const bool from_baseline = baseline_sd > 0 && i % 2 == 0;
      const double x = from_baseline ? share(rng) : (i % 3 ? 1 : -1) * share(rng);
      const double excess = (latency + shared) * x + 2e-4 * normal(rng) + (from_baseline ? baseline_error : 0);
      estimate.add({x, excess, from_baseline ? 1 : 0, from_baseline ? baseline_sd : 0});
    }
    estimate.end_round();
  }
  return estimate;
}

TEST(ClockLatencyEstimate, ErrorsSharedByARoundAreNoLatency) {
  std::mt19937_64 rng(7);
  int clear = 0;
  for (int run = 0; run < 300; ++run) {
    const auto fit = drawn(rng, 0, 12, 30, 1e-3, 0).fit(40, 8);
    ASSERT_TRUE(fit);
    EXPECT_EQ(fit->rounds, 12u);
    clear += fit->clear(0);
  }
  // Counted as 360 independent samples, a third of these runs would "measure" a latency.
  EXPECT_LE(clear, 3);
}

TEST(ClockLatencyEstimate, ABaselineReferencesErrorIsNoLatency) {
  std::mt19937_64 rng(11);
  int clear = 0;
  for (int run = 0; run < 300; ++run) clear += drawn(rng, 0, 60, 20, 0, 5e-4).fit(40, 8)->clear(0);
  EXPECT_LE(clear, 3);
}

TEST(ClockLatencyEstimate, ALatencyIsMeasured) {
  std::mt19937_64 rng(3);
  for (double latency : {0.002, 0.01}) {
    const auto fit = drawn(rng, latency, 20, 30, 2e-4, 1e-4).fit(40, 8);
    ASSERT_TRUE(fit);
    EXPECT_NEAR(fit->latency, latency, 4 * fit->standard_error);
    EXPECT_LT(fit->standard_error, 0.15 * latency);
    EXPECT_TRUE(fit->clear(5e-4));
    EXPECT_FALSE(fit->clear(2 * latency));  // the smallest latency worth taking
  }
}

TEST(ClockLatencyEstimate, NoneWithTooFewSamplesOrRounds) {
  std::mt19937_64 rng(5);
  EXPECT_FALSE(drawn(rng, 0.002, 7, 30, 0, 0).fit(40, 8));  // 210 samples, 7 rounds
  EXPECT_FALSE(drawn(rng, 0.002, 10, 3, 0, 0).fit(40, 8));  // 10 rounds, 30 samples
  EXPECT_TRUE(drawn(rng, 0.002, 10, 4, 0, 0).fit(40, 8));
}

TEST(ClockLatencyEstimate, KeepsTheNewestSamples) {
  ClockLatencyEstimate estimate(50);
  for (int r = 0; r < 20; ++r) {
    for (int i = 0; i < 10; ++i) estimate.add({0.2, r < 10 ? 0.0 : 0.2 * 0.003, 0, 0});
    estimate.end_round();
  }
  EXPECT_EQ(estimate.size(), 50u);
  const auto fit = estimate.fit(40, 2);
  ASSERT_TRUE(fit);
  EXPECT_NEAR(fit->latency, 0.003, 1e-12);  // the first ten rounds' are gone
  EXPECT_EQ(fit->rounds, 5u);
}

TEST(ClockLatencyEstimate, LookingEveryRoundFindsNoneWhereThereIsNone) {
  std::mt19937_64 rng(13);
  std::normal_distribution<double> normal;
  int clear = 0, three = 0;
  for (int run = 0; run < 200; ++run) {
    ClockLatencyEstimate estimate;
    bool ever_clear = false, ever_three = false;
    for (int round = 0; round < 150; ++round) {
      for (int i = 0; i < 6; ++i) estimate.add({i % 2 ? 0.3 : -0.2, 3e-4 * normal(rng), 0, 0});
      estimate.end_round();
      if (const auto fit = estimate.fit(40, 8)) {
        ever_clear = ever_clear || fit->clear(0);
        ever_three = ever_three || fit->above(3, 0);
      }
    }
    clear += ever_clear, three += ever_three;
  }
  EXPECT_LE(clear, 4);  // at most 1% of the runs, however many looks
  EXPECT_GE(three, 4);  // 3 standard errors at some round of 143: a few in a hundred
}

}  // namespace
}  // namespace perseus
