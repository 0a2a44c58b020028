#include "perseus/online/reference_model.hpp"

#include <algorithm>
#include <functional>
#include <random>

namespace perseus::online {

namespace {

constexpr std::size_t kSamples = 512;
// Beyond this many pipelines the slowest ones decide (the next ones would have to be slower by
// more than the noise to matter).
constexpr std::size_t kPipelines = 64;

}  // namespace

PaceModel::PaceModel(double sigma) : sigma_(std::max(0.0, sigma)) {
  if (sigma_ <= 0) return;
  std::mt19937_64 rng(20241128);
  std::normal_distribution<double> normal(0.0, 1.0);
  draws_.resize(kSamples * kPipelines);
  for (double& z : draws_) z = normal(rng);
}

double PaceModel::expected_slowest(const std::vector<double>& paces) const {
  if (paces.empty()) return 0;
  if (sigma_ <= 0 || paces.size() == 1) return *std::max_element(paces.begin(), paces.end());
  std::vector<double> slowest = paces;
  std::sort(slowest.begin(), slowest.end(), std::greater<>());
  slowest.resize(std::min(slowest.size(), kPipelines));
  double sum = 0;
  for (std::size_t n = 0; n < kSamples; ++n) {
    double worst = 0;
    for (std::size_t d = 0; d < slowest.size(); ++d)
      worst = std::max(worst, slowest[d] * (1 + sigma_ * draws_[n * kPipelines + d]));
    sum += worst;
  }
  return sum / kSamples;
}

double PaceModel::stretch(const std::vector<double>& paces, const std::vector<double>& conditions) const {
  std::vector<double> now = paces;
  for (std::size_t d = 0; d < now.size() && d < conditions.size(); ++d) now[d] *= conditions[d];
  const double before = expected_slowest(paces);
  return before > 0 ? expected_slowest(now) / before : 1.0;
}

}  // namespace perseus::online
