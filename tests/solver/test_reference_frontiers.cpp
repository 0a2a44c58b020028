// The planner against the Perseus authors' frontiers in the reference data set (skipped when absent):
// same number of points, same times, energies within a relative tolerance.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "perseus/profile/blocking_power.hpp"
#include "perseus/plan/frontier_record.hpp"
#include "perseus/solver/planning.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/util/csv.hpp"

using namespace perseus;

namespace {

const std::filesystem::path kData = std::filesystem::path(PERSEUS_SHARED_DIR) / "data" / "sosp24";

struct Case {
  std::string model, gpu;
  int microbatches;
  double tolerance;
};

// Bloom on A40: the forward cost of every stage is nearly linear in time, so the least-squares
// exponential lies at the end of a flat valley (b -> 0) and each Levenberg–Marquardt run stops
// somewhere along it. The reference's choice cannot be reproduced bit for bit without scipy's
// exact iteration; times and point counts match, energies agree to 5e-6.
std::string describe(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.model + "_" + info.param.gpu + "_mb" + std::to_string(info.param.microbatches);
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

class ReferenceFrontier : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(ReferenceFrontier, MatchesPointForPoint) {
  const Case& c = GetParam();
  const auto profile_path = kData / "stage_profile" / (c.model + "+" + c.gpu + ".csv");
  const auto frontier_path =
      kData / "frontier" / (c.model + "+" + c.gpu + "_mb" + std::to_string(c.microbatches) + ".csv");
  if (!std::filesystem::exists(profile_path) || !std::filesystem::exists(frontier_path)) {
    GTEST_SKIP() << "reference data not found beside the project (" << kData << ")";
  }
  const bool a40 = c.gpu.find("a40") != std::string::npos;
  PlanningConfig config;
  config.num_stages = 8;
  config.num_microbatches = c.microbatches;
  config.unit_time = a40 ? 0.0001 : 0.001;
  config.p_block = a40 ? kA40BlockingPowerW : kA100BlockingPowerW;
  const auto problem = make_planning_problem(read_profile(profile_path), config);
  const auto record = make_frontier_record(problem, solve_frontier(problem), {"", "exp"});

  const std::string text = read_file(frontier_path);
  LineReader reader(text);
  std::string_view line;
  ASSERT_TRUE(reader.next(line));
  std::vector<std::pair<double, double>> reference;
  while (reader.next(line)) {
    if (trim(line).empty()) continue;
    const auto fields = split_csv_line(line);
    reference.emplace_back(*parse_double(fields[0]), *parse_double(fields[1]));
  }
  ASSERT_EQ(record.points.size(), reference.size());
  double worst = 0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    ASSERT_NEAR(record.points[i].time, reference[i].first, 1e-9) << "point " << i;
    worst = std::max(worst, std::fabs(record.points[i].energy - reference[i].second) / reference[i].second);
  }
  EXPECT_LE(worst, c.tolerance);
  RecordProperty("worst_relative_energy_error", fmt::format("{:.3g}", worst));
}

INSTANTIATE_TEST_SUITE_P(
    Sosp24, ReferenceFrontier,
    ::testing::Values(Case{"gpt3-175b", "a100_sxm_bf16", 12, 1e-6}, Case{"gpt3-175b", "a100_sxm_bf16", 24, 1e-6},
                      Case{"bloom", "a100_sxm_bf16", 12, 1e-6}, Case{"bloom", "a100_sxm_bf16", 24, 1e-6},
                      Case{"gpt3-175b", "a40_bf16", 12, 1e-6}, Case{"gpt3-175b", "a40_bf16", 24, 1e-6},
                      Case{"bloom", "a40_bf16", 12, 5e-6}, Case{"bloom", "a40_bf16", 24, 5e-6}),
    describe);
