#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "perseus/model/options.hpp"
#include "perseus/util/pyfloat.hpp"

using namespace perseus;

namespace {
std::vector<ProfileRow> rows(std::initializer_list<std::tuple<int, double, double>> list) {
  std::vector<ProfileRow> result;
  for (const auto& [f, t, e] : list) result.push_back({0, InstructionKind::forward, f, t, e, 0});
  return result;
}
}  // namespace

TEST(PyFloat, FloorDivisionMatchesPython) {
  // Values checked against CPython: 0.05016166687011708 // 0.001 == 50.0, 0.3 // 0.1 == 2.0.
  EXPECT_EQ(py_floordiv(0.05016166687011708, 0.001), 50.0);
  EXPECT_EQ(py_floordiv(0.3, 0.1), 2.0);
  EXPECT_EQ(py_floordiv(1.0, 0.1), 9.0);  // 1.0 // 0.1 == 9.0 in Python, not 10
  EXPECT_EQ(py_floordiv(10000.0, 1e-6), 1e10);
  EXPECT_EQ(py_floordiv(-0.5, 1.0), -1.0);
}

TEST(Options, ParetoFilterQuantizeDedupeAndSort) {
  // 1200 is dominated by 1300 (faster and cheaper); 1400/1300 share quant 10, 1100/1000 quant 12.
  const auto options = pareto_options(
      rows({{1400, 0.0101, 30}, {1300, 0.0105, 25}, {1200, 0.0110, 26}, {1100, 0.0121, 21}, {1000, 0.0129, 20}}), 0.001,
      1.0);
  ASSERT_EQ(options.size(), 2u);
  EXPECT_EQ(options[0].quant_time, 12);
  EXPECT_EQ(options[0].frequency, 1100);  // the larger energy wins among equal quant times
  EXPECT_EQ(options[1].quant_time, 10);
  EXPECT_EQ(options[1].frequency, 1400);  // quant 10: 1400 (30 J) beats 1300 (25 J)
}

TEST(Options, NoiseFactorFallbackKeepsNearlyDominatedOptions) {
  // Strictly, 1300 and 1100 are dominated; within 5% slack they survive.
  const auto input =
      rows({{1400, 0.0105, 30}, {1300, 0.0125, 30.5}, {1200, 0.0115, 29}, {1100, 0.0145, 29.2}, {1000, 0.0135, 28}});
  const auto strict = pareto_options(input, 0.001, 1.0);
  EXPECT_EQ(strict.size(), 3u);
  const auto built = build_options(input, {0.001, 0.0, 0.95});
  EXPECT_TRUE(built.used_noise_factor());
  EXPECT_EQ(built.options().size(), 5u);
}

TEST(Options, EffectiveEnergyAndKnobLookup) {
  const auto built = build_options(
      rows({{1400, 0.0101, 30}, {1200, 0.0125, 28}, {1000, 0.0152, 27}, {900, 0.0172, 26.5}}), {0.001, 100.0, 0.95});
  ASSERT_EQ(built.options().size(), 4u);
  EXPECT_FALSE(built.used_noise_factor());
  EXPECT_DOUBLE_EQ(built.options()[0].effective_energy, 26.5 - 100.0 * 17 * 0.001);
  EXPECT_EQ(built.max_quant(), 17);
  EXPECT_EQ(built.min_quant(), 10);
  EXPECT_EQ(built.knob_for(17), 900);
  EXPECT_EQ(built.knob_for(16), 1000);  // the slowest option that fits in 16
  EXPECT_EQ(built.knob_for(12), 1200);
  EXPECT_EQ(built.knob_for(11), 1400);
  EXPECT_EQ(built.knob_for(3), 1400);  // below everything: the fastest
}

TEST(Options, SingleOptionAndAllEqual) {
  EXPECT_EQ(build_options(rows({{1400, 0.01, 30}}), {}).options().size(), 1u);
  const auto equal = build_options(rows({{1400, 0.01, 30}, {1300, 0.01, 30}, {1200, 0.01, 30}}), {});
  ASSERT_EQ(equal.options().size(), 1u);
  EXPECT_EQ(equal.min_quant(), equal.max_quant());
}

