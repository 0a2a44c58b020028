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

// Why an exponential model would plan these options badly, or empty when it would not:
// - it rises with time (b > 0): the solver's flow bounds take every cost difference as a saving
//   of running slower, so it would plan nonsense and stop;
// - its steps at the slow end change the cost by less than the solver's resolution (1e-6 J) where
//   the options' lower convex hull does not: a fit that flattens out (a steep cliff at the fast
//   end) makes every step there look free, and the reference stops at the first one;
// - its error is large: a root-mean-square error at the options above both twice the hull's and
//   5% of the options' effective-energy range (the published profiles stay below: at most 1.9
//   times the hull's, and where they exceed 5% of the range the hull misses by more).
std::string exponential_misfit(const ExponentialModel& model, const OperationOptions& options);

// The model one operation plans with and, where `automatic` chose the piecewise-linear hull,
// why (empty otherwise): the fit failed, or exponential_misfit() names a reason.
struct CostModelChoice {
  std::unique_ptr<CostModel> model;
  std::string fallback;
};

// Builds the requested model for one operation. A single option gives a ConstantModel. With
// `exponential`, throws Error (ErrorKind::bad_input) naming `what` when the fit fails, suggesting pwl or
// auto; `automatic` then builds the piecewise-linear model, as it does where the fit is a misfit.
CostModelChoice choose_cost_model(CostModelKind kind, const OperationOptions& options, double unit_time,
                                  const std::string& what);
inline std::unique_ptr<CostModel> make_cost_model(CostModelKind kind, const OperationOptions& options, double unit_time,
                                                  const std::string& what) {
  return choose_cost_model(kind, options, unit_time, what).model;
}

}  // namespace perseus
