// The power budget's allocation: one point per job, within the budget, at most one hull step below
// the best choice, checked against brute force on random small cases (convex and not).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>

#include "perseus/online/power_allocation.hpp"

namespace perseus {
namespace {

using online::allocate_power;
using online::PowerOption;

// The best choice by trying every combination: its value, or -inf when nothing fits the budget.
double brute_force_best(const std::vector<std::vector<PowerOption>>& jobs, double budget) {
  double best = -std::numeric_limits<double>::infinity();
  std::vector<std::size_t> pick(jobs.size(), 0);
  std::function<void(std::size_t, double, double)> walk = [&](std::size_t j, double power, double value) {
    if (power > budget) return;  // powers are >= 0: adding jobs only adds
    if (j == jobs.size()) {
      best = std::max(best, value);
      return;
    }
    for (const auto& o : jobs[j]) walk(j + 1, power + o.power, value + o.value);
  };
  walk(0, 0, 0);
  return best;
}

// A job's frontier: `points` operating points from its full speed (value `weight`, power `top`)
// down to slower ones. Convex: each watt saved costs more value than the one before; otherwise the
// steps are random (bumps, flats, dominated points).
std::vector<PowerOption> random_job(std::mt19937_64& rng, int points, bool convex) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double top = 100 + 400 * unit(rng), weight = 0.5 + 2 * unit(rng);
  std::vector<PowerOption> out{{top, weight}};
  double power = top, value = weight, rate = 1e-4 + 1e-3 * unit(rng);
  for (int k = 1; k < points; ++k) {
    double saved = top * (0.01 + 0.1 * unit(rng));
    if (convex) rate *= 1 + unit(rng);
    else rate = 1e-3 * unit(rng) * (unit(rng) < 0.2 ? -1 : 1);  // sometimes a point that is worse all round
    power = std::max(0.0, power - saved);
    value -= rate * saved;
    out.push_back({power, value});
  }
  std::shuffle(out.begin(), out.end(), rng);  // the allocator takes points in any order
  return out;
}

int property_cases() {
  const char* env = std::getenv("PERSEUS_PROPERTY_CASES");  // more in a long run, e.g. 100000
  return env ? std::max(1, std::atoi(env)) : 3000;
}

TEST(PowerAllocation, MatchesBruteForceWithinOneHullStep) {
  std::mt19937_64 rng(20240917);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int tight = 0, exact = 0;
  const int cases = property_cases();
  for (int c = 0; c < cases; ++c) {
    const bool convex = c % 2 == 0;
    std::vector<std::vector<PowerOption>> jobs;
    const int count = 1 + static_cast<int>(rng() % 4);
    double most = 0, least = 0;
    for (int j = 0; j < count; ++j) {
      jobs.push_back(random_job(rng, 1 + static_cast<int>(rng() % 6), convex));
      double top = 0, bottom = std::numeric_limits<double>::infinity();
      for (const auto& o : jobs.back()) top = std::max(top, o.power), bottom = std::min(bottom, o.power);
      most += top, least += bottom;
    }
    const double budget = least * 0.9 + (most * 1.05 - least * 0.9) * unit(rng);  // sometimes out of reach
    const auto got = allocate_power(jobs, budget);
    const double best = brute_force_best(jobs, budget);
    SCOPED_TRACE(testing::Message() << "case " << c << (convex ? " (convex)" : "") << ", budget " << budget);
    ASSERT_EQ(got.choice.size(), jobs.size());
    double power = 0, value = 0;
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      ASSERT_LT(got.choice[j], jobs[j].size());
      power += jobs[j][got.choice[j]].power, value += jobs[j][got.choice[j]].value;
    }
    EXPECT_NEAR(got.power, power, 1e-9 * most);
    EXPECT_NEAR(got.value, value, 1e-9);
    if (best == -std::numeric_limits<double>::infinity()) {
      EXPECT_FALSE(got.within_budget);
      EXPECT_NEAR(got.power, least, 1e-9 * most) << "out of reach: every job at its least power";
      continue;
    }
    ASSERT_TRUE(got.within_budget);
    EXPECT_LE(got.power, budget);
    EXPECT_LE(got.value, best + 1e-9);
    EXPECT_GE(got.value, best - got.bound_gap - 1e-9);
    if (got.bound_gap > 0) ++tight;
    if (got.value >= best - 1e-9) ++exact;
  }
  // The cases exercise the interesting part: the budget binds in most, and the answer is usually exact.
  EXPECT_GT(tight, cases / 3);
  EXPECT_GT(exact, cases / 2);
}

