#pragma once
// Choosing plans for the cluster they run on. Real GPUs vary from one kernel to the
// next. A plan that balances many near-critical paths ends later under that noise than its
// noise-free emulated time says (the iteration ends with the longest of many noisy paths), more
// so than all-max, which leaves slack beside its critical paths. So plans are judged here by their expected
// iteration time under the measured variability: a Monte Carlo run of the emulator's pipeline in
// which each instruction's time and energy are scaled by a log-normal factor (median 1) with the
// sigma of its (stage, kind), the same draws for every plan compared (common random numbers), so
// that the difference between two plans is measured far more precisely than either time.
//
// The reference. Deadlines here are expected times under the same noise, in the emulator's terms
// (the candidates' noise-free emulated times are the noise-free case). The measured all-max
// baseline is itself a noisy run: its mean exceeds all-max's noise-free time. Callers that ask for
// "no slower than all-max by a factor x" pass
//     deadline = deadline_for(plans, x, v, options)
//              = x * (expected all-max time + min(options.allowance * its standard deviation,
//                                                   options.max_allowance * expected all-max time))
// so that x = 1 means "no slower than all-max under the same noise"; a measured time converts to
// these terms by the factor expected_all_max_time / measured all-max baseline (what the model
// leaves out: gradient synchronisation, launch gaps). ChosenPlan::time and ::energy of what these
// functions return are expected values under the noise, for one pipeline.
//
// The allowance. No plan is faster than all-max in any draw (every clock at the top), so with the
// same draws "expected time <= all-max's" means "as fast as all-max in every draw": every
// instruction that is critical in any draw stays at its top clock, and the more draws the fewer
// savings. An allowance of one iteration's spread under the noise (0 without noise), capped at 0.15% of
// its time, which no measurement of a few rounds tells apart (the loop verifies with a tolerance of 0.4%),
// lets rarely critical instructions slow down; docs/benchmarks.md measures what it costs in true
// slowdown and what it keeps of the saving. Where the noise still costs much of the saving (see
// choose_within_allowance), the allowance widens to two spreads, at most 0.3%, if the time buys enough.
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "perseus/emulate/emulator.hpp"
#include "perseus/emulate/noisy_batch.hpp"
#include "perseus/online/background_planner.hpp"
#include "perseus/pipeline/schedule.hpp"

namespace perseus::online {

// Log-normal sigma of one instruction's time (and energy), per stage and kind.
struct Variability {
  std::vector<std::array<double, kVariabilityClasses>> sigma;  // [stage][variability_index(kind)]
  double max() const;
  // 0 for a stage it does not cover.
  double of(int stage, InstructionKind kind) const;
  static Variability uniform(int stages, double sigma);
};

// The emulator's noise for `v` (EmulatorNoise::stage_sigma), drawn from `seed`.
EmulatorNoise emulator_noise(const Variability& v, std::uint64_t seed);

// Accumulates measured per-instruction durations; each sample set is durations of one
// (stage, kind) at one clock within one round (so clock and round effects cancel).
// The estimate is robust: within a set, the log-ratios of durations a few places apart (each the
// difference of two independent draws, sd sigma*sqrt(2)), pooled over every set so far, and sigma
// read off their median absolute value. A slow iteration, a straggler's share of a round or a
// drift within a round moves few of them; what the sets share (clock, round) cancels. One set is
// one GPU's durations: with tensor parallelism one rank per stage (its peers finish together),
// each data-parallel pipeline a set of its own (so that GPUs of different speeds do not count as noise).
class VariabilityEstimator {
 public:
  explicit VariabilityEstimator(int stages);
  // Non-positive or non-finite durations are skipped; a set needs two durations to count.
  void add(int stage, InstructionKind kind, const std::vector<double>& durations);
  Variability estimate() const;  // robust; 0 where nothing was measured
  // Log-ratios pooled so far for (stage, kind) (the estimate's sample size).
  std::size_t pairs(int stage, InstructionKind kind) const;

