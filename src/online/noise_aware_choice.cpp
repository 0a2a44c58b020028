#include "perseus/online/noise_aware_choice.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>

#include "perseus/baselines/all_max.hpp"
#include "perseus/pipeline/dag.hpp"

namespace perseus::online {

double Variability::max() const {
  double m = 0;
  for (const auto& s : sigma) m = std::max({m, s[0], s[1]});
  return m;
}

double Variability::of(int stage, InstructionKind kind) const {
  if (stage < 0 || static_cast<std::size_t>(stage) >= sigma.size()) return 0;
  return sigma[static_cast<std::size_t>(stage)][variability_index(kind)];
}

Variability Variability::uniform(int stages, double sigma) {
  return {std::vector<std::array<double, 2>>(static_cast<std::size_t>(std::max(stages, 0)), {sigma, sigma})};
}

EmulatorNoise emulator_noise(const Variability& v, std::uint64_t seed) {
  EmulatorNoise noise;
  noise.seed = seed;
  noise.stage_sigma = v.sigma;
  return noise;
}

namespace {

constexpr std::size_t kMaxPairs = 1 << 16;  // per (stage, kind): older halves are dropped beyond it
constexpr int kPairSpan = 4;                // each duration is paired with the next few of its set
// Median of |X - Y| for X, Y independent N(0, sigma^2): sigma * sqrt(2) * 0.6744897...
constexpr double kMedianAbsDiff = 1.4142135623730951 * 0.6744897501960817;

std::size_t kind_index(int stage, InstructionKind kind) {
  return static_cast<std::size_t>(stage) * kVariabilityClasses + variability_index(kind);
}

}  // namespace

VariabilityEstimator::VariabilityEstimator(int stages) : stages_(std::max(stages, 0)) {
  ratios_.resize(static_cast<std::size_t>(stages_) * kVariabilityClasses);
}

void VariabilityEstimator::add(int stage, InstructionKind kind, const std::vector<double>& durations) {
  if (stage < 0 || stage >= stages_) throw std::out_of_range("VariabilityEstimator: stage out of range");
  std::vector<double> logs;
  logs.reserve(durations.size());
  for (double d : durations)
    if (d > 0 && std::isfinite(d)) logs.push_back(std::log(d));
  auto& pool = ratios_[kind_index(stage, kind)];
  for (std::size_t i = 0; i < logs.size(); ++i)
    for (std::size_t j = i + 1; j < logs.size() && j <= i + kPairSpan; ++j) pool.push_back(std::abs(logs[i] - logs[j]));
  if (pool.size() > kMaxPairs) pool.erase(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(pool.size() / 2));
}

std::size_t VariabilityEstimator::pairs(int stage, InstructionKind kind) const {
  if (stage < 0 || stage >= stages_) return 0;
  return ratios_[kind_index(stage, kind)].size();
}

Variability VariabilityEstimator::estimate() const {
  Variability v = Variability::uniform(stages_, 0);
  for (int s = 0; s < stages_; ++s)
    for (auto kind : {InstructionKind::forward, InstructionKind::backward}) {
      auto pool = ratios_[kind_index(s, kind)];
      if (pool.empty()) continue;
      auto mid = pool.begin() + static_cast<std::ptrdiff_t>(pool.size() / 2);
      std::nth_element(pool.begin(), mid, pool.end());
      double median = *mid;
      if (pool.size() % 2 == 0) median = (median + *std::max_element(pool.begin(), mid)) / 2;
      v.sigma[static_cast<std::size_t>(s)][variability_index(kind)] = median / kMedianAbsDiff;
    }
  return v;
}

namespace {

const Emulator& checked_emulator(const PlanningOutput& plans) {
  if (!plans.emulator) throw std::invalid_argument("the planning output has no emulator");
  return *plans.emulator;
}

NoisyBatchOptions batch_options(const Variability& v, const NoiseAwareOptions& options) {
  NoisyBatchOptions o;
  o.noise = emulator_noise(v, options.seed);
  o.samples = options.samples;
  o.pipelines = options.pipelines;
  o.speeds = options.speeds;
  o.competitor = options.competitor;
  o.clock_latency = options.clock_latency;
  o.max_work = options.max_work;
  return o;
}

// The emulator's noisy batch of `plans` under `v`: every plan evaluated by one instance sees the
// same draws (common random numbers).
NoisyBatch noisy_batch(const PlanningOutput& plans, const Variability& v, const NoiseAwareOptions& options) {
  return NoisyBatch(checked_emulator(plans), batch_options(v, options));
}

// deadline_for's deadline from all-max's estimate under the noise.
double deadline_from(const NoisyEstimate& top, double slowdown, const NoiseAwareOptions& options) {
  return slowdown * (top.time + std::min(options.allowance * top.time_stddev, options.max_allowance * top.time));
}

// One search for a deadline: frontier plans, repaired plans, all-max, judged by one NoisyBatch.
class Chooser {
 public:
  Chooser(const PlanningOutput& plans, const Variability& v, const NoiseAwareOptions& options)
      : plans_(plans), options_(options), noisy_(noisy_batch(plans, v, options)) {}

