#include "perseus/emulate/noisy_batch.hpp"

#include <algorithm>
#include <cmath>
#include <random>

namespace perseus {

NoisyBatch::NoisyBatch(const Emulator& emulator, const NoisyBatchOptions& options) : emulator_(emulator) {
  const auto& config = emulator_.config();
  stages_ = config.num_stages;
  p_block_ = config.p_block;
  nodes_ = walk().nodes();

  const bool noisy = options.noise.active();
  const bool spread = !options.speeds.empty();
  pipelines_ = spread  ? std::min<int>(static_cast<int>(options.speeds.size()), kMaxPipelines)
               : noisy ? std::clamp(options.pipelines, 1, kMaxPipelines)
                       : 1;
  const std::size_t per_sample = static_cast<std::size_t>(pipelines_) * static_cast<std::size_t>(std::max(nodes_, 1));
  const int affordable = static_cast<int>(std::min<std::size_t>(options.max_work / per_sample, 1 << 20));
  samples_ = noisy ? std::max(std::min(std::max(options.samples, 1), affordable), std::min(options.samples, 8)) : 1;
  samples_ = std::max(samples_, 1);
  competitor_ = options.competitor;
  latency_ = std::max(0.0, options.clock_latency);
  if (!competitor_.empty()) samples_ = static_cast<int>(competitor_.size());
  node_sigma_.resize(static_cast<std::size_t>(nodes_));
  for (int n = 0; n < nodes_; ++n) {
    const auto& inst = instruction(n);
    node_sigma_[static_cast<std::size_t>(n)] = std::max(0.0, options.noise.sigma_of(inst.stage, inst.kind));
  }
  // Per pipeline and node: its GPU's speed.
  std::vector<double> speed(static_cast<std::size_t>(pipelines_) * nodes_, 1.0);
  node_speed_.assign(static_cast<std::size_t>(nodes_), 1.0);
  if (spread) {
    for (int n = 0; n < nodes_; ++n) {
      const auto& inst = instruction(n);
      const std::pair<int, InstructionKind> key{model_stage(inst, stages_), inst.kind};
      double sum = 0;
      for (int d = 0; d < pipelines_; ++d) {
        const auto& mine = options.speeds[static_cast<std::size_t>(d)];
        auto it = mine.find(key);
        const double f = it != mine.end() && it->second > 0 ? it->second : 1.0;
        speed[static_cast<std::size_t>(d) * nodes_ + n] = f;
        sum += f;
      }
      node_speed_[static_cast<std::size_t>(n)] = sum / pipelines_;
    }
  }
  factors_.assign(static_cast<std::size_t>(samples_) * pipelines_ * nodes_, 1.0);
  std::mt19937_64 rng(options.noise.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (std::size_t i = 0; i < factors_.size(); ++i) {
    const std::size_t pipeline_node = i % (static_cast<std::size_t>(pipelines_) * nodes_);
    factors_[i] = (noisy ? std::exp(node_sigma_[i % nodes_] * normal(rng)) : 1.0) * speed[pipeline_node];
  }
}

double NoisyBatch::mean_factor(int node) const {
  const double s = node_sigma_[static_cast<std::size_t>(node)];
  return std::exp(s * s / 2) * node_speed_[static_cast<std::size_t>(node)];
}

double NoisyBatch::lengthened(const Result& r, int node, double dt) const {
  double sum = 0;
  for (int k = 0; k < samples_; ++k) {
    const double t = r.makespan[static_cast<std::size_t>(k)];
    double longest = t;
    for (int d = 0; d < pipelines_; ++d) {
      const std::size_t i = (static_cast<std::size_t>(k) * pipelines_ + d) * nodes_ + node;
      longest = std::max(longest, r.through[i] + dt * factors_[i]);
    }
    sum += longest - t;
  }
  return r.estimate.time + sum / samples_;
}

NoisyBatch::Result NoisyBatch::evaluate(const std::vector<std::vector<int>>& frequencies, Detail detail) const {
  const bool gradient = detail != Detail::time;
  const bool paths = detail == Detail::paths;
  const auto& graph = walk();
  std::vector<TimeEnergy> costs(static_cast<std::size_t>(nodes_));
  // With a clock latency: the cost at the clock before it on its stage of each instruction whose
  // clock differs from that one (none: time -1).
  std::vector<TimeEnergy> before;
  if (latency_ > 0) before.resize(costs.size());
  for (int n = 0; n < nodes_; ++n) {
    const auto [s, k] = slot(n);
    const auto& stage = frequencies[static_cast<std::size_t>(s)];
    costs[static_cast<std::size_t>(n)] = *emulator_.cost(instruction(n), stage[k]);
    if (latency_ > 0) {
      const int previous = stage[k > 0 ? k - 1 : stage.size() - 1];  // the last one of the iteration before
      const auto old = previous == stage[k] ? std::nullopt : emulator_.cost_before_change(instruction(n), previous);
      before[static_cast<std::size_t>(n)] = old ? *old : TimeEnergy{-1, 0};
    }
  }
  // Time and energy of node n with factor f.
  auto run = [&](int n, double f) -> TimeEnergy {
    const auto& now = costs[static_cast<std::size_t>(n)];
    if (latency_ <= 0 || before[static_cast<std::size_t>(n)].time < 0) return {now.time * f, now.energy * f};
    return cost_after_clock_change(now, before[static_cast<std::size_t>(n)], latency_, f);
  };
  Result out;
  if (gradient) out.gradient.assign(static_cast<std::size_t>(nodes_), 0.0);
  if (paths) {
    out.makespan.assign(static_cast<std::size_t>(samples_), 0.0);
    out.through.assign(factors_.size(), 0.0);
  }
  std::vector<double> start(static_cast<std::size_t>(nodes_)), end(start.size()), tail(start.size());
  std::vector<double> best_start, best_end;
  double sum_time = 0, sum_sq = 0, sum_energy = 0;
  for (int k = 0; k < samples_; ++k) {
    double slowest = 0, compute = 0, busy = 0;
    // The other pipelines' end, when given: the iteration ends no earlier.
    const bool floor = !competitor_.empty();
    if (floor) slowest = competitor_[static_cast<std::size_t>(k)];
    int slowest_pipeline = floor ? -1 : 0, slowest_last = -1;
    for (int d = 0; d < pipelines_; ++d) {
      const double* f = &factors_[(static_cast<std::size_t>(k) * pipelines_ + d) * nodes_];
      const int last = graph.walk(
          [&](int n) {
            const auto [t, e] = run(n, f[n]);
            busy += t;
            compute += e;
            return t;
          },
          start.data(), end.data());
      const double time = last < 0 ? 0 : end[static_cast<std::size_t>(last)];
      if (paths) {  // the longest way from each node's end to the iteration's end
        double* through = &out.through[(static_cast<std::size_t>(k) * pipelines_ + d) * nodes_];
        for (auto it = graph.topo.rbegin(); it != graph.topo.rend(); ++it) {
          const auto n = static_cast<std::size_t>(*it);
          double after = 0;
          for (int q : graph.successors[n])
            after = std::max(after, tail[static_cast<std::size_t>(q)] + run(q, f[q]).time);
          tail[n] = after;
          through[n] = end[n] + after;
        }
      }
      if ((d == 0 && !floor) || time > slowest) {
        slowest = time;
        slowest_pipeline = d;
        slowest_last = last;
        if (gradient) {
          best_start = start;
          best_end = end;
        }
      }
    }
    sum_time += slowest;
    sum_sq += slowest * slowest;
    if (paths) out.makespan[static_cast<std::size_t>(k)] = slowest;
    // Every pipeline's GPUs compute or block until the slowest pipeline ends.
    sum_energy += iteration_energy(compute, busy, slowest, stages_ * pipelines_, p_block_) / pipelines_;
    if (gradient && slowest_pipeline >= 0) {
      const double* f = &factors_[(static_cast<std::size_t>(k) * pipelines_ + slowest_pipeline) * nodes_];
      graph.critical_path(slowest_last, best_start.data(), best_end.data(),
                          [&](int n) { out.gradient[static_cast<std::size_t>(n)] += f[n] / samples_; });
    }
  }
  const double mean = sum_time / samples_;
  out.estimate.time = mean;
  out.estimate.energy = sum_energy / samples_;
  const double variance = samples_ > 1 ? (sum_sq - samples_ * mean * mean) / (samples_ - 1) : 0;
  out.estimate.time_stddev = std::sqrt(std::max(0.0, variance));
  return out;
}

}  // namespace perseus
