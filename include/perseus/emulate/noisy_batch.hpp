#pragma once
// The emulator under noise, batched: many Monte Carlo draws of one or more data-parallel pipelines,
// each instruction's time and energy scaled by a log-normal factor (median 1) with the sigma of its
// (stage, kind) and by its GPU's speed, drawn once so that every plan one batch evaluates sees the
// same factors (common random numbers). It walks the emulator's graph (pipeline_walk.hpp) with the
// emulator's costs and formulas; with no noise, one pipeline and no clock latency of its own, its
// time and energy are the emulator's time_and_energy.
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "perseus/emulate/emulator.hpp"

namespace perseus {

inline constexpr int kMaxPipelines = 64;

struct NoisyBatchOptions {
  EmulatorNoise noise;  // sigma per (stage, kind) and the seed of the draws
  int samples = 64;     // Monte Carlo draws per evaluation
  // Data-parallel pipelines meeting at the gradient synchronisation: each draw's iteration ends with
  // the slowest of this many independently noisy pipelines (at most kMaxPipelines; 1 without noise).
  int pipelines = 1;
  // Per pipeline, per (model stage, kind): its GPUs' speed, a factor on the time and energy of every
  // such instruction (1 where not given). When given, its size is the number of pipelines drawn (at
  // most kMaxPipelines), instead of `pipelines`.
  std::vector<std::map<std::pair<int, InstructionKind>, double>> speeds;
  // Per draw, when the iteration ends at the latest anyway (other pipelines' own plans); when
  // given, its size is the number of draws.
  std::vector<double> competitor;
  double clock_latency = 0;  // seconds until a changed clock takes effect (0: at once)
  // Bound on one evaluation's work, instructions x pipelines x draws: large pipelines get fewer
  // draws (at least 8).
  std::size_t max_work = std::size_t{1} << 22;
};

struct NoisyEstimate {
  double time = 0;         // mean iteration time, seconds
  double energy = 0;       // mean energy of one pipeline's iteration, joules (blocking until the iteration's end)
  double time_stddev = 0;  // of one iteration's time
};

class NoisyBatch {
 public:
  // Keeps a reference to `emulator`: it must outlive the batch.
  NoisyBatch(const Emulator& emulator, const NoisyBatchOptions& options);

  const Emulator& emulator() const { return emulator_; }
  const PipelineWalk& walk() const { return emulator_.walk(); }
  int stages() const { return stages_; }
  double p_block() const { return p_block_; }
  int nodes() const { return nodes_; }
  const Instruction& instruction(int node) const { return walk().instructions[static_cast<std::size_t>(node)]; }
  std::pair<int, std::size_t> slot(int node) const { return walk().slot[static_cast<std::size_t>(node)]; }
  int previous_on_stage(int node) const { return walk().previous_on_stage(node); }
  double latency() const { return latency_; }
  // The mean factor on `node`'s time and energy over the draws' distribution (noise and speeds).
  double mean_factor(int node) const;
  int samples() const { return samples_; }
  int pipelines() const { return pipelines_; }

  struct Result {
    NoisyEstimate estimate;
    std::vector<double> gradient;  // d(mean time)/d(noise-free time) per node, when asked
    // When asked: per draw its iteration time, and per (draw, pipeline, node) the longest path
    // through the node, so that lengthening one node is priced exactly.
    std::vector<double> makespan, through;
  };
  enum class Detail { time, gradient, paths };

  // Every draw of `frequencies` (per stage, per slot of the emulator's layout(); every clock
  // profiled: check with Emulator::check_plan first).
  Result evaluate(const std::vector<std::vector<int>>& frequencies, Detail detail) const;
  // Expected iteration time if `node` alone took `dt` longer (noise-free seconds); `r` from
  // evaluate(..., Detail::paths).
  double lengthened(const Result& r, int node, double dt) const;

 private:
  const Emulator& emulator_;
  int stages_ = 0, nodes_ = 0, samples_ = 1, pipelines_ = 1;
  double p_block_ = 0;
  std::vector<double> node_sigma_;
  std::vector<double> node_speed_;  // mean over the pipelines
  std::vector<double> competitor_;  // per draw: when the iteration ends at the latest anyway
  double latency_ = 0;              // seconds until a changed clock takes effect
  std::vector<double> factors_;     // [draw][pipeline][node]
};

}  // namespace perseus