  ChosenPlan choose(double deadline) {
    // A plan that meets the deadline to within rounding meets it: a straggler's own plan is given its
    // all-max time as the deadline, which all-max meets exactly and a saving plan that ends as late
    // (its critical path at the top clock, summed in another order) may miss by the last bit.
    constexpr double kRounding = 1e-12;
    deadline_ = deadline * (1 + kRounding);
    std::optional<ChosenPlan> best;
    auto consider = [&](ChosenPlan plan) {
      if (plan.time <= deadline_ && (!best || total(plan) < total(*best))) best = std::move(plan);
    };
    const std::size_t points = plans_.record.points.size();
    if (points > 0) {
      // Noise only slows a plan down (the mean of a maximum is at least the maximum of the means,
      // and each factor's mean is at least 1): nothing slower than the noise-free deadline meets it, on
      // GPUs faster than the profile's by the speeds given (the profile's GPU is the baseline's median
      // pipeline; one slow there that recovered leaves every pipeline faster than it, and points held
      // to the profile's times left only the fastest point to fit: 69% of the ideal).
      const double fastest = fastest_speed();
      std::size_t first = points;
      for (std::size_t i = 0; i < points; ++i)
        if (plans_.candidates[i].time * fastest <= deadline_) {
          first = i;
          break;
        }
      std::optional<std::size_t> plain;
      if (first < points) plain = slowest_meeting(first, points - 1);
      if (plain) consider(frontier_plan(*plain));
      // Repairs: from frontier points between the noise-free pick and the plain noisy one.
      const std::size_t lo = first < points ? first : points - 1;
      const std::size_t hi = plain ? *plain : points - 1;
      for (std::size_t i : spaced(lo, hi, options_.repair_starts))
        if (auto r = repair(i, frequencies(i))) consider(std::move(*r));
      // The noise-free choice (a frontier plan fitted on real times), repaired too.
      ChosenPlan fitted = choose_plan(plans_, deadline_ / fastest);
      if (fitted.point || fitted.fit_steps > 0)
        if (auto r = repair(fitted.point, fitted.frequencies, fitted.fit_steps)) consider(std::move(*r));
    }
    ChosenPlan top = all_max();
    if (best) {
      ChosenPlan improved = merge(improve(std::move(*best)));
      if (improved.frequencies == top.frequencies) return top;  // raised all the way: call it by its name
      if (improved.point) improved.fit_steps = steps_from(*improved.point, improved.frequencies);
      return improved;
    }
    if (top.time <= deadline_ || points == 0) return top;
    ChosenPlan fastest = frontier_plan(points - 1);
    return fastest.time < top.time ? fastest : top;
  }

  // A factor no larger than the one the speeds given put on a plan's iteration time: it ends with the
  // slowest of the pipelines drawn, each no faster than the profile's times at its fastest (model stage,
  // kind) speed (a speed not given, or not positive, is 1).
  double fastest_speed() const {
    if (options_.speeds.empty()) return 1.0;
    const std::size_t drawn = std::min<std::size_t>(options_.speeds.size(), kMaxPipelines);
    double out = 0;
    for (std::size_t d = 0; d < drawn; ++d) {
      double least = 1.0;
      for (const auto& [key, speed] : options_.speeds[d])
        if (speed > 0) least = std::min(least, speed);
      out = std::max(out, least);
    }
    return out;
  }

  // An energy with the blocking from `time` until `deadline` counted.
  double total_until(double time, double energy, double deadline) const {
    return energy + noisy_.stages() * std::max(0.0, deadline - time) * noisy_.p_block();
  }