TEST(PowerAllocation, EveryJobAtFullSpeedWhenTheBudgetAllows) {
  std::vector<std::vector<PowerOption>> jobs = {{{300, 1}, {250, 0.9}, {200, 0.7}}, {{500, 2}, {400, 1.8}}};
  auto got = allocate_power(jobs, 800);
  EXPECT_TRUE(got.within_budget);
  EXPECT_EQ(got.choice, (std::vector<std::size_t>{0, 0}));
  EXPECT_EQ(got.bound_gap, 0);
}

TEST(PowerAllocation, SlowsTheJobWhoseWattsCostTheLeast) {
  // Job 0 gives 50 W for 0.01 of value, job 1 gives 50 W for 0.2: 50 W must go, job 0 gives them.
  std::vector<std::vector<PowerOption>> jobs = {{{300, 1}, {250, 0.99}}, {{300, 1}, {250, 0.8}}};
  auto got = allocate_power(jobs, 550);
  EXPECT_EQ(got.choice, (std::vector<std::size_t>{1, 0}));
  EXPECT_DOUBLE_EQ(got.value, 1.99);
  // 100 W: both.
  got = allocate_power(jobs, 500);
  EXPECT_EQ(got.choice, (std::vector<std::size_t>{1, 1}));
}

TEST(PowerAllocation, FillsTheSlackTheCrossingStepLeft) {
  // Job 0's hull skips its middle point (below the line): the marginal analysis steps from 400 W to
  // 200 W, 150 W more than needed; the middle point (300 W) fits the slack and is taken back.
  std::vector<std::vector<PowerOption>> jobs = {{{400, 1}, {300, 0.5}, {200, 0.45}}, {{100, 1}}};
  auto got = allocate_power(jobs, 450);
  EXPECT_EQ(got.choice, (std::vector<std::size_t>{1, 0}));
  EXPECT_DOUBLE_EQ(got.power, 400);
}

TEST(PowerAllocation, OutOfReachPutsEveryJobAtItsLeastPower) {
  std::vector<std::vector<PowerOption>> jobs = {{{300, 1}, {200, 0.6}}, {{300, 1}, {150, 0.5}, {180, 0.4}}};
  auto got = allocate_power(jobs, 100);
  EXPECT_FALSE(got.within_budget);
  EXPECT_EQ(got.choice, (std::vector<std::size_t>{1, 1}));
  EXPECT_DOUBLE_EQ(got.power, 350);
}

TEST(PowerAllocation, RefusesWhatIsNoAllocation) {
  EXPECT_THROW(allocate_power({{}}, 100), std::invalid_argument);
  EXPECT_THROW(allocate_power({{{-1, 1}}}, 100), std::invalid_argument);
  EXPECT_THROW(allocate_power({{{std::numeric_limits<double>::quiet_NaN(), 1}}}, 100), std::invalid_argument);
  EXPECT_THROW(allocate_power({{{100, 1}}}, std::numeric_limits<double>::infinity()), std::invalid_argument);
  auto none = allocate_power({}, 100);  // no job: nothing to choose, within any budget >= 0
  EXPECT_TRUE(none.within_budget);
  EXPECT_TRUE(none.choice.empty());
}

}  // namespace
}  // namespace perseus
