#include "perseus/model/cost_model.hpp"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <unsupported/Eigen/NonLinearOptimization>
#include <unsupported/Eigen/NumericalDiff>

#include "perseus/util/error.hpp"

namespace perseus {

std::string to_string(CostModelKind kind) {
  switch (kind) {
    case CostModelKind::exponential: return "exp";
    case CostModelKind::piecewise_linear: return "pwl";
    case CostModelKind::automatic: return "auto";
  }
  return "?";
}

std::optional<CostModelKind> parse_cost_model_kind(std::string_view text) {
  for (auto kind : {CostModelKind::exponential, CostModelKind::piecewise_linear, CostModelKind::automatic})
    if (text == to_string(kind)) return kind;
  return std::nullopt;
}

double ExponentialModel::operator()(int quant_time) const {
  return a_ * std::exp(b_ * static_cast<double>(quant_time)) + c_;
}

std::string ExponentialModel::describe() const {
  return fmt::format("{:.17g} * exp({:.17g} * q) + {:.17g}", a_, b_, c_);
}

double ExponentialModel::mean_squared_error(const std::vector<ExecutionOption>& options) const {
  double sum = 0;
  for (const auto& option : options) {
    const double residual = option.effective_energy - (*this)(option.quant_time);
    sum += residual * residual;
  }
  return sum / static_cast<double>(options.size());
}

namespace {

// Residuals f(q_i) - e'_i in the shape Eigen's MINPACK port expects.
struct ExponentialResiduals {
  using Scalar = double;
  using InputType = Eigen::VectorXd;
  using ValueType = Eigen::VectorXd;
  using JacobianType = Eigen::MatrixXd;
  enum { InputsAtCompileTime = Eigen::Dynamic, ValuesAtCompileTime = Eigen::Dynamic };