  ChosenPlan evaluated(ChosenPlan plan) const {
    const auto e = noisy_.evaluate(plan.frequencies, NoisyBatch::Detail::time).estimate;
    plan.time = e.time;
    plan.energy = e.energy;
    return plan;
  }

  ChosenPlan all_max() const {
    ChosenPlan top = online::all_max(plans_);
    return evaluated(std::move(top));
  }

  // All-max's expected time and energy and their spread under the noise (deadline_from's reference).
  NoisyEstimate all_max_estimate() const {
    return noisy_.evaluate(online::all_max(plans_).frequencies, NoisyBatch::Detail::time).estimate;
  }

 private:
  double total(double time, double energy) const {
    return energy + noisy_.stages() * std::max(0.0, deadline_ - time) * noisy_.p_block();
  }
  double total(const ChosenPlan& p) const { return total(p.time, p.energy); }
  double total(const NoisyEstimate& e) const { return total(e.time, e.energy); }

  const std::vector<std::vector<int>>& frequencies(std::size_t point) {
    auto it = cache_.find(point);
    if (it == cache_.end()) it = cache_.emplace(point, plans_.frequencies(point)).first;
    return it->second;
  }

  ChosenPlan frontier_plan(std::size_t point) {
    auto it = estimates_.find(point);
    if (it == estimates_.end())
      it = estimates_.emplace(point, noisy_.evaluate(frequencies(point), NoisyBatch::Detail::time).estimate).first;
    return {point, 0, frequencies(point), it->second.time, it->second.energy};
  }

  bool meets(std::size_t point) { return frontier_plan(point).time <= deadline_; }

  // The slowest frontier point in [lo, hi] that meets the deadline, by bisection on the
  // (nearly monotone) expected time, then a look at the few points just slower.
  std::optional<std::size_t> slowest_meeting(std::size_t lo, std::size_t hi) {
    if (!meets(hi)) return std::nullopt;
    if (meets(lo)) return lo;
    while (hi - lo > 1) {
      const std::size_t mid = lo + (hi - lo) / 2;
      (meets(mid) ? hi : lo) = mid;
    }
    std::size_t found = hi;
    for (std::size_t i = hi > 8 ? hi - 8 : 0; i < hi; ++i)
      if (meets(i)) {
        found = i;
        break;
      }
    return found;
  }

  static std::vector<std::size_t> spaced(std::size_t lo, std::size_t hi, int count) {
    std::vector<std::size_t> out;
    if (count <= 0 || hi < lo) return out;
    for (int j = 0; j < count; ++j) {
      const std::size_t i = lo + static_cast<std::size_t>(std::llround(static_cast<double>(hi - lo) * j / count));
      if (out.empty() || out.back() != i) out.push_back(i);
    }
    return out;
  }

  struct Move {
    int node = 0;
    int clock = 0;
    double ratio = 0;    // energy added per second of expected time saved (first order)
    double benefit = 0;  // expected time saved (first order)
  };

  // The cheapest next clock that is faster than `clock`, for one node.
  std::optional<Move> move_for(int node, int clock, double gradient) const {
    const auto& emulator = noisy_.emulator();
    const auto& inst = noisy_.instruction(node);
    const auto& clocks = emulator.clocks(inst);  // fastest first
    const auto now = emulator.cost(inst, clock);
    auto it = std::find(clocks.begin(), clocks.end(), clock);
    while (it != clocks.begin()) {
      --it;
      const auto faster = emulator.cost(inst, *it);
      const double dt = now->time - faster->time;
      if (dt <= 0) continue;  // a measured clock that is no faster: look one further up
      // Added energy: the compute energy, and the blocking the shorter instruction leaves.
      const double de = noisy_.mean_factor(node) * (faster->energy - now->energy + noisy_.p_block() * dt);
      const double benefit = gradient * dt;
      return Move{node, *it, de / benefit, benefit};
    }
    return std::nullopt;
  }

