// The online profiler's clock choice: a coarse top-down pass that stops once energy rises past its
// minimum, a finer pass around it, and linear interpolation for clocks it skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <vector>

#include "perseus/online/clock_scan.hpp"

namespace perseus {
namespace {

using online::ClockMeasurement;
using online::ClockScan;
using online::ScanOptions;

std::vector<int> a100_clocks() {
  std::vector<int> clocks;
  for (int c = 1410; c >= 855; c -= 15) clocks.push_back(c);
  return clocks;
}

// Runs a scan against measurement(clock index), returns the clocks in the order it asked for them
// (more than the scan's clocks only where it asked for one twice, which it must never do).
std::vector<int> run_scan_measuring(ClockScan& scan, const std::function<ClockMeasurement(std::size_t)>& measurement) {
  std::vector<int> asked;
  const auto& clocks = scan.clocks();
  while (auto clock = scan.next()) {
    asked.push_back(*clock);
    auto index = static_cast<std::size_t>(std::find(clocks.begin(), clocks.end(), *clock) - clocks.begin());
    scan.record(*clock, measurement(index));
    if (asked.size() > clocks.size()) break;
  }
  return asked;
}

// The same with time rising 1% a clock down from the top and energy(clock index).
std::vector<int> run_scan(ClockScan& scan, const std::function<double(std::size_t)>& energy) {
  return run_scan_measuring(scan, [&](std::size_t i) { return ClockMeasurement{1.0 + 0.01 * double(i), energy(i)}; });
}

// U-shaped, least at index 20 (1110 MHz on the A100's clocks).
double u_energy(std::size_t i) { return 100.0 + 0.05 * std::pow(double(i) - 20, 2); }

TEST(ClockScan, CoarsePassGoesTopDownEveryNthClockAndStopsAfterEnergyRisesPastTheMinimum) {
  ClockScan scan(a100_clocks(), ScanOptions{5, 5, 0.01, 1.0});  // fill_gap 1.0: no filling
  // U-shaped energy, minimum at index 20 (1110 MHz).
  auto asked = run_scan(scan, u_energy);
  // 0, 5, 10, 15, 20 fall; 25 rises (one coarse step covers 5 clocks): stop there. Then the
  // neighbour of the fastest clock (the top: time rises with every step down), which is slower.
  EXPECT_EQ(asked, (std::vector<int>{1410, 1335, 1260, 1185, 1110, 1035, 1395}));
  EXPECT_TRUE(scan.done());
  EXPECT_EQ(scan.measured().size(), 7u);
}

TEST(ClockScan, EnergyFlatOrNoisyNearTheTopDoesNotStopTheScanBeforeItFalls) {
  ClockScan scan(a100_clocks(), ScanOptions{5, 5, 0.01, 1.0});
  // Rises a little for the first 15 clocks (as A40s do), then falls to a minimum at index 30.
  auto asked = run_scan(scan, [](std::size_t i) {
    return i < 15 ? 100.0 + 0.1 * double(i) : 101.5 - 0.5 * (double(i) - 15) + (i > 30 ? double(i - 30) : 0.0);
  });
  EXPECT_GE(asked.size(), 7u);
  EXPECT_EQ(asked[6], 1410 - 30 * 15);  // reached the minimum
}

TEST(ClockScan, UnderNoiseOnlyAClearRiseStopsTheCoarsePass) {
  // Energy falls 1.2% below the top by index 15, stays flat (within its 0.5% error) to index 25,
  // then falls to a minimum at index 30. Measured under that noise, index 20 reads 0.8% above index
  // 15: no evidence that no slower clock saves energy.
  const auto energy = [](std::size_t i) {
    if (i < 15) return 100.0 - 0.08 * double(i);
    if (i <= 25) return i == 20 ? 99.6 : 98.8;
    return 98.8 - 0.6 * (double(i) - 25) + (i > 30 ? 1.2 * double(i - 30) : 0.0);
  };
  for (double error : {0.0, 0.005}) {
    SCOPED_TRACE(error);
    ClockScan scan(a100_clocks(), ScanOptions{5, 5, 0.01, 1.0});
    const auto asked = run_scan_measuring(scan, [&](std::size_t i) {
      return ClockMeasurement{1.0 + 0.01 * double(i), energy(i), error};
    });
    const int lowest = *std::min_element(asked.begin(), asked.end());
    // Without an error the rise at index 20 is one and stops the pass; with it, the pass goes on past
    // the minimum at index 30 and stops at the clear rise after it.
    EXPECT_EQ(lowest, a100_clocks()[error == 0 ? 20 : 35]);
  }
}

TEST(ClockScan, StopAfterCoversThatManyClocksAtAFinerStep) {
  ClockScan scan(a100_clocks(), ScanOptions{2, 5, 0.01, 1.0});
  auto asked = run_scan(scan, [](std::size_t i) { return 100.0 + 0.05 * std::pow(double(i) - 10, 2); });
  // Minimum at index 10; 3 coarse rises (indices 12, 14, 16) cover the 5 clocks of the rule.
  EXPECT_EQ(*std::min_element(asked.begin(), asked.end()), a100_clocks()[16]);
}

TEST(ClockScan, FillsOnlyLargeEnergyDropsBetweenParetoNeighbours) {
  ClockScan scan(a100_clocks(), ScanOptions{5, 5, 0.01, 0.05});
  // A steep drop between 1410 and 1335 (20%), then a gentle slope to the minimum at index 20.
  auto asked = run_scan(scan, [](std::size_t i) {
    if (i == 0) return 130.0;
    return 100.0 + 0.01 * std::pow(double(i) - 20, 2);
  });
  // The gap 1410 -> 1335 is bisected (1380, then 1395 or 1365 as needed); the gentle part is not filled.
  std::set<int> filled(asked.begin(), asked.end());
  EXPECT_TRUE(filled.count(1380));
  for (int c : {1230, 1215, 1200}) EXPECT_FALSE(filled.count(c)) << c;
  // Below the early stop nothing is measured.
  for (int c : asked) EXPECT_GE(c, 1410 - 25 * 15);
}

// Measured profiles are not monotone near the top clock: a clock between two coarse points can run
// faster than both. Where a slower measured clock runs no longer than a faster one, the gap is
// bisected down to neighbours, and the dip is found; a monotone curve gets no such filling.
TEST(ClockScan, WhereTimeIsNotMonotoneInTheClockTheGapIsMeasuredDownToNeighbours) {
  for (bool dip : {true, false}) {
    ClockScan scan(a100_clocks(), ScanOptions{5, 5, 0.01, 1.0});
    const auto& clocks = scan.clocks();
    const auto asked = run_scan_measuring(scan, [dip](std::size_t i) {
      // Time rising by 1% a clock, or (dip) flat over the top 10 clocks but for the coarse points 5 and 10,
      // each a little faster than the one above it, and index 7, 3% faster; energy U-shaped, least at index 20.
      double time = 1.0 + 0.01 * double(i);
      if (dip && i <= 10) time = i == 7 ? 0.97 : i == 5 ? 0.999 : i == 10 ? 0.99 : 1.0;
      return ClockMeasurement{time, u_energy(i)};
    });
    ASSERT_LE(asked.size(), clocks.size());
    const std::set<int> measured(asked.begin(), asked.end());
    EXPECT_EQ(measured.count(clocks[7]), dip ? 1u : 0u) << dip;
    EXPECT_EQ(measured.count(clocks[3]), dip ? 1u : 0u) << dip;  // the top gap, bisected
    EXPECT_EQ(measured.count(clocks[22]), 0u);                   // below the least energy: never
  }
}

// GPUs often run fastest a step or a few below their top clock (A100s at 1395 MHz, 0.2-0.4% faster
// than at 1410; A40s' forwards 2% faster 11 steps below 1740), where no coarse point lands and no
// slower clock runs shorter than a faster one: the scan walks from the fastest clock it measured to
// its neighbours while they are faster, and stops where both of the fastest one's are measured.
TEST(ClockScan, FindsTheFastestClockNextToTheTopOrAFewStepsBelowIt) {
  for (std::size_t dip : {std::size_t{1}, std::size_t{3}, std::size_t{11}}) {
    ClockScan scan(a100_clocks(), ScanOptions{5, 5, 0.01, 1.0});  // fill_gap 1.0: no filling
    // Time falls by 0.1% a step down to index `dip`, then rises by 1% a step; energy least at index 20.
    auto time = [dip](std::size_t i) {
      return i <= dip ? 1.0 - 0.001 * double(i) : 1.0 - 0.001 * double(dip) + 0.01 * double(i - dip);
    };
    const auto& clocks = scan.clocks();
    const auto asked = run_scan_measuring(scan, [&](std::size_t i) { return ClockMeasurement{time(i), u_energy(i)}; });
    ASSERT_LE(asked.size(), clocks.size());
    const std::set<int> measured(asked.begin(), asked.end());
    EXPECT_TRUE(measured.count(clocks[dip])) << dip;
    EXPECT_TRUE(measured.count(clocks[dip - 1]) && measured.count(clocks[dip + 1])) << dip;
    // Not every clock down to the one of least energy (index 20).
    EXPECT_LT(asked.size(), 20u) << dip;
  }
}

// Under noise the fastest of a few clocks measured near the top reads faster than it runs: a clock
// counts as faster than a higher one only by more than twice the standard error of the difference.
// Below that the walk does not go on from it, and the planner's profile gives it the higher one's time.
TEST(ClockScan, ADipWithinTheNoiseIsNeitherFollowedNorPlannedWith) {
  for (double error : {0.0, 0.002}) {
    ClockScan scan(a100_clocks(), ScanOptions{5, 5, 0.01, 1.0});  // fill_gap 1.0: no filling
    const auto asked = run_scan_measuring(scan, [error](std::size_t i) {
      // 1395 and 1380 read 0.2% faster than the top (each with `error`), then time rises 1% a clock.
      const double time = i == 1 || i == 2 ? 0.998 : 1.0 + 0.01 * double(i > 2 ? i : 0);
      return ClockMeasurement{time, u_energy(i), error};
    });
    ASSERT_LE(asked.size(), scan.clocks().size());
    SCOPED_TRACE(error);
    EXPECT_TRUE(scan.measured().count(1395));  // the top's neighbour is always measured
    // Clearly faster (no error): the walk goes on to 1395's neighbour; within the noise it stops.
    EXPECT_EQ(scan.measured().count(1380), error == 0 ? 1u : 0u);
    const auto profile = scan.settled();
    EXPECT_EQ(profile.at(1395).time, error == 0 ? 0.998 : 1.0);
    EXPECT_EQ(profile.at(1410).time, 1.0);
    EXPECT_EQ(scan.interpolated().at(1395).time, profile.at(1395).time);
  }
  // A dip of 2% with a 0.2% error each is no noise: it stays.
  ClockScan scan({1410, 1395, 1380});
  scan.record(1410, {1.0, 10.0, 0.002});
  scan.record(1395, {0.98, 9.5, 0.002});
  EXPECT_EQ(scan.settled().at(1395).time, 0.98);
}

TEST(ClockScan, InterpolatesSkippedClocksLinearlyAndMeasuresRequestedOnes) {
  ClockScan scan({1410, 1395, 1380, 1365, 1350}, ScanOptions{4, 5, 0.01, 1.0});
  scan.record(1410, {1.0, 100.0});
  scan.record(1350, {1.4, 80.0});
  auto all = scan.interpolated();
  ASSERT_EQ(all.size(), 5u);
  EXPECT_NEAR(all.at(1380).time, 1.2, 1e-12);
  EXPECT_NEAR(all.at(1380).energy, 90.0, 1e-12);
  EXPECT_NEAR(all.at(1395).energy, 95.0, 1e-12);
  EXPECT_EQ(scan.next(), 1395);  // the fastest clock's neighbour
  scan.record(1395, {1.1, 96.0});
  ASSERT_TRUE(scan.done());
  EXPECT_TRUE(scan.request(1365));
  EXPECT_FALSE(scan.request(1410));  // measured already
  EXPECT_FALSE(scan.request(1000));  // not one of its clocks
  EXPECT_EQ(scan.next(), 1365);
  scan.record(1365, {1.3, 84.0});
  EXPECT_TRUE(scan.done());
}

}  // namespace
}  // namespace perseus

