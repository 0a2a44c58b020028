#include <gtest/gtest.h>

#include <cmath>

#include "perseus/model/cost_model.hpp"
#include "perseus/util/error.hpp"

using namespace perseus;

namespace {
std::vector<ExecutionOption> points(const std::vector<std::pair<int, double>>& list) {
  std::vector<ExecutionOption> result;
  for (const auto& [q, e] : list) {
    ExecutionOption option;
    option.quant_time = q;
    option.effective_energy = e;
    result.push_back(option);
  }
  return result;
}
}  // namespace

TEST(ExponentialModel, RecoversExactExponentialData) {
  std::vector<std::pair<int, double>> data;
  for (int q = 60; q >= 40; q -= 2) data.emplace_back(q, 500.0 * std::exp(-0.08 * q) + 12.0);
  const auto model = fit_exponential(points(data), 0.001);
  ASSERT_NE(model, nullptr);
  EXPECT_NEAR(model->a(), 500.0, 1e-3);
  EXPECT_NEAR(model->b(), -0.08, 1e-7);
  EXPECT_NEAR(model->c(), 12.0, 1e-5);
  EXPECT_NEAR((*model)(50), 500.0 * std::exp(-4.0) + 12.0, 1e-8);
  EXPECT_LT(model->mean_squared_error(points(data)), 1e-12);
}

TEST(ExponentialModel, TooFewOptionsFailStrictlyAndFallBackToPwlInAuto) {
  const OperationOptions three(points({{30, 10}, {25, 11}, {20, 13}}));
  EXPECT_EQ(fit_exponential(three.options(), 0.001), nullptr);
  try {
    make_cost_model(CostModelKind::exponential, three, 0.001, "p.csv: stage 0 forward");
    FAIL() << "expected the fit to fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitDataError);
    EXPECT_NE(std::string(e.what()).find("use --cost-model auto or pwl"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("stage 0 forward"), std::string::npos);
  }
  EXPECT_EQ(make_cost_model(CostModelKind::piecewise_linear, three, 0.001, "x")->name(), "pwl");
  EXPECT_EQ(make_cost_model(CostModelKind::automatic, three, 0.001, "x")->name(), "pwl");
  const OperationOptions four(points({{30, 10}, {25, 11}, {20, 13}, {15, 17}}));
  EXPECT_EQ(make_cost_model(CostModelKind::automatic, four, 0.001, "x")->name(), "exp") << "exp where it fits";
  EXPECT_EQ(parse_cost_model_kind("auto"), CostModelKind::automatic);
  EXPECT_FALSE(parse_cost_model_kind("linear"));
}

TEST(ExponentialModel, SingleOptionIsConstant) {
  const OperationOptions one(points({{30, 10}}));
  const auto model = make_cost_model(CostModelKind::exponential, one, 0.001, "x");
  EXPECT_EQ(model->name(), "constant");
  EXPECT_DOUBLE_EQ((*model)(30), 10);
}

TEST(PiecewiseLinearModel, LowerHullIsExactAtItsPointsAndConvex) {
  // (25, 12) lies above the chord from (20, 13) to (30, 10): it is not on the lower hull.
  const PiecewiseLinearModel model(points({{30, 10}, {25, 12}, {20, 13}, {10, 20}}));
  ASSERT_EQ(model.hull().size(), 3u);
  EXPECT_DOUBLE_EQ(model(30), 10);
  EXPECT_DOUBLE_EQ(model(20), 13);
  EXPECT_DOUBLE_EQ(model(10), 20);
  EXPECT_DOUBLE_EQ(model(25), 11.5);  // on the chord
  EXPECT_DOUBLE_EQ(model(15), 16.5);
  for (int q = 11; q < 30; ++q) {
    EXPECT_LE(model(q) - model(q + 1), model(q - 1) - model(q) + 1e-12) << "not convex at " << q;
  }
}