  // A critical instruction at its top clock whose stage ran the instruction before it at a slower
  // clock starts at that clock for the clock latency: raising the one before to its clock removes
  // the change (and the latency) altogether. Only where the one before runs no longer at that clock:
  // where a forward and a backward run fastest at different clocks (measured profiles dip below the
  // top clock), each would pull the other to its own, and the repair would go round in circles.
  std::optional<Move> merge_into(int node, const std::vector<std::vector<int>>& freqs, double gradient) const {
    if (noisy_.latency() <= 0) return std::nullopt;
    const int previous = noisy_.previous_on_stage(node);
    const int clock = clock_of(freqs, node), old_clock = clock_of(freqs, previous);
    if (previous == node || old_clock == clock) return std::nullopt;
    const auto& emulator = noisy_.emulator();
    const auto here_now = emulator.cost(noisy_.instruction(node), clock);
    const auto here_old = emulator.cost_before_change(noisy_.instruction(node), old_clock);
    const auto before_now = emulator.cost(noisy_.instruction(previous), old_clock);
    const auto before_new = emulator.cost(noisy_.instruction(previous), clock);
    if (!here_now || !here_old || !before_now || !before_new || here_old->time <= here_now->time) return std::nullopt;
    if (before_new->time > before_now->time) return std::nullopt;
    const double lost = std::min(noisy_.latency(), here_old->time) * (1 - here_now->time / here_old->time);
    const double dt = before_now->time - before_new->time;
    const double de = noisy_.mean_factor(previous) * (before_new->energy - before_now->energy + noisy_.p_block() * dt);
    const double benefit = gradient * lost;
    if (benefit <= 0) return std::nullopt;
    return Move{previous, clock, std::max(de, 0.0) / benefit, benefit};
  }

  // Raises the clocks of the instructions that are critical under the noise, cheapest expected
  // time first, until the plan's expected time meets the deadline. Each round raises a batch whose
  // first-order saving covers half the remaining gap, then measures again.
  std::optional<ChosenPlan> repair(std::optional<std::size_t> point, std::vector<std::vector<int>> freqs,
                                   int steps = 0) {
    std::vector<Move> batch;
    for (int round = 0; round < options_.max_repair_rounds; ++round) {
      const auto r = noisy_.evaluate(freqs, NoisyBatch::Detail::gradient);
      if (r.estimate.time <= deadline_) {
        trim(batch, freqs, steps);
        const auto e = noisy_.evaluate(freqs, NoisyBatch::Detail::time).estimate;
        return ChosenPlan{point, steps, std::move(freqs), e.time, e.energy};
      }
      std::vector<Move> moves;
      for (int n = 0; n < noisy_.nodes(); ++n) {
        const double g = r.gradient[static_cast<std::size_t>(n)];
        if (g <= 0) continue;
        const auto [s, k] = noisy_.slot(n);
        if (auto m = move_for(n, freqs[static_cast<std::size_t>(s)][k], g)) {
          moves.push_back(*m);
        } else if (auto merged = merge_into(n, freqs, g)) {
          moves.push_back(*merged);
        }
      }
      if (moves.empty()) return std::nullopt;  // every critical instruction is at its top clock
      std::sort(moves.begin(), moves.end(), [](const Move& a, const Move& b) { return a.ratio < b.ratio; });
      const double gap = r.estimate.time - deadline_;
      batch.clear();
      double covered = 0;
      for (const auto& m : moves) {
        if (!batch.empty() && covered >= gap / 2) break;
        batch.push_back(m);
        covered += m.benefit;
      }
      for (auto& m : batch) {
        const auto [s, k] = noisy_.slot(m.node);
        std::swap(freqs[static_cast<std::size_t>(s)][k], m.clock);  // m.clock keeps the old clock
        ++steps;
      }
    }
    return std::nullopt;
  }

  struct Change {
    int node = 0;
    int clock = 0;     // the new clock
    double ratio = 0;  // energy saved per second of expected time spent (lengthening), or spent per saved (raise)
    double cost = 0;   // lengthening: expected time added, exactly for this change alone
  };

