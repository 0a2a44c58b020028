#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "perseus/solver/in_order_sum.hpp"

using namespace perseus;

namespace {

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

// Values of very different magnitudes, so that the order of the additions shows in the last bits:
// after every batch of changes the sum is std::accumulate's, bit for bit.
TEST(InOrderSum, EqualsTheLeftToRightSumBitForBitAfterEveryChange) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> mantissa(0.5, 1.0);
  std::uniform_int_distribution<int> exponent(-20, 20);
  auto value = [&] { return std::ldexp(mantissa(rng), exponent(rng)); };
  int differing_orders = 0;  // the test bites only where another order rounds differently
  for (int n : {1, 2, 17, 300}) {
    std::vector<double> values(n);
    for (double& v : values) v = value();
    InOrderSum sum(values);
    std::uniform_int_distribution<int> index(0, n - 1);
    for (int round = 0; round < 200; ++round) {
      const int changes = 1 + round % 4;
      for (int c = 0; c < changes; ++c) {
        const int i = index(rng);
        values[i] = value();
        sum.set(i, values[i]);
      }
      const double expected = std::accumulate(values.begin(), values.end(), 0.0);
      ASSERT_TRUE(same_bits(sum.sum(), expected)) << "n " << n << ", round " << round;
      ASSERT_TRUE(same_bits(sum.sum(), expected));  // asked twice without a change: the same
      differing_orders += !same_bits(std::accumulate(values.rbegin(), values.rend(), 0.0), expected);
    }
  }
  EXPECT_GT(differing_orders, 100);
}

TEST(InOrderSum, AnEmptySumIsZero) {
  InOrderSum sum(std::vector<double>{});
  EXPECT_EQ(sum.sum(), 0.0);
}
