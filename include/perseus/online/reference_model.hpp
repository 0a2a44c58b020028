#pragma once
// What all-max would take now. An iteration ends when the slowest data-parallel pipeline ends (the
// gradient synchronisation), so the all-max job time under changed conditions is the baseline's
// stretched by how much the slowest pipeline's all-max time changed, not by any one pipeline's
// change: pipelines of different speeds (GPU spread, a pipeline slow since the start) and the
// noise of each iteration (the slowest of several noisy pipelines is later than any one of them)
// both count.
#include <cstddef>
#include <vector>

namespace perseus::online {

class PaceModel {
 public:
  // `sigma`: relative standard deviation of one pipeline's all-max iteration time under the noise.
  explicit PaceModel(double sigma = 0);
  double sigma() const { return sigma_; }
  // The expected iteration time of pipelines running at `paces` (each a multiple of one time),
  // in that unit: the expected slowest of them, each noisy with sigma.
  double expected_slowest(const std::vector<double>& paces) const;
  // Iteration time now over the baseline's: expected_slowest(paces x conditions) / expected_slowest(paces).
  double stretch(const std::vector<double>& paces, const std::vector<double>& conditions) const;

 private:
  double sigma_ = 0;
  std::vector<double> draws_;  // kSamples x kPipelines standard normal draws, fixed
};

}  // namespace perseus::online