  // The lengthenings of `node` by one to three clock steps that save energy.
  void lengthenings(const NoisyBatch::Result& r, int node, int clock, std::vector<Change>& out) const {
    const auto& emulator = noisy_.emulator();
    const auto& inst = noisy_.instruction(node);
    const auto& clocks = emulator.clocks(inst);  // fastest first
    const auto now = *emulator.cost(inst, clock);
    const double p = noisy_.p_block();
    auto it = std::find(clocks.begin(), clocks.end(), clock);
    for (int step = 0; step < 3 && it != clocks.end() && ++it != clocks.end(); ++step) {
      const auto slower = *emulator.cost(inst, *it);
      const double dt = slower.time - now.time;
      const double saved = noisy_.mean_factor(node) * ((now.energy - p * now.time) - (slower.energy - p * slower.time));
      if (dt <= 0 || saved <= 0) continue;
      const double cost = noisy_.lengthened(r, node, dt) - r.estimate.time;
      out.push_back({node, *it, saved / std::max(cost, 1e-12 * r.estimate.time), cost});
    }
  }

  // Local search on a plan that meets the deadline: lengthen instructions into the slack that the
  // noise leaves them (each lengthening priced exactly on the draws), and trade a raise where
  // expected time is cheap for lengthenings that save more, while the energy keeps falling.
  ChosenPlan improve(ChosenPlan plan) {
    if (!plan.point || options_.max_improve_rounds <= 0) return plan;
    auto freqs = plan.frequencies;
    ChosenPlan best = plan;
    std::vector<char> raised(static_cast<std::size_t>(noisy_.nodes()), 0);  // not to be lengthened (again)
    struct Applied {
      int node, old_clock, new_clock;
    };
    std::vector<Applied> applied;  // the last batch of lengthenings
    int stale = 0;
    for (int round = 0; round < options_.max_improve_rounds && stale < 30; ++round) {
      const auto r = noisy_.evaluate(freqs, NoisyBatch::Detail::paths);
      if (r.estimate.time > deadline_) {  // the last batch overran the slack together: undo it
        if (applied.empty()) break;
        for (auto it = applied.rbegin(); it != applied.rend(); ++it) set_clock(freqs, it->node, it->old_clock);
        if (applied.size() > 1) {  // the best of it alone
          applied.erase(applied.begin() + 1, applied.end());
          set_clock(freqs, applied.front().node, applied.front().new_clock);
        } else {
          raised[static_cast<std::size_t>(applied.front().node)] = 1;  // it does not fit: leave it
          applied.clear();
        }
        continue;
      }
      ++stale;
      if (total(r.estimate) < total(best) - 1e-9) {
        best = {plan.point, plan.fit_steps, freqs, r.estimate.time, r.estimate.energy};
        stale = 0;
      }
      const double slack = deadline_ - r.estimate.time;
      std::vector<Change> lower;
      for (int n = 0; n < noisy_.nodes(); ++n) {
        if (raised[static_cast<std::size_t>(n)]) continue;
        lengthenings(r, n, clock_of(freqs, n), lower);
      }
      std::sort(lower.begin(), lower.end(), [](const Change& a, const Change& b) { return a.ratio > b.ratio; });
      applied.clear();
      double spent = 0;
      std::vector<char> used(raised.size(), 0);
      for (const auto& c : lower) {
        if (applied.size() >= 8 || c.cost > slack - spent) continue;
        if (used[static_cast<std::size_t>(c.node)] || (!applied.empty() && spent + c.cost > slack / 2)) continue;
        used[static_cast<std::size_t>(c.node)] = 1;
        applied.push_back({c.node, clock_of(freqs, c.node), c.clock});
        set_clock(freqs, c.node, c.clock);
        spent += c.cost;
      }
      if (!applied.empty()) continue;
      // Nothing fits: raise where time is cheapest if a lengthening would then save more.
      if (lower.empty()) break;
      std::optional<Move> raise;
      for (int n = 0; n < noisy_.nodes(); ++n) {
        const double g = r.gradient[static_cast<std::size_t>(n)];
        if (g <= 0 || raised[static_cast<std::size_t>(n)]) continue;
        if (auto m = move_for(n, clock_of(freqs, n), g); m && (!raise || m->ratio < raise->ratio)) raise = m;
      }
      if (!raise || lower.front().ratio <= std::max(raise->ratio, 0.0)) break;
      raised[static_cast<std::size_t>(raise->node)] = 1;
      set_clock(freqs, raise->node, raise->clock);
    }
    return best;
  }

