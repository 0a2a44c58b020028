#include "perseus/model/cost_model.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>
#include <optional>

#include "lmdif.hpp"
#include "perseus/util/error.hpp"

namespace perseus {

std::string to_string(CostModelKind kind) {
  switch (kind) {
    case CostModelKind::exponential:
      return "exp";
    case CostModelKind::piecewise_linear:
      return "pwl";
    case CostModelKind::automatic:
      return "auto";
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

// scipy's curve_fit reports an infinite covariance (and the reference skips the fit) when R of the
// last Jacobian's QR is exactly singular (LAPACK's trtri fails), when inv(R) inv(R)^T has a NaN,
// or when, scaled by the residual variance, it holds +inf. Ill-conditioned fits along a nearly
// linear valley pass, so they pass here.
bool covariance_finite(const lm::Result<3>& fit, std::size_t m, double cost) {
  const auto& r = fit.r;
  for (int i = 0; i < 3; ++i)
    if (r[i][i] == 0.0) return false;
  std::array<std::array<double, 3>, 3> inverse{};  // upper triangular, column by column as trtri
  for (int j = 0; j < 3; ++j) {
    inverse[j][j] = 1.0 / r[j][j];
    for (int i = 0; i < j; ++i) {
      double sum = 0.0;
      for (int k = i; k < j; ++k) sum += inverse[i][k] * r[k][j];
      inverse[i][j] = -sum * inverse[j][j];
    }
  }
  std::array<std::array<double, 3>, 3> permuted{};
  for (int i = 0; i < 3; ++i) permuted[static_cast<std::size_t>(fit.ipvt[i])] = inverse[i];
  const double scale = cost / static_cast<double>(m - 3);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      double c = 0.0;
      for (int k = 0; k < 3; ++k) c += permuted[i][k] * permuted[j][k];
      if (std::isnan(c)) return false;
      if (c * scale == std::numeric_limits<double>::infinity()) return false;
    }
  }
  return true;
}

// Relative decrease of the mean squared error that counts as a better fit, not rounding.
constexpr double kMeaningfulImprovement = 1e-9;

// For a fixed b the model is linear in a and c: the least-squares a and c, in a form that stays
// exact as b*q goes to zero (centred, expm1), and the mean squared error they leave.
struct LinearPart {
  double a = 0, c = 0, error = std::numeric_limits<double>::infinity();
};

LinearPart solve_linear_part(const std::vector<ExecutionOption>& options, double b) {
  const double n = static_cast<double>(options.size());
  const double q0 = static_cast<double>(options.front().quant_time);
  double v_mean = 0, e_mean = 0;
  for (const auto& o : options) {
    v_mean += std::expm1(b * (static_cast<double>(o.quant_time) - q0));
    e_mean += o.effective_energy;
  }
  v_mean /= n;
  e_mean /= n;
  double svv = 0, sve = 0;
  for (const auto& o : options) {
    const double v = std::expm1(b * (static_cast<double>(o.quant_time) - q0)) - v_mean;
    svv += v * v;
    sve += v * (o.effective_energy - e_mean);
  }
  LinearPart part;
  if (!(svv > 0)) return part;
  const double scale = sve / svv;  // the model is e_mean + scale * (v - v_mean)
  double sum = 0;
  for (const auto& o : options) {
    const double v = std::expm1(b * (static_cast<double>(o.quant_time) - q0)) - v_mean;
    const double r = o.effective_energy - e_mean - scale * v;
    sum += r * r;
  }
  part.error = sum / n;
  part.a = scale * std::exp(-b * q0);
  part.c = e_mean - scale * v_mean - scale;
  return part;
}

// Minimizes the linear part's error over b of b0's sign: a coarse scan of log|b| from |b0|/3000
// to 50|b0|, then golden-section search around the best sample.
std::optional<ExponentialModel> best_along_b(const std::vector<ExecutionOption>& options, double b0) {
  if (b0 == 0.0 || !std::isfinite(b0)) return std::nullopt;
  const double sign = b0 < 0 ? -1.0 : 1.0;
  const double t0 = std::log(std::fabs(b0));
  auto error_at = [&](double t) { return solve_linear_part(options, sign * std::exp(t)).error; };
  constexpr int kSamples = 48;
  const double lo = t0 - 8.0, hi = t0 + 4.0, step = (hi - lo) / (kSamples - 1);
  int best_index = 0;
  double best_error = std::numeric_limits<double>::infinity();
  for (int i = 0; i < kSamples; ++i) {
    const double error = error_at(lo + step * i);
    if (error < best_error) {
      best_error = error;
      best_index = i;
    }
  }
  if (!std::isfinite(best_error)) return std::nullopt;
  double left = lo + step * std::max(best_index - 1, 0), right = lo + step * std::min(best_index + 1, kSamples - 1);
  const double golden = (std::sqrt(5.0) - 1.0) / 2.0;
  double x1 = right - golden * (right - left), x2 = left + golden * (right - left);
  double f1 = error_at(x1), f2 = error_at(x2);
  for (int iteration = 0; iteration < 80 && right - left > 1e-13 * std::fabs(right); ++iteration) {
    if (f1 <= f2) {
      right = x2;
      x2 = x1;
      f2 = f1;
      x1 = right - golden * (right - left);
      f1 = error_at(x1);
    } else {
      left = x1;
      x1 = x2;
      f1 = f2;
      x2 = left + golden * (right - left);
      f2 = error_at(x2);
    }
  }
  const double b = sign * std::exp(f1 <= f2 ? x1 : x2);
  const auto part = solve_linear_part(options, b);
  if (!std::isfinite(part.a) || !std::isfinite(part.c)) return std::nullopt;
  return ExponentialModel(part.a, b, part.c);
}

}  // namespace