 private:
  int stages_;
  std::vector<std::vector<double>> ratios_;  // per stage*2 + kind: |log d_i - log d_j|, bounded
};

struct NoiseAwareOptions {
  int samples = 64;        // Monte Carlo iterations per evaluation
  std::uint64_t seed = 1;  // the draws: the same seed gives the same draws for every plan
  // Data-parallel pipelines meeting at the gradient synchronisation: each sample's iteration
  // ends with the slowest of this many independently noisy pipelines (at most kMaxPipelines of
  // them are drawn: the slowest of more grows too slowly to matter next to the work).
  int pipelines = 1;
  // Per pipeline, per (model stage, kind): its GPUs' speed, a factor on the time and energy of every
  // such instruction (1 where not given; GPUs of one cluster are not equally fast). When given, its
  // size is the number of pipelines drawn (at most kMaxPipelines), instead of `pipelines`.
  std::vector<std::map<std::pair<int, InstructionKind>, double>> speeds;
  // Per Monte Carlo sample, when the iteration ends at the latest anyway (other pipelines running
  // their own plans: iteration_samples of theirs): a plan is then judged by how much later than
  // that it makes the iteration end. Its size is the number of samples.
  std::vector<double> competitor;
  // Seconds until a locked clock takes effect: an instruction whose clock differs from the one
  // before it on its stage runs that long at the one before (0: at once). Plans are judged with it,
  // and a chosen plan keeps a change only where it pays (see choose_plan_under_noise).
  double clock_latency = 0;
  // Bound on one evaluation's work, instructions x pipelines x samples: large pipelines get
  // fewer samples (at least 8), so that a choice stays within seconds.
  std::size_t max_work = std::size_t{1} << 22;
  int repair_starts = 6;         // frontier points that repaired plans start from
  int max_repair_rounds = 200;   // Monte Carlo evaluations one repair may take
  int max_improve_rounds = 400;  // Monte Carlo evaluations of the local search on the best plan
  double step_margin = 1e-3;     // step_up: at least this fraction faster than the current plan
  // deadline_for: standard deviations of all-max's iteration time under the noise above its mean
  // (see the top), and at most this fraction of that mean (what the slowdown it costs stays within).
  double allowance = 1.0;
  double max_allowance = 0.0015;
  // choose_within_allowance: where the noise costs more than widen_at of the noise-free saving, the
  // allowance may widen to wide_allowance standard deviations, at most wide_max_allowance of the mean,
  // for a plan whose further saving (share of all-max's energy) is at least wide_return times the share
  // of the iteration time it gives up.
  double widen_at = 0.08;
  double wide_allowance = 2.0;
  double wide_max_allowance = 0.003;
  double wide_return = 3;
};

// Expected (mean) iteration time of one pipeline running `frequencies` under `v` (with
// options.pipelines > 1, of the slowest of that many). Equals the noise-free emulated time when
// v is all zero. Throws Error for a plan the emulator rejects.
double expected_time(const PlanningOutput& plans, const std::vector<std::vector<int>>& frequencies,
                     const Variability& v, const NoiseAwareOptions& = {});
NoisyEstimate expected_time_and_energy(const PlanningOutput& plans, const std::vector<std::vector<int>>& frequencies,
                                       const Variability& v, const NoiseAwareOptions& = {});
// Per Monte Carlo sample, the iteration time of the pipelines running `frequencies` (as
// expected_time averages them).
std::vector<double> iteration_samples(const PlanningOutput& plans, const std::vector<std::vector<int>>& frequencies,
                                      const Variability& v, const NoiseAwareOptions& = {});
// The reference: all-max's expected time under `v` (see the top of this file).
double expected_all_max_time(const PlanningOutput& plans, const Variability& v, const NoiseAwareOptions& = {});
// The deadline for "at most `slowdown` times all-max's time" under `v`:
// slowdown * (all-max's expected time + options.allowance * its standard deviation).
double deadline_for(const PlanningOutput& plans, double slowdown, const Variability& v, const NoiseAwareOptions& = {});

// The cheapest plan whose expected time under `v` is <= deadline (seconds, in the same terms as
// PlanningOutput's candidates' noise-free emulated times; see the top of this file for the
// reference); may be a frontier plan with near-critical clocks raised (ChosenPlan::fit_steps
// raises). Energies compare with the blocking until the deadline counted, as choose_plan's.
// All-max only when nothing else meets it; the fastest plan by expected time when nothing does.
// ChosenPlan::time is the expected time under noise.
ChosenPlan choose_plan_under_noise(const PlanningOutput& plans, double deadline, const Variability& v,
                                   const NoiseAwareOptions& = {});
// The allowance where the noise costs much of the saving. Some pipelines (GPipe's long rows of
// microbatches, stages nearly balanced) have so many near-critical paths that, under the same draws,
// only plans that save far less than the noise-free choice stay within one allowance of all-max:
// GPT-3 175B's A40 profile with GPipe keeps about two thirds of the noise-free saving at sigma 0.02
// within 0.15% of all-max.
// There the allowance widens (options.wide_allowance, wide_max_allowance) when what it buys pays for the time: a
// plan the user would take over the narrower one (docs/benchmarks.md measures both).
struct AllowedChoice {
  ChosenPlan plan;       // as choose_plan_under_noise returns it
  double deadline = 0;   // what it was chosen for: deadline_for(plans, slowdown, v, options), widened or not
  double allowance = 0;  // the deadline's allowance: deadline / (slowdown x all-max's expected time) - 1
  bool widened = false;
  // Shares of all-max's energy saved: by the noise-free choice, and under the noise by the plan within
  // max_allowance (what the widening was weighed against) and by `plan` (0 where nothing was weighed:
  // no noise, or no wider allowance in the options).
  double noise_free_saving = 0, narrow_saving = 0, saving = 0;
};
// The cheapest plan for "at most `slowdown` times all-max" under `v`: choose_plan_under_noise for
// deadline_for(plans, slowdown, v, options), or, where the noise costs more than options.widen_at of
// the noise-free choice's saving (choose_plan at slowdown times all-max's noise-free time), for the
// deadline with the wide allowance (options.wide_allowance, wide_max_allowance), if that plan's further saving is at
// least options.wide_return times the share of all-max's expected time it adds (both with the blocking until the wider
// deadline counted). Under options.clock_latency the noise and the latency together cost the saving, and
// the wider deadline also allows what the latency delays the noise-free choice by, within max_allowance.
AllowedChoice choose_within_allowance(const PlanningOutput& plans, double slowdown, const Variability& v,
                                      const NoiseAwareOptions& = {});

// The next plan faster than `current` (in expected time under `v`, by at least
// options.step_margin) that a corrected prediction says meets `deadline`: the cheapest such plan.
// Used for a step-up; all-max only when nothing else does. The caller corrects `deadline` by
// what it measured (e.g. deadline / (measured / predicted time of `current`)).
ChosenPlan step_up(const PlanningOutput& plans, const ChosenPlan& current, double deadline, const Variability& v,
                   const NoiseAwareOptions& = {});

}  // namespace perseus::online
