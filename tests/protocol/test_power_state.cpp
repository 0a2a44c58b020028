#include <gtest/gtest.h>

#include <type_traits>
#include <variant>

#include "perseus/protocol/power_state.hpp"

using namespace perseus::protocol;

// A wrong unit does not compile: no unit converts to another, nor to or from a bare number.
static_assert(!std::is_convertible_v<Megahertz, Watts> && !std::is_convertible_v<Watts, Megahertz>);
static_assert(!std::is_convertible_v<Watts, Milliwatts> && !std::is_convertible_v<Milliwatts, Watts>);
static_assert(!std::is_convertible_v<unsigned, Watts> && !std::is_convertible_v<Watts, unsigned>);

TEST(PowerState, TheJobsModeSaysTheUnitOfAPlansState) {
  EXPECT_EQ(std::get<Megahertz>(power_state(PowerMode::frequency, 1410)), Megahertz{1410});
  EXPECT_EQ(std::get<Watts>(power_state(PowerMode::power_limit, 300)), Watts{300});
  EXPECT_FALSE(std::holds_alternative<Watts>(power_state(PowerMode::frequency, 300)));
}

TEST(PowerState, WattsReachTheGpuAsMilliwattsAndARangeOfMilliwattsAsTheWholeWattsInside) {
  EXPECT_EQ(to_milliwatts(Watts{300}), Milliwatts{300000});
  EXPECT_EQ(to_milliwatts(212.5), Milliwatts{212500});
  EXPECT_EQ(to_milliwatts(0.0019), Milliwatts{1});  // truncated
  EXPECT_DOUBLE_EQ(to_watts(Milliwatts{212500}), 212.5);
  EXPECT_EQ(watts_at_most(Milliwatts{700999}), Watts{700});
  EXPECT_EQ(watts_at_least(Milliwatts{100001}), Watts{101});
  EXPECT_EQ(watts_at_least(Milliwatts{100000}), Watts{100});
}