namespace perseus {
namespace {

TEST(ClockScan, AClockMeasuredUnderOtherConditionsIsMeasuredAgainFirst) {
  ClockScan scan(a100_clocks());
  scan.record(1410, {1.0, 10.0});
  ASSERT_EQ(scan.next(), 1335);
  scan.record(1335, {1.1, 9.0});
  const int coarse_next = *scan.next();
  EXPECT_FALSE(scan.redo(1200));  // never measured
  EXPECT_TRUE(scan.redo(1335));
  EXPECT_EQ(scan.next(), 1335);                   // before the scan's own next clock
  EXPECT_EQ(scan.measured().at(1335).time, 1.1);  // kept until measured again
  scan.record(1335, {1.05, 8.5});
  EXPECT_EQ(scan.measured().at(1335).time, 1.05);
  EXPECT_EQ(scan.next(), coarse_next);  // and the scan goes on where it was
}

// A clock a plan runs, known only roughly, is measured once more after the scan's own clocks; the two
// measurements are weighed by their errors (the more precise counts more), the error shrinks.
TEST(ClockScan, AClockMeasuredOnceMoreIsWeighedWithTheFirstByTheirErrors) {
  ClockScan scan({1410, 1395, 1380}, ScanOptions{1, 5, 0.01, 1.0});
  scan.record(1410, {1.0, 100.0, 0.002});
  const int own_next = *scan.next();
  EXPECT_FALSE(scan.confirm(1380));  // never measured
  EXPECT_TRUE(scan.confirm(1410));
  EXPECT_FALSE(scan.confirm(1410));  // asked for already
  EXPECT_EQ(scan.next(), own_next);  // after the scan's own clocks
  while (scan.next() != 1410) scan.record(*scan.next(), {1.1, 90.0, 0.002});
  // Twice the first's error: a quarter of its weight.
  scan.record(1410, {1.05, 104.0, 0.004 * 1.0 / 1.05});
  const ClockMeasurement both = scan.measured().at(1410);
  EXPECT_NEAR(both.time, 0.8 * 1.0 + 0.2 * 1.05, 1e-12);
  EXPECT_NEAR(both.energy, 0.8 * 100.0 + 0.2 * 104.0, 1e-9);
  EXPECT_NEAR(both.time_error * both.time, std::sqrt(1 / (1 / 4e-6 + 1 / 16e-6)), 1e-12);
  EXPECT_TRUE(scan.done());
  // Without errors (no noise), the plain mean.
  EXPECT_TRUE(scan.confirm(1395));
  scan.record(1395, {1.3, 80.0});
  EXPECT_NEAR(scan.measured().at(1395).time, (1.1 + 1.3) / 2, 1e-12);
  EXPECT_TRUE(scan.done());
}

// A slow spell while the coarse pass ran made a few clocks look costlier, so it stopped early; once
// they are measured again as they are, the pass goes on down to where energy really rises.
TEST(ClockScan, AClockMeasuredAgainUndoesAnEarlyStopTheSlowSpellCaused) {
  ClockScan scan(a100_clocks(), ScanOptions{5, 5, 0.01, 1.0});  // fill_gap 1.0: no filling
  const auto& clocks = scan.clocks();
  std::vector<int> spell;  // the clocks measured while every instruction cost 11% more
  while (auto clock = scan.next()) {
    auto i = static_cast<std::size_t>(std::find(clocks.begin(), clocks.end(), *clock) - clocks.begin());
    const bool slow = i >= 10 && i <= 15;
    if (slow) spell.push_back(*clock);
    scan.record(*clock, {1.0, u_energy(i) * (slow ? 1.11 : 1.0)});
    if (scan.measured().size() > clocks.size()) break;
  }
  EXPECT_EQ(spell, (std::vector<int>{1260}));  // costlier than the clock above it: the pass stopped
  EXPECT_FALSE(scan.measured().count(1110)) << "stopped early on the slow spell's clocks";
  for (int clock : spell) EXPECT_TRUE(scan.redo(clock));
  while (auto clock = scan.next()) {
    auto i = static_cast<std::size_t>(std::find(clocks.begin(), clocks.end(), *clock) - clocks.begin());
    scan.record(*clock, {1.0, u_energy(i)});
    if (scan.measured().size() > clocks.size()) break;
  }
  EXPECT_TRUE(scan.measured().count(1110));  // the minimum
  EXPECT_TRUE(scan.measured().count(1035));  // and the coarse clock past it where energy rises
  EXPECT_TRUE(scan.done());
}

// Times with a part that runs with the clock and a part that does not are linear in 1/clock: the
// prediction is exact between measured clocks and past them, and wants two other clocks.
TEST(ClockScan, PredictsAClocksTimeFromItsMeasuredNeighboursLinearlyInOneOverTheClock) {
  ClockScan scan({1410, 1200, 1000, 800});
  auto time = [](int clock) { return 0.2 + 300.0 / clock; };
  EXPECT_FALSE(scan.predicted_time(1200));
  scan.record(1410, {time(1410), 1});
  EXPECT_FALSE(scan.predicted_time(1200)) << "one other clock is no curve";
  scan.record(1200, {time(1200), 1});
  EXPECT_FALSE(scan.predicted_time(1200)) << "a clock is not its own evidence";
  ASSERT_TRUE(scan.predicted_time(1000));
  EXPECT_NEAR(*scan.predicted_time(1000), time(1000), 1e-12);  // extrapolated down
  scan.record(800, {time(800), 1});
  EXPECT_NEAR(*scan.predicted_time(1000), time(1000), 1e-12);  // between 1200 and 800
  EXPECT_NEAR(*scan.predicted_time(1200), time(1200), 1e-12);  // between 1410 and 800, itself left out
}

}  // namespace
}  // namespace perseus
