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
    EXPECT_EQ(e.kind(), ErrorKind::bad_input);
    EXPECT_NE(std::string(e.what()).find("use cost_model auto or pwl"), std::string::npos) << e.what();
    EXPECT_EQ(e.settings(), std::vector<std::string>{"cost_model"});
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

// Where auto plans with the hull instead of the exponential fit, and says why.
TEST(ExponentialModel, AutoFallsBackWhereTheFitWouldMisleadTheSolver) {
  auto choose = [](const OperationOptions& options) {
    return choose_cost_model(CostModelKind::automatic, options, 0.001, "x");
  };
  // A clean exponential: exp, no fallback.
  std::vector<std::pair<int, double>> clean;
  for (int q = 60; q >= 40; q -= 2) clean.emplace_back(q, 500.0 * std::exp(-0.08 * q) + 12.0);
  const auto fitted = choose(OperationOptions(points(clean)));
  EXPECT_EQ(fitted.model->name(), "exp");
  EXPECT_EQ(fitted.fallback, "");
  // Too few options.
  const auto three = choose(OperationOptions(points({{30, 10}, {25, 11}, {20, 13}})));
  EXPECT_EQ(three.model->name(), "pwl");
  EXPECT_NE(three.fallback.find("too few"), std::string::npos) << three.fallback;
  // A cliff: flat over the slow two thirds, steep at the fast end. The best a*exp(b*q)+c is flat
  // (steps below 1e-6 J) where the options still fall.
  const auto cliff = choose(OperationOptions(points({{45, 3.0}, {40, 3.2}, {35, 3.4}, {33, 3.5}, {32, 8.2}})));
  EXPECT_EQ(cliff.model->name(), "pwl");
  EXPECT_NE(cliff.fallback.find("flat"), std::string::npos) << cliff.fallback;
  // Options that rise with time: the fit rises too.
  const auto rising = choose(OperationOptions(points({{40, 9}, {35, 7}, {30, 6}, {25, 5.5}, {20, 5.2}})));
  EXPECT_EQ(rising.model->name(), "pwl");
  EXPECT_NE(rising.fallback.find("rises"), std::string::npos) << rising.fallback;
  // The strict reference mode keeps the exponential fit whatever it looks like.
  const auto strict =
      choose_cost_model(CostModelKind::exponential,
                        OperationOptions(points({{45, 3.0}, {40, 3.2}, {35, 3.4}, {33, 3.5}, {32, 8.2}})), 0.001, "x");
  EXPECT_EQ(strict.model->name(), "exp");
  EXPECT_EQ(strict.fallback, "");
}

TEST(ExponentialModel, AFitFarWorseThanTheHullIsAMisfit) {
  // Convex options the hull passes through exactly, but with a kink no exponential follows.
  const OperationOptions kinked(points({{60, 1}, {55, 1.5}, {50, 2}, {45, 2.5}, {40, 3}, {39, 9}, {38, 15}, {37, 21}}));
  const auto model = fit_exponential(kinked.options(), 0.001);
  ASSERT_NE(model, nullptr);
  const std::string misfit = exponential_misfit(*model, kinked);
  EXPECT_NE(misfit.find("error"), std::string::npos) << misfit;
  // Measured-looking options around a smooth curve: no misfit.
  std::vector<std::pair<int, double>> smooth;
  for (int q = 80; q >= 50; q -= 3)
    smooth.emplace_back(q, 300.0 * std::exp(-0.05 * q) + 4.0 + ((q / 3) % 2 ? 0.02 : -0.02));
  const OperationOptions noisy(points(smooth));
  const auto smooth_model = fit_exponential(noisy.options(), 0.001);
  ASSERT_NE(smooth_model, nullptr);
  EXPECT_EQ(exponential_misfit(*smooth_model, noisy), "");
}
