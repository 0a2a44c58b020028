// One rule for which of a round's iterations count: the warm-up after the clock change is left out
// when the round has more, and a round of only warm-up counts whole.
#include <gtest/gtest.h>

#include <vector>

#include "perseus/protocol/round_mean.hpp"

namespace perseus::protocol {
namespace {

TEST(RoundMean, LeavesOutTheWarmUpWhenTheRoundHasMore) {
  std::vector<double> round(kWarmUpIterations, 10.0);  // slow: the clocks were changing
  round.insert(round.end(), {1.0, 2.0, 3.0});
  EXPECT_EQ(first_counted_iteration(round.size()), kWarmUpIterations);
  EXPECT_DOUBLE_EQ(round_mean(round), 2.0);
}

TEST(RoundMean, ARoundOfOnlyWarmUpCountsWhole) {
  std::vector<double> round;
  for (std::size_t i = 1; i <= kWarmUpIterations; ++i) round.push_back(double(i));
  EXPECT_EQ(first_counted_iteration(round.size()), 0u);
  EXPECT_DOUBLE_EQ(round_mean(round), double(kWarmUpIterations + 1) / 2);  // the mean of 1..k
  EXPECT_DOUBLE_EQ(round_mean({}), 0.0);
}

}  // namespace
}  // namespace perseus::protocol