  // With a clock latency a change of clock pays only where what the instruction gains at its new
  // clock outweighs running the latency at the clock before: each change is tried without (the
  // instruction at the clock before it, or the one before at this one's) and left out where the
  // plan then costs no more and still meets the deadline. Bounded in evaluations.
  ChosenPlan merge(ChosenPlan plan) {
    if (options_.clock_latency <= 0) return plan;
    constexpr int kEvaluations = 600;
    auto freqs = plan.frequencies;
    NoisyEstimate current = noisy_.evaluate(freqs, NoisyBatch::Detail::time).estimate;
    int budget = kEvaluations;
    for (int pass = 0; pass < 3 && budget > 0; ++pass) {
      bool changed = false;
      for (std::size_t s = 0; s < freqs.size() && budget > 0; ++s)
        for (std::size_t k = 1; k < freqs[s].size() && budget > 0; ++k) {
          if (freqs[s][k] == freqs[s][k - 1]) continue;
          for (const std::size_t target : {k, k - 1}) {
            const int old_clock = freqs[s][target], clock = freqs[s][target == k ? k - 1 : k];
            if (!noisy_.emulator().cost(noisy_.emulator().layout()[s][target], clock)) continue;  // not profiled
            freqs[s][target] = clock;
            --budget;
            const auto e = noisy_.evaluate(freqs, NoisyBatch::Detail::time).estimate;
            if (e.time <= deadline_ && total(e) <= total(current) - 1e-12) {
              current = e;
              changed = true;
              break;
            }
            freqs[s][target] = old_clock;
          }
        }
      if (!changed) break;
    }
    plan.frequencies = std::move(freqs);
    plan.time = current.time;
    plan.energy = current.energy;
    return plan;
  }

  // Clock steps between a plan and its frontier point, either way, over every instruction.
  int steps_from(std::size_t point, const std::vector<std::vector<int>>& freqs) {
    const auto& base = frequencies(point);
    int steps = 0;
    for (int n = 0; n < noisy_.nodes(); ++n) {
      const auto& clocks = noisy_.emulator().clocks(noisy_.instruction(n));
      const auto index = [&](int clock) { return std::find(clocks.begin(), clocks.end(), clock) - clocks.begin(); };
      const auto [s, k] = noisy_.slot(n);
      const auto stage = static_cast<std::size_t>(s);
      steps += static_cast<int>(std::abs(index(freqs[stage][k]) - index(base[stage][k])));
    }
    return steps;
  }

  int clock_of(const std::vector<std::vector<int>>& freqs, int node) const {
    const auto [s, k] = noisy_.slot(node);
    return freqs[static_cast<std::size_t>(s)][k];
  }
  void set_clock(std::vector<std::vector<int>>& freqs, int node, int clock) const {
    const auto [s, k] = noisy_.slot(node);
    freqs[static_cast<std::size_t>(s)][k] = clock;
  }

  // Undoes what the last batch raised beyond need, the costliest raise first.
  void trim(const std::vector<Move>& batch, std::vector<std::vector<int>>& freqs, int& steps) {
    for (auto it = batch.rbegin(); it != batch.rend(); ++it) {
      if (batch.size() == 1) break;  // the one raise was needed
      const auto [s, k] = noisy_.slot(it->node);
      int& clock = freqs[static_cast<std::size_t>(s)][k];
      const int raised = clock;
      clock = it->clock;
      if (noisy_.evaluate(freqs, NoisyBatch::Detail::time).estimate.time <= deadline_) {
        --steps;
      } else {
        clock = raised;
      }
    }
  }