namespace {

// The filter by its definition, comparing every pair: what pareto_options must equal.
std::vector<ExecutionOption> pareto_by_definition(const std::vector<ProfileRow>& input, double unit_time,
                                                  double noise_factor) {
  std::vector<ExecutionOption> all;
  for (const auto& row : input)
    all.push_back({row.frequency, row.time, row.energy, static_cast<int>(py_floordiv(row.time, unit_time)), 0});
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.real_time > b.real_time; });
  std::vector<ExecutionOption> pareto;
  for (const auto& option : all) {
    bool dominated = false;
    for (const auto& other : all)
      dominated = dominated ||
                  (other.real_time < option.real_time * noise_factor && other.energy < option.energy * noise_factor);
    if (!dominated) pareto.push_back(option);
  }
  std::stable_sort(pareto.begin(), pareto.end(), [](const auto& a, const auto& b) { return a.energy > b.energy; });
  std::vector<ExecutionOption> unique;
  std::set<int> seen;
  for (const auto& option : pareto)
    if (seen.insert(option.quant_time).second) unique.push_back(option);
  std::stable_sort(unique.begin(), unique.end(),
                   [](const auto& a, const auto& b) { return a.quant_time > b.quant_time; });
  return unique;
}

}  // namespace

// The sort-and-sweep filter keeps exactly what the pairwise definition keeps, in the same order,
// ties included: random profiles whose times and energies repeat (few distinct values) and do not.
TEST(Options, ParetoFilterEqualsItsPairwiseDefinitionOnRandomProfiles) {
  std::mt19937 random(20240611);
  for (int instance = 0; instance < 400; ++instance) {
    const int n = std::uniform_int_distribution<int>(1, 80)(random);
    const bool ties = instance % 2 == 0;
    std::uniform_real_distribution<double> time(0.001, 0.05), energy(1.0, 60.0);
    std::uniform_int_distribution<int> step(1, 6);
    std::vector<ProfileRow> input;
    for (int i = 0; i < n; ++i) {
      double t = ties ? 0.005 * step(random) : time(random);
      double e = ties ? 10.0 * step(random) : energy(random);
      input.push_back({0, InstructionKind::forward, 1410 - 15 * i, t, e, 0});
    }
    for (double noise : {1.0, 0.95}) {
      auto fast = pareto_options(input, 0.001, noise);
      auto slow = pareto_by_definition(input, 0.001, noise);
      ASSERT_EQ(fast.size(), slow.size()) << "instance " << instance << " noise " << noise;
      for (std::size_t i = 0; i < fast.size(); ++i) {
        EXPECT_EQ(fast[i].frequency, slow[i].frequency) << "instance " << instance << " option " << i;
        EXPECT_EQ(fast[i].real_time, slow[i].real_time);
        EXPECT_EQ(fast[i].energy, slow[i].energy);
        EXPECT_EQ(fast[i].quant_time, slow[i].quant_time);
      }
    }
  }
}

TEST(Options, PlanningLeavesOutOptionsAFasterOneMatchesInEffectiveEnergy) {
  // The noise-factor filter keeps 1300 (slower than 1400, costlier in effective energy) and 1000
  // (slower than 1100, no cheaper): neither can help a plan.
  const auto built = build_options(
      rows({{1400, 0.0105, 30}, {1300, 0.0125, 31}, {1200, 0.0135, 28}, {1100, 0.0155, 27}, {1000, 0.0165, 27.1}}),
      {0.001, 100.0, 0.95});
  ASSERT_TRUE(built.used_noise_factor());
  ASSERT_EQ(built.options().size(), 5u);
  const auto kept = without_costlier_slower(built);
  std::vector<int> clocks;
  for (const auto& option : kept.options()) clocks.push_back(option.frequency);
  EXPECT_EQ(clocks, (std::vector<int>{1100, 1200, 1400}));
  EXPECT_TRUE(kept.used_noise_factor());
  for (std::size_t i = 1; i < kept.options().size(); ++i)
    EXPECT_GT(kept.options()[i].effective_energy, kept.options()[i - 1].effective_energy);
  // On strictly Pareto options it changes nothing.
  const auto strict =
      build_options(rows({{1400, 0.0101, 30}, {1200, 0.0125, 28}, {1000, 0.0152, 27}}), {0.001, 0, 1.0});
  EXPECT_EQ(without_costlier_slower(strict).options().size(), strict.options().size());
}
