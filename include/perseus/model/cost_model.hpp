#pragma once
// Cost models (docs/design.md#cost-models): effective energy as a function of the quantized duration, defined
// for every integer between an operation's fastest and slowest option.
#include <memory>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "perseus/model/options.hpp"

namespace perseus {

// automatic: exponential where it fits, piecewise-linear where it does not (the default);
// exponential is the strict reference mode.
enum class CostModelKind { exponential, piecewise_linear, automatic };

std::string to_string(CostModelKind kind);                                  // "exp", "pwl", "auto"
std::optional<CostModelKind> parse_cost_model_kind(std::string_view text);  // the same names

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual double operator()(int quant_time) const = 0;
  virtual std::string name() const = 0;      // "exp", "pwl" or "constant"
  virtual std::string describe() const = 0;  // parameters, for logs and metadata
};

// e'(q) = a * exp(b * q) + c, fitted by Levenberg–Marquardt (MINPACK's algorithm, forward-
// difference Jacobian, as scipy's curve_fit) from a grid of starting points; keeps the fit with
// the least mean squared error among converged fits with a >= 0.
class ExponentialModel : public CostModel {
 public:
  ExponentialModel(double a, double b, double c) : a_(a), b_(b), c_(c) {}
  double operator()(int quant_time) const override;
  std::string name() const override { return "exp"; }
  std::string describe() const override;
  double a() const { return a_; }
  double b() const { return b_; }
  double c() const { return c_; }
  double mean_squared_error(const std::vector<ExecutionOption>& options) const;

 private:
  double a_, b_, c_;
};

// Convex piecewise-linear interpolation through the lower convex hull of the options; exact at
// the hull's points, no fitting.
class PiecewiseLinearModel : public CostModel {
 public:
  explicit PiecewiseLinearModel(const std::vector<ExecutionOption>& options);
  double operator()(int quant_time) const override;
  std::string name() const override { return "pwl"; }
  std::string describe() const override;
  const std::vector<std::pair<int, double>>& hull() const { return hull_; }

 private:
  std::vector<std::pair<int, double>> hull_;  // (quant_time, effective energy), ascending time
};

// For an operation with a single option: nothing to trade.
class ConstantModel : public CostModel {
 public:
  explicit ConstantModel(double value) : value_(value) {}
  double operator()(int) const override { return value_; }
  std::string name() const override { return "constant"; }
  std::string describe() const override;

 private:
  double value_;
};

// Fits the exponential model; returns nullptr when no starting point converges to a fit with
// a >= 0 (or there are too few options to determine three parameters).
std::unique_ptr<ExponentialModel> fit_exponential(const std::vector<ExecutionOption>& options, double unit_time);

// Builds the requested model for one operation. A single option gives a ConstantModel. With
// `exponential`, throws Error (kExitDataError) naming `what` when the fit fails, suggesting pwl or
// auto; `automatic` then builds the piecewise-linear model (its name() says which was built).
std::unique_ptr<CostModel> make_cost_model(CostModelKind kind, const OperationOptions& options, double unit_time,
                                           const std::string& what);

}  // namespace perseus