  const PlanningOutput& plans_;
  NoiseAwareOptions options_;
  NoisyBatch noisy_;
  double deadline_ = 0;
  std::map<std::size_t, std::vector<std::vector<int>>> cache_;
  std::map<std::size_t, NoisyEstimate> estimates_;
};

}  // namespace

NoisyEstimate expected_time_and_energy(const PlanningOutput& plans, const std::vector<std::vector<int>>& frequencies,
                                       const Variability& v, const NoiseAwareOptions& options) {
  const NoisyBatch noisy = noisy_batch(plans, v, options);
  noisy.emulator().check_plan(frequencies);
  return noisy.evaluate(frequencies, NoisyBatch::Detail::time).estimate;
}

std::vector<double> iteration_samples(const PlanningOutput& plans, const std::vector<std::vector<int>>& frequencies,
                                      const Variability& v, const NoiseAwareOptions& options) {
  const NoisyBatch noisy = noisy_batch(plans, v, options);
  noisy.emulator().check_plan(frequencies);
  return noisy.evaluate(frequencies, NoisyBatch::Detail::paths).makespan;
}

double expected_time(const PlanningOutput& plans, const std::vector<std::vector<int>>& frequencies,
                     const Variability& v, const NoiseAwareOptions& options) {
  return expected_time_and_energy(plans, frequencies, v, options).time;
}

double expected_all_max_time(const PlanningOutput& plans, const Variability& v, const NoiseAwareOptions& options) {
  return expected_time(plans, all_max(plans).frequencies, v, options);
}

double deadline_for(const PlanningOutput& plans, double slowdown, const Variability& v,
                    const NoiseAwareOptions& options) {
  return deadline_from(expected_time_and_energy(plans, all_max(plans).frequencies, v, options), slowdown, options);
}

ChosenPlan choose_plan_under_noise(const PlanningOutput& plans, double deadline, const Variability& v,
                                   const NoiseAwareOptions& options) {
  return Chooser(plans, v, options).choose(deadline);
}

AllowedChoice choose_within_allowance(const PlanningOutput& plans, double slowdown, const Variability& v,
                                      const NoiseAwareOptions& options) {
  Chooser chooser(plans, v, options);
  const NoisyEstimate top = chooser.all_max_estimate();
  AllowedChoice out;
  out.deadline = deadline_from(top, slowdown, options);
  const double reference = slowdown * top.time;
  out.allowance = reference > 0 ? out.deadline / reference - 1 : 0;
  out.plan = chooser.choose(out.deadline);
  if ((options.wide_allowance <= options.allowance && options.wide_max_allowance <= options.max_allowance) ||
      (v.max() <= 0 && options.clock_latency <= 0))
    return out;
  const ChosenPlan top_noise_free = all_max(plans);
  const ChosenPlan noise_free = choose_plan(plans, slowdown * top_noise_free.time);
  out.noise_free_saving = 1 - noise_free.energy / top_noise_free.energy;
  out.saving = out.narrow_saving = 1 - out.plan.energy / top.energy;
  if (out.noise_free_saving <= 0 || out.saving >= (1 - options.widen_at) * out.noise_free_saving) return out;
  NoiseAwareOptions wide = options;
  wide.allowance = std::max(options.allowance, options.wide_allowance);
  wide.max_allowance = std::max(options.max_allowance, options.wide_max_allowance);
  double wide_deadline = deadline_from(top, slowdown, wide);
  // A clock latency delays the noise-free choice's critical instructions that follow a change of
  // clock, which no plan at the top clock wins back: the deadline may also allow that delay (as
  // the noise's, within max_allowance), where the saving it buys pays for it the same way.
  if (options.clock_latency > 0) {
    NoiseAwareOptions at_once = options;
    at_once.clock_latency = 0;
    const double delay = expected_time(plans, noise_free.frequencies, v, options) -
                         expected_time(plans, noise_free.frequencies, v, at_once);
    wide_deadline = std::max(wide_deadline, std::min(out.deadline + slowdown * std::max(delay, 0.0),
                                                     reference * (1 + options.max_allowance)));
  }
  ChosenPlan widened = chooser.choose(wide_deadline);
  const auto total = [&](double time, double energy) { return chooser.total_until(time, energy, wide_deadline); };
  const double further =
      (total(out.plan.time, out.plan.energy) - total(widened.time, widened.energy)) / total(top.time, top.energy);
  const double given_up = std::max(0.0, (widened.time - out.plan.time) / top.time);
  if (further > 0 && further >= options.wide_return * given_up) {
    out.plan = std::move(widened);
    out.deadline = wide_deadline;
    out.allowance = reference > 0 ? wide_deadline / reference - 1 : 0;
    out.widened = true;
    out.saving = 1 - out.plan.energy / top.energy;
  }
  return out;
}

ChosenPlan step_up(const PlanningOutput& plans, const ChosenPlan& current, double deadline, const Variability& v,
                   const NoiseAwareOptions& options) {
  Chooser chooser(plans, v, options);
  plans.emulator->check_plan(current.frequencies);
  const double now = chooser.evaluated(current).time;
  ChosenPlan next = chooser.choose(std::min(deadline, now * (1 - options.step_margin)));
  if (next.time < now) return next;
  return chooser.all_max();  // nothing is faster by the margin: the baseline's own plan
}

}  // namespace perseus::online