std::unique_ptr<ExponentialModel> fit_exponential(const std::vector<ExecutionOption>& options, double unit_time) {
  // Three parameters need more than three points for a finite covariance (curve_fit's rule).
  if (options.size() <= 3) return nullptr;
  const std::size_t m = options.size();
  auto residuals = [&options](const std::array<double, 3>& x, double* out) {
    for (std::size_t i = 0; i < options.size(); ++i)
      out[i] = x[0] * std::exp(x[1] * static_cast<double>(options[i].quant_time)) + x[2] - options[i].effective_energy;
  };
  lm::Workspace workspace;
  std::optional<ExponentialModel> best;
  double best_error = std::numeric_limits<double>::infinity();
  // One start: keeps the fit when the reference would (converged, finite covariance, a >= 0)
  // and it beats the best so far.
  auto try_start = [&](const std::array<double, 3>& start) {
    const auto fit = lm::lmdif<3>(residuals, m, start, workspace);
    // MINPACK's info 1..4 are convergence; anything else did not fit.
    if (fit.info < 1 || fit.info > 4) return false;
    const auto& x = fit.x;
    if (!std::isfinite(x[0]) || !std::isfinite(x[1]) || !std::isfinite(x[2]) || x[0] < 0.0) return false;
    double cost = 0.0;  // the residuals at the solution are still in the workspace
    for (std::size_t i = 0; i < m; ++i) cost += workspace.fvec[i] * workspace.fvec[i];
    if (!covariance_finite(fit, m, cost)) return false;
    const ExponentialModel model(x[0], x[1], x[2]);
    const double error = model.mean_squared_error(options);
    if (!(error < best_error)) return false;
    best_error = error;
    best = model;
    return true;
  };
  const double b_scale = unit_time / 0.001;
  for (double a0 : {1e1, 1e2, 1e3})
    for (double b_step : {0.01, 0.02, 0.03, 0.04, 0.05, 0.1})
      for (double c0 : {1e1, 1e2, 1e3}) try_start({a0, -b_step * b_scale, c0});
  if (!best) return nullptr;
  // Where the data are nearly linear the least-squares valley is long and flat, and where lmdif
  // stops on it depends on rounding (numpy's exp against libm's is enough to move it). Searching
  // the valley along b, with a and c solved exactly for each b, and starting lmdif again from
  // there, only ever replaces the grid's fit with a better one: never worse than the reference.
  // Only an improvement beyond rounding replaces lmdif's fit: on a flat valley a point 1e-10 lower
  // can sit far along it, and lmdif's own stop is the one closest to the reference's.
  if (const auto along_valley = best_along_b(options, best->b())) {
    const ExponentialModel model = *along_valley;
    const ExponentialModel grid_best = *best;
    const double grid_error = best_error;
    const double error = model.mean_squared_error(options);
    if (model.a() >= 0.0 && error < best_error) {
      best_error = error;
      best = model;
    }
    try_start({best->a(), best->b(), best->c()});
    if (!(best_error < grid_error * (1 - kMeaningfulImprovement))) best = grid_best;
  }
  return std::make_unique<ExponentialModel>(*best);
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
      if (cross <= 0) hull_.pop_back();
      else break;
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

namespace {

constexpr double kSolverResolution = 1e-6;  // J: the solver's flow unit and cost-change tolerance

double root_mean_square_error(const CostModel& model, const std::vector<ExecutionOption>& options) {
  double sum = 0;
  for (const auto& option : options) {
    const double residual = option.effective_energy - model(option.quant_time);
    sum += residual * residual;
  }
  return std::sqrt(sum / static_cast<double>(options.size()));
}

}  // namespace

std::string exponential_misfit(const ExponentialModel& model, const OperationOptions& options) {
  const int slowest = options.max_quant(), fastest = options.min_quant();
  if (slowest == fastest) return "";
  if (model(slowest) > model(fastest))
    return fmt::format("the exponential fit rises with time (b = {:.3g})", model.b());
  const PiecewiseLinearModel hull(options.options());
  auto step = [](const CostModel& m, int d) { return std::fabs(m(d - 1) - m(d)); };
  // An exponential's steps shrink toward the slow end, the hull's too (it is convex): the first
  // negligible step of the fit, found by bisection, is where the hull's steps are largest.
  if (step(model, slowest) < kSolverResolution) {
    int lo = fastest + 1, hi = slowest;  // step(hi) is negligible
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (step(model, mid) < kSolverResolution) hi = mid;
      else lo = mid + 1;
    }
    if (step(hull, hi) >= kSolverResolution)
      return fmt::format(
          "the exponential fit is flat from q = {} to {} (steps below 1e-6 J) where its options' "
          "hull falls by {:.3g} J",
          hi - 1, slowest, hull(hi - 1) - hull(slowest));
  }
  double low = options.options().front().effective_energy, high = low;
  for (const auto& option : options.options()) {
    low = std::min(low, option.effective_energy);
    high = std::max(high, option.effective_energy);
  }
  const double error = root_mean_square_error(model, options.options());
  const double hull_error = root_mean_square_error(hull, options.options());
  if (error > 2 * hull_error && error > 0.05 * (high - low))
    return fmt::format(
        "the exponential fit's error ({:.3g} J root mean square) is {:.0f}% of its options' range and "
        "over twice the hull's ({:.3g} J)",
        error, 100 * error / (high - low), hull_error);
  return "";
}