  Eigen::VectorXd q, e;
  int inputs() const { return 3; }
  int values() const { return static_cast<int>(q.size()); }
  int operator()(const Eigen::VectorXd& x, Eigen::VectorXd& fvec) const {
    for (Eigen::Index i = 0; i < q.size(); ++i) fvec[i] = x[0] * std::exp(x[1] * q[i]) + x[2] - e[i];
    return 0;
  }
};

// scipy's curve_fit reports an infinite covariance (and the reference skips the fit) only when
// the Jacobian at the solution is exactly rank deficient: it inverts R^T R from the QR
// factorization and gives up on a singular matrix alone. Ill-conditioned fits along a nearly
// linear valley are accepted there, so they are here.
bool covariance_finite(const ExponentialResiduals& f, const Eigen::VectorXd& x) {
  Eigen::MatrixXd jacobian(f.q.size(), 3);
  for (Eigen::Index i = 0; i < f.q.size(); ++i) {
    const double ex = std::exp(x[1] * f.q[i]);
    jacobian(i, 0) = ex;
    jacobian(i, 1) = x[0] * f.q[i] * ex;
    jacobian(i, 2) = 1.0;
  }
  if (!jacobian.allFinite()) return false;
  Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(jacobian);
  const Eigen::MatrixXd r = qr.matrixR().topLeftCorner(3, 3).triangularView<Eigen::Upper>();
  for (Eigen::Index i = 0; i < 3; ++i) {
    if (r(i, i) == 0.0) return false;
  }
  const Eigen::MatrixXd covariance = (r.transpose() * r).inverse();
  return covariance.allFinite();
}

}  // namespace

std::unique_ptr<ExponentialModel> fit_exponential(const std::vector<ExecutionOption>& options,
                                                  double unit_time) {
  // Three parameters need more than three points for a finite covariance (curve_fit's rule).
  if (options.size() <= 3) return nullptr;
  ExponentialResiduals residuals;
  residuals.q.resize(static_cast<Eigen::Index>(options.size()));
  residuals.e.resize(static_cast<Eigen::Index>(options.size()));
  for (std::size_t i = 0; i < options.size(); ++i) {
    residuals.q[static_cast<Eigen::Index>(i)] = options[i].quant_time;
    residuals.e[static_cast<Eigen::Index>(i)] = options[i].effective_energy;
  }

  std::unique_ptr<ExponentialModel> best;
  double best_error = std::numeric_limits<double>::infinity();
  const double b_scale = unit_time / 0.001;
  for (double a0 : {1e1, 1e2, 1e3}) {
    for (double b_step : {0.01, 0.02, 0.03, 0.04, 0.05, 0.1}) {
      for (double c0 : {1e1, 1e2, 1e3}) {
        Eigen::VectorXd x(3);
        x << a0, -b_step * b_scale, c0;
        Eigen::NumericalDiff<ExponentialResiduals> numeric(residuals);
        Eigen::LevenbergMarquardt<Eigen::NumericalDiff<ExponentialResiduals>> solver(numeric);
        solver.parameters.maxfev = 50000;
        const auto status = solver.minimize(x);
        // MINPACK's info 1..4 are convergence; anything else did not fit.
        const int info = static_cast<int>(status);
        if (info < 1 || info > 4) continue;
        if (!x.allFinite() || x[0] < 0.0) continue;
        if (!covariance_finite(residuals, x)) continue;
        auto model = std::make_unique<ExponentialModel>(x[0], x[1], x[2]);
        const double error = model->mean_squared_error(options);
        if (!std::isfinite(error)) continue;
        if (error < best_error) {
          best_error = error;
          best = std::move(model);
        }
      }
    }
  }
  return best;
}

PiecewiseLinearModel::PiecewiseLinearModel(const std::vector<ExecutionOption>& options) {
  std::vector<std::pair<int, double>> points;
  for (const auto& option : options) points.emplace_back(option.quant_time, option.effective_energy);
  std::sort(points.begin(), points.end());
  // Andrew's monotone chain, lower hull only.
  for (const auto& p : points) {
    while (hull_.size() >= 2) {
      const auto& o = hull_[hull_.size() - 2];
      const auto& a = hull_.back();
      const double cross = static_cast<double>(a.first - o.first) * (p.second - o.second) -
                           (a.second - o.second) * static_cast<double>(p.first - o.first);
      if (cross <= 0) hull_.pop_back(); else break;
    }
    hull_.push_back(p);
  }
}

double PiecewiseLinearModel::operator()(int quant_time) const {
  if (hull_.size() == 1) return hull_.front().second;
  std::size_t i = 1;
  while (i + 1 < hull_.size() && hull_[i].first < quant_time) ++i;
  const auto& [x0, y0] = hull_[i - 1];
  const auto& [x1, y1] = hull_[i];
  return y0 + (y1 - y0) * static_cast<double>(quant_time - x0) / static_cast<double>(x1 - x0);
}

std::string PiecewiseLinearModel::describe() const {
  std::string text = "hull";
  for (const auto& [q, e] : hull_) text += fmt::format(" ({}, {:.17g})", q, e);
  return text;
}

std::string ConstantModel::describe() const { return fmt::format("{:.17g}", value_); }

std::unique_ptr<CostModel> make_cost_model(CostModelKind kind, const OperationOptions& options,
                                           double unit_time, const std::string& what) {
  const auto& list = options.options();
  if (list.size() == 1) return std::make_unique<ConstantModel>(list.front().effective_energy);
  if (kind == CostModelKind::piecewise_linear) return std::make_unique<PiecewiseLinearModel>(list);
  auto model = fit_exponential(list, unit_time);
  if (model) return model;
  if (kind == CostModelKind::automatic) return std::make_unique<PiecewiseLinearModel>(list);
  throw Error(fmt::format("{}: the exponential cost model could not be fitted to its {} Pareto "
                          "option(s) (it needs at least 4 that an a*exp(b*q)+c curve with a>=0 "
                          "fits); use --cost-model auto or pwl",
                          what, list.size()),
              kExitDataError);
}

}  // namespace perseus