CostModelChoice choose_cost_model(CostModelKind kind, const OperationOptions& options, double unit_time,
                                  const std::string& what) {
  const auto& list = options.options();
  if (list.size() == 1) return {std::make_unique<ConstantModel>(list.front().effective_energy), ""};
  if (kind == CostModelKind::piecewise_linear) return {std::make_unique<PiecewiseLinearModel>(list), ""};
  auto model = fit_exponential(list, unit_time);
  if (kind == CostModelKind::exponential) {
    if (model) return {std::move(model), ""};
    throw Error(fmt::format("{}: the exponential cost model could not be fitted to its {} Pareto "
                            "option(s) (it needs at least 4 that an a*exp(b*q)+c curve with a>=0 "
                            "fits); use cost_model auto or pwl",
                            what, list.size()),
                ErrorKind::bad_input, {"cost_model"});
  }
  if (!model)
    return {std::make_unique<PiecewiseLinearModel>(list),
            list.size() <= 3 ? fmt::format("{} options: too few for the exponential fit", list.size())
                             : std::string("the exponential fit did not converge")};
  std::string misfit = exponential_misfit(*model, options);
  if (!misfit.empty()) return {std::make_unique<PiecewiseLinearModel>(list), std::move(misfit)};
  return {std::move(model), ""};
}

}  // namespace perseus
