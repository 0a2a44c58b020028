// TurnkeyController before its plans run: the warm-up's all-max baseline, the clock scans of
// profiling and their check rounds, planning on a worker thread, and the first deployment.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "perseus/online/turnkey_controller.hpp"
#include "turnkey_controller_detail.hpp"

namespace perseus::online {

using namespace turnkey_detail;

namespace {

// Which cost model each (model stage, kind) got, in words.
std::string describe_cost_models(const std::map<std::string, std::string>& models) {
  std::vector<std::string> pwl;
  bool exponential = false;
  for (const auto& [where, model] : models) {
    if (model == "pwl") pwl.push_back(where);
    exponential = exponential || model == "exp";
  }
  if (pwl.empty()) return "exponential everywhere";
  if (!exponential) return "piecewise-linear everywhere";
  return fmt::format("piecewise-linear for {} (where the exponential fit fails or misleads), exponential elsewhere",
                     fmt::join(pwl, ", "));
}

}  // namespace

void TurnkeyController::add_baseline(const RoundMeasurement& m) {
  baseline_.add({m.iteration_time, m.energy});
  pipelines_.add(m, static_cast<std::size_t>(std::max(config_.max_baseline_rounds, 12)));
  if (m.blocking_power) {
    idle_power_sum_ += *m.blocking_power;
    ++idle_power_rounds_;
    p_block_ = idle_power_sum_ / idle_power_rounds_;
  }
  estimate_baseline();
}

// The baseline from its rounds (and, while the warm-up's rounds are the baseline's, each pipeline's
// statistics from the same rounds, outliers left out).
void TurnkeyController::estimate_baseline() {
  const auto kept =
      baseline_.estimate([this](double time) { return round_spread_floor(time); }, phase_ == ControllerPhase::warmup);
  last_baseline_round_kept_ = kept.empty() || kept.back();
  if (phase_ == ControllerPhase::warmup && pipelines_.rounds() == baseline_.size()) pipelines_.estimate(kept);
  if (plans_ && plans_->all_max().time > 0) scale_ = baseline_.time() / plans_->all_max().time;
}

// (stage, kind)'s mean instruction over the pipelines not marked disturbed (all of them when the
// measurement has no per-pipeline numbers), each pipeline's in units of its GPUs' speed in the
// baseline, so that the profile is the median pipeline's whichever pipelines it is measured on; with
// the standard error of its time where the round kept the instructions' durations.
std::optional<ClockMeasurement> TurnkeyController::clean_instruction(const RoundMeasurement& m,
                                                                     const std::vector<bool>& disturbed,
                                                                     const StageKind& key) const {
  const auto sets = m.occurrences.find(key);
  double error = sets != m.occurrences.end() ? relative_standard_error(sets->second) : 0;
  // The sets of a pipeline held at the top clock count in that error but not in the time measured:
  // every pipeline has as many sets, so the error of the others' alone is larger by the root of the
  // share they are.
  const auto D = static_cast<double>(shape_.pipelines);
  if (held_at_top_ && D > 1) error *= std::sqrt(D / (D - 1));
  double time = 0, energy = 0;
  int n = 0;
  for (std::size_t d = 0; d < m.pipeline_instructions.size(); ++d) {
    if (d < disturbed.size() && disturbed[d]) continue;
    auto it = m.pipeline_instructions[d].find(key);
    if (it == m.pipeline_instructions[d].end()) continue;
    const double speed = pipelines_.known() ? pipelines_.speed(d, key) * pace_change(d) : 1.0;
    time += it->second.time / speed, energy += it->second.energy / speed, ++n;
  }
  if (n > 0) return ClockMeasurement{time / n, energy / n, error};
  // The round's instructions over every pipeline, one held at the top clock among them: not this clock's.
  if (held_at_top_) return std::nullopt;
  auto it = m.instructions.find(key);
  if (it == m.instructions.end()) return std::nullopt;
  return ClockMeasurement{it->second.time, it->second.energy, error};
}

// (stage, kind)'s top-clock instruction over the baseline's rounds, as clean_instruction takes it from
// one round (the pipelines not marked disturbed, each in units of its GPUs' speed), with the standard
// error of that mean. Plans for no slowdown run the critical path at the top clock and spend the
// other paths' slack: an error of a fraction of a percent there is slack a plan spends that is not
// there, or misses, and the baseline's rounds know it several times better than one round. None
// where some pipeline's is from fewer than two rounds.
std::optional<ClockMeasurement> TurnkeyController::baseline_top_clock(const std::vector<bool>& disturbed,
                                                                      const StageKind& key) const {
  if (!pipelines_.known()) return std::nullopt;
  double time = 0, energy = 0, variance = 0;
  int n = 0;
  for (std::size_t d = 0; d < pipelines_.pipelines(); ++d) {
    if (d < disturbed.size() && disturbed[d]) continue;
    const auto t = pipelines_.top_time(d, key);
    const auto e = pipelines_.top_energy(d, key);
    const double error = pipelines_.top_time_error(d, key);
    if (!t || !e || !(error > 0)) return std::nullopt;
    const double speed = pipelines_.speed(d, key) * pace_change(d);
    time += *t / speed, energy += *e / speed, variance += std::pow(error / speed, 2), ++n;
  }
  if (n == 0) return std::nullopt;
  time /= n;
  return ClockMeasurement{time, energy / n, std::sqrt(variance) / n / time};
}

void TurnkeyController::add_variability(const RoundMeasurement& m) {
  // Kept per stage (GPU): each set is one model stage's durations, so chunks of different sizes do
  // not count as noise.
  for (const auto& [key, sets] : m.occurrences) {
    if (key.first < 0 || static_cast<std::size_t>(key.first) >= stage_of_model_.size()) continue;
    for (const auto& durations : sets)
      variability_->estimator.add(stage_of_model_[static_cast<std::size_t>(key.first)], key.second, durations);
  }
  // Iterations per round: one set's durations over the times an iteration runs that (model stage, kind).
  auto first = m.occurrences.find({0, InstructionKind::forward});
  if (first != m.occurrences.end() && !first->second.empty() && !first->second.front().empty() && first_forwards_ > 0)
    iterations_per_round_ =
        std::max(1, static_cast<int>(first->second.front().size() / static_cast<std::size_t>(first_forwards_)));
  noise_sigma_ = variability_->estimator.estimate().max();
}

// What noise alone makes one round's mean iteration time vary by, at least: a critical path's
// instructions (about 2 (microbatches + stages - 1) of them in a pipeline schedule), each with the
// measured sigma, summed over the round's iterations. Real rounds vary more (the path is not
// one, and durations differ), so this only keeps a few rounds that agree by chance from looking
// precise.
double TurnkeyController::round_spread_floor(double iteration_time) const {
  const double path = 2.0 * (shape_.num_microbatches + shape_.num_stages - 1);
  return iteration_time * noise_sigma_ / std::sqrt(path * iterations_per_round_);
}

double TurnkeyController::relative_round_spread() const {
  return baseline_.time() > 0 ? round_spread_floor(baseline_.time()) / baseline_.time() : 0.0;
}

bool TurnkeyController::baseline_precise() const {
  const double half_width = (baseline_.time_estimate().high - baseline_.time_estimate().low) / 2;
  return baseline_.time() > 0 && half_width <= config_.baseline_precision * baseline_.time();
}

void TurnkeyController::observe_warmup(int round, const RoundMeasurement& m) {
  ++warmup_seen_;
  add_variability(m);
  // The first warm-up round carries start-up effects; the others are the baseline, outliers left out.
  if (round > 0 || config_.warmup_rounds <= 1) add_baseline(m);
  if (warmup_seen_ < std::max(config_.warmup_rounds, 1)) return;
  // Outliers left too few rounds, or the baseline is not yet precise enough: go on measuring.
  const int wanted = std::max(config_.warmup_rounds - 1, 1);
  if ((baseline_.rounds() < wanted || !baseline_precise()) &&
      warmup_seen_ < std::max(config_.max_baseline_rounds, config_.warmup_rounds))
    return;
  if (baseline_.empty()) add_baseline(m);
  decide(
      DecisionEvent::baseline,
      fmt::format("all-max: {:.6g} s (95%: {:.6g}-{:.6g}) and {:.6g} J per iteration over {} rounds{}{}; "
                  "blocking power {}",
                  baseline_.time(), baseline_.time_estimate().low, baseline_.time_estimate().high, baseline_.energy(),
                  baseline_.rounds(),
                  baseline_.rejected() > 0 ? fmt::format(" ({} outlying rounds left out)", baseline_.rejected()) : "",
                  baseline_.shifted() > 0
                      ? fmt::format(" after a step in time ({} rounds before it left out)", baseline_.shifted())
                      : "",
                  p_block_ ? fmt::format("{:.4g} W", *p_block_) : "unknown"));
  // The warm-up round the baseline's level began in (0: its first).
  const int level_from =
      baseline_.shifted() > 0 ? round_ - static_cast<int>(baseline_.size()) + baseline_.shifted() : 0;
  baseline_.forget_before_level();
  note_slow_pipelines(level_from);
  auto disturbed = disturbed_pipelines(m);
  if (reused_) {
    decide(DecisionEvent::profile_reused, fmt::format("planning from {} (profile_path exists)", hooks_.profile_source));
    return start_planning(*reused_profile_);
  }
  // The top clock of every scan was measured by the baseline's rounds (from the pipelines that ran as
  // fast as the others); where the baseline has fewer than two of them, by the last round unless the
  // baseline left it out (a disturbance that began within it, too small in one pipeline to mark it
  // disturbed): then the scans measure their top clock first.
  for (std::size_t i = 0; i < operations_.size(); ++i) {
    auto measured = baseline_top_clock(disturbed, operations_[i]);
    if (!measured && last_baseline_round_kept_) measured = clean_instruction(m, disturbed, operations_[i]);
    auto& scan = scans_[i];
    if (measured && scan.next() == shape_.clocks.front()) scan.record(shape_.clocks.front(), *measured);
  }
  phase_ = ControllerPhase::profiling;
  decide(DecisionEvent::profiling,
         fmt::format("{} clocks from {} to {} MHz, coarse step {}, per (model stage, kind) of the {} "
                     "schedule ({} of them)",
                     shape_.clocks.size(), shape_.clocks.front(), shape_.clocks.back(), config_.scan.coarse_step,
                     to_string(shape_.schedule), operations_.size()));
  if (profiling_done()) finish_profiling();
}

// Pipelines that the baseline measured slower than the others by more than the straggler threshold:
// slow since the start (a slow node, or slow GPUs), or since the step in time its rounds begin after
// (`level_from`, a warm-up round; 0: none), so part of the cluster. Said once; the others are paced to
// them once deployed.
void TurnkeyController::note_slow_pipelines(int level_from) {
  if (!pipelines_.known() || pipelines_.pipelines() < 2) return;
  std::vector<double> paces;
  for (std::size_t d = 0; d < pipelines_.pipelines(); ++d) paces.push_back(pipelines_.pace(d));
  for (std::size_t d = 0; d < paces.size(); ++d) {
    const double pace = paces[d] / median_of_others(paces, d);
    if (pace > 1 + config_.detector.threshold)
      decide(DecisionEvent::slow_pipeline_in_baseline,
             fmt::format("pipeline {} ran {:.3f}x the other pipelines' compute-bound time at all-max {}: part of "
                         "the all-max baseline (not a straggler); the others run plans paced to it",
                         d, pace,
                         level_from > 0
                             ? fmt::format("in the baseline's rounds, from warm-up round {} on (after a step in time)",
                                           level_from)
                             : "since the start"));
  }
}

bool TurnkeyController::profiling_done() const {
  return std::all_of(scans_.begin(), scans_.end(), [](const auto& s) { return s.done(); }) &&
         (since_check_.empty() || config_.check_every <= 0 || !pipelines_.known());
}

RoundClocks TurnkeyController::profiling_clocks() {
  issued_.clear();
  checking_ = false;
  const bool scanned = std::all_of(scans_.begin(), scans_.end(), [](const auto& s) { return s.done(); });
  if (config_.check_every > 0 && pipelines_.known() && !since_check_.empty() &&
      (rounds_since_check_ >= config_.check_every || scanned)) {
    checking_ = true;  // an all-max round: the conditions now
    return std::nullopt;
  }
  for (auto& scan : scans_) issued_.push_back(scan.next());
  std::vector<std::vector<int>> stages;
  for (const auto& order : orders_) {
    std::vector<int> slots;
    for (const auto& inst : order) slots.push_back(issued_[scan_index(inst)].value_or(shape_.clocks.front()));
    stages.push_back(std::move(slots));
  }
  std::vector<std::vector<std::vector<int>>> out(static_cast<std::size_t>(shape_.pipelines), stages);
  // A straggler detected while profiling sets the iteration's pace, and its instructions are not the
  // profile's (clean_instruction leaves a disturbed pipeline out): it runs the top clock, and the
  // others' slower clocks cost the time its slowdown leaves them.
  const auto& straggler = detector_.current();
  if (straggler && shape_.pipelines > 1 && straggler->pipeline >= 0 && straggler->pipeline < shape_.pipelines) {
    held_at_top_ = static_cast<std::size_t>(straggler->pipeline);
    for (auto& slots : out[*held_at_top_]) std::fill(slots.begin(), slots.end(), shape_.clocks.front());
  }
  return out;
}

// Clocks are measured again for changed conditions up to three times whatever their number, and after
// that while those asked again stay fewer than the profile's clocks (measured or still to measure): a
// spell's start, a step within it and its end take three, a round or two each, and a cluster that keeps
// changing is profiled as it goes once profiling has taken about twice its rounds.
bool TurnkeyController::may_measure_again(std::size_t clocks) const {
  constexpr int kRedosWhateverTheirSize = 3;
  return profile_redos_ < kRedosWhateverTheirSize || profile_redone_ + clocks <= clocks_planned();
}

// Asks for the rounds' clocks to be measured again, counted against may_measure_again's budget; returns
// how many were asked.
std::size_t TurnkeyController::measure_again(std::initializer_list<const std::vector<ScanClock>*> rounds) {
  std::size_t again = 0;
  for (const auto* round : rounds)
    for (const auto& [scan, clock] : *round) again += scans_[scan].redo(clock) ? 1 : 0;
  profile_redone_ += again;
  ++profile_redos_;
  return again;
}

void TurnkeyController::observe_profiling(const RoundMeasurement& m) {
  ++profiling_rounds_;
  add_variability(m);
  // The pipelines are compared where they ran the same clocks: not in a round that held a straggler
  // at the top clock (the check rounds, all-max, tell whether it recovered).
  if (!held_at_top_ || checking_) observe_straggler(m, paced_ratios(m, false));
  if (checking_) return observe_check(m);
  // A slow pipeline's instructions are not the profile's: measured from the others only, at the
  // baseline's conditions.
  auto disturbed = disturbed_pipelines(m);
  const double c = profile_conditions_ > 0 ? profile_conditions_ : 1.0;
  std::vector<double> off_curve;  // per scan: the time measured over the time its curve predicts
  std::vector<ScanClock> recorded;
  for (std::size_t i = 0; i < operations_.size() && i < issued_.size(); ++i) {
    auto measured = clean_instruction(m, disturbed, operations_[i]);
    if (!issued_[i] || !measured) continue;
    const ClockMeasurement at_baseline{measured->time / c, measured->energy / c, measured->time_error};
    if (auto predicted = scans_[i].predicted_time(*issued_[i]); predicted && *predicted > 0)
      off_curve.push_back(at_baseline.time / *predicted);
    scans_[i].record(*issued_[i], at_baseline);
    since_check_.emplace_back(i, *issued_[i]);
    recorded.emplace_back(i, *issued_[i]);
  }
  issued_.clear();
  ++rounds_since_check_;
  // A slow spell shows as every scan's new clock off its curve at once: the conditions are checked
  // in the next round, not only after check_every rounds (a spell that fits between two checks
  // would leave its clocks measured at the wrong conditions for good).
  // A shorter spell split over two rounds shows less in each, but twice, slower: those rounds'
  // clocks are measured again (the check after them would find the spell over). Real curves bend by
  // about 2% between coarse clocks, once, where the scan first extrapolates, and either way.
  constexpr double kOffCurve = 0.03, kOffCurveTwice = 0.02;
  constexpr std::size_t kFewestScans = 3;  // one scan's curve can bend; all of them at once is the cluster
  std::optional<double> off;
  if (off_curve.size() >= kFewestScans) off = median(off_curve);
  if (off && std::abs(*off - 1) > kOffCurve) {
    rounds_since_check_ = std::max(rounds_since_check_, config_.check_every);
    off_curve_ = off;
  } else if (off && last_off_curve_ && *off > 1 + kOffCurveTwice && *last_off_curve_ > 1 + kOffCurveTwice &&
             may_measure_again(last_recorded_.size() + recorded.size())) {
    const std::size_t again = measure_again({&last_recorded_, &recorded});
    decide(DecisionEvent::profiling_conditions_changed,
           fmt::format("two profiling rounds in a row ran x{:.3f} and x{:.3f} off the clocks' curves (a slow spell "
                       "between two checks): their {} clocks are measured again",
                       *last_off_curve_, *off, again));
    off.reset();
  }
  // A round that asked for a check is the one the check judges; the others must have run on their
  // curves for the change to be placed in it.
  if (!off_curve_) earlier_on_curve_ = earlier_on_curve_ && off && std::abs(*off - 1) <= kOffCurveTwice;
  previous_off_curve_ = std::exchange(last_off_curve_, off);
  previous_recorded_ = std::exchange(last_recorded_, std::move(recorded));
  if (profiling_done()) finish_profiling();
}

// How far the conditions may move between two checks before the clocks measured in between are measured
// again: what they are then off by, against what a plan may miss by (the tolerance) and what two check
// rounds tell apart under the noise (three standard deviations of their difference), at most a percent. A
// check taken in a spell's first iteration read the cluster at x1.0101; the next, after the spell, at
// x1.0000, within a percent: the clocks measured in between, read 1% fast, made the plan 0.38% slower
// than all-max.
double TurnkeyController::recheck_band() const {
  const double round_sigma = relative_round_spread();
  return std::clamp(3 * std::sqrt(2.0) * round_sigma, config_.tolerance, kCheckBand);
}

// A check round while profiling: when the conditions moved since the last one (beyond recheck_band),
// the clocks measured in between are measured again (when the change came is not known),
// and the clocks from now on are taken at the new conditions.
void TurnkeyController::observe_check(const RoundMeasurement& m) {
  checking_ = false;
  ++profiling_checks_;
  rounds_since_check_ = 0;
  last_off_curve_.reset();  // what two rounds around a check show, the check has seen
  const std::optional<double> off_before = std::exchange(previous_off_curve_, std::nullopt);
  const std::optional<double> off_curve = std::exchange(off_curve_, std::nullopt);
  const bool on_curve_before = std::exchange(earlier_on_curve_, true);
  // A recovery it finds measures its clocks again itself; the conditions are then the cluster's as ever.
  const bool recovered = recovered_not_straggling(m);
  const auto disturbed = disturbed_pipelines(m);
  auto each = conditions_like_the_others(m, disturbed);
  std::vector<double> measured;
  for (double c : each)
    if (c > 0) measured.push_back(c);
  if (measured.empty()) return since_check_.clear();
  const double now = median(std::move(measured));
  if (!recovered) join_short_baseline(m, now, disturbed);
  profile_pipeline_conditions_ = std::move(each);
  const double moved = now / profile_conditions_;
  // The change came in the round that ran off its curves the way the check moved, where the rounds
  // before it ran on theirs: only its clocks are measured again.
  const bool in_the_off_round = off_curve && on_curve_before && (*off_curve - 1) * (moved - 1) > 0;
  // A change within a round shows in it in part (a spell ending one iteration before the round does
  // shows a fifth of itself in a round of five), within what reads as on the curves: where the round
  // before the off one leaned the way of the change by a tenth of it, its clocks are measured again too.
  const bool began_before = in_the_off_round && off_before && (*off_before - 1) * (moved - 1) > 0 &&
                            std::abs(*off_before - 1) >= std::abs(moved - 1) / 10;
  const auto& changed = in_the_off_round ? last_recorded_ : since_check_;
  const std::size_t asked = changed.size() + (began_before ? previous_recorded_.size() : 0);
  if (!recovered && std::abs(moved - 1) > recheck_band() && may_measure_again(asked)) {
    const std::size_t again = began_before ? measure_again({&previous_recorded_, &changed}) : measure_again({&changed});
    const std::string which =
        in_the_off_round
            ? fmt::format(
                  "the round before ran x{:.3f} off the clocks' curves{}, the rounds since the last check on "
                  "them: {} {} clocks are measured again",
                  *off_curve,
                  began_before ? fmt::format(" and the one before it x{:.3f}, part of the change", *off_before)
                               : std::string(),
                  began_before ? "their" : "its", again)
            : fmt::format("{} clocks measured since are measured again{}", again,
                          off_curve ? fmt::format(" (checked early: the round before ran x{:.3f} off the clocks' "
                                                  "curves)",
                                                  *off_curve)
                                    : std::string());
    decide(DecisionEvent::profiling_conditions_changed,
           fmt::format("an all-max round measured the cluster at x{:.4f} of the baseline's pace, x{:.4f} before: {}",
                       now, profile_conditions_, which));
  }
  profile_conditions_before_ = std::exchange(profile_conditions_, now);
  since_check_.clear();
  if (profiling_done()) finish_profiling();
}

// A baseline of few rounds that the warm-up's last round left short of its precision (a step in time late
// in the warm-up leaves it the rounds after the step) is known only roughly: 3 rounds at noise 0.018 left it
// 1% wide, and a plan 0.7% slower than all-max passed under it. Profiling's check rounds run all-max: each
// that ran at the baseline's conditions, undisturbed, joins it, as an agreeing probe does once deployed.
void TurnkeyController::join_short_baseline(const RoundMeasurement& m, double conditions,
                                            const std::vector<bool>& disturbed) {
  constexpr std::size_t kShortBaseline = 10;
  if (baseline_.size() >= kShortBaseline || baseline_precise() || std::abs(conditions - 1) > kCheckBand ||
      detector_.current())
    return;
  if (std::any_of(disturbed.begin(), disturbed.end(), [](bool b) { return b; })) return;
  const AllMaxRound round{m.iteration_time, m.energy};
  if (!agree_as_baseline_rounds(round, baseline_.time(), baseline_.energy())) return;
  baseline_.add(round);
  estimate_baseline();
}

void TurnkeyController::finish_profiling() {
  Profile profile;
  profile.source = hooks_.profile_source;
  std::size_t measured = 0;
  auto runs = [&](int stage, InstructionKind kind) {
    return std::binary_search(operations_.begin(), operations_.end(), StageKind{stage, kind});
  };
  for (std::size_t i = 0; i < operations_.size(); ++i) {
    const auto [stage, kind] = operations_[i];
    const auto& scan = scans_[i];
    measured += scan.measured().size();
    // A profile gives a stage's backward whole or as its two parts: where the schedule runs both
    // (DualPipeV's whole backwards), the parts go in and the planner runs a whole one as the two
    // back to back.
    if (kind == InstructionKind::backward && runs(stage, InstructionKind::backward_input) &&
        runs(stage, InstructionKind::backward_weight))
      continue;
    auto rows = config_.interpolate ? scan.interpolated() : scan.settled();
    for (auto it = rows.rbegin(); it != rows.rend(); ++it)
      profile.rows.push_back({stage, kind, it->first, it->second.time, it->second.energy, 0});
  }
  decide(DecisionEvent::profiled,
         fmt::format("{} rounds, {} clocks measured over {} (model stage, kind) (one round per clock would "
                     "take {} rounds)",
                     profiling_rounds_, measured, scans_.size(), shape_.clocks.size()));
  hooks_.profiled(profile);
  start_planning(std::move(profile));
}

void TurnkeyController::start_planning(Profile profile) {
  PlanningInput input;
  input.config.shape() = shape_.shape();
  input.config.p_block = p_block_.value_or(0);
  input.config.cost_model = replans_ > 0 ? CostModelKind::piecewise_linear : config_.cost_model;
  input.config.unit_time = config_.unit_time.value_or(automatic_unit_time(profile));
  if (replans_ > 1) input.config.unit_time /= 2;  // a finer time quantum: steps too small for the coarse one
  planned_profile_ = profile;
  input.profile = std::move(profile);
  input.record_dir = hooks_.record_dir;
  if (input.config.cost_model == CostModelKind::automatic) {
    input.compare_with = CostModelKind::piecewise_linear;
    input.target_deadline = target_deadline_rule();
    // The hull picks the clocks that measured luckiest, the best of a few neighbours each noisy by about
    // the profile's median error, so its plans cost about that much less than they will run. A wider
    // margin keeps real bends out: an A40's backward runs 1-2% cheaper 30 MHz below a coarse point than
    // the fit says, and twice the error would plan 8-stage GPipe on the fit (75% of the ideal, 84% here).
    input.compare_margin = median_time_error();
  }
  phase_ = ControllerPhase::planning;
  decide(DecisionEvent::planning,
         fmt::format("on a worker thread: unit time {} s, blocking power {:.4g} W, cost model {}{}",
                     input.config.unit_time, input.config.p_block, to_string(input.config.cost_model),
                     input.compare_with
                         ? fmt::format(" (and {} where it differs: its frontier is kept where its plan at the target "
                                       "costs {:.2f}% less, the profile's median measurement error)",
                                       to_string(*input.compare_with), 100 * input.compare_margin)
                         : std::string()));
  planner_.start(std::move(input), hooks_.wake);
}

void TurnkeyController::plan_ready() {
  try {
    plans_ = planner_.take();
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("Perseus could not plan: {}", e.what()));
  }
  // No frontier (the solver stopped before its first point): plan again with the piecewise-linear
  // cost model (exact at the measured points), then with a finer time quantum, before settling
  // for all-max.
  constexpr int kMostReplans = 2;
  if (plans_->record.points.empty() && plans_->comparison && replans_ == 0)
    replans_ = 1;  // the piecewise-linear model was planned with already: next, a finer quantum
  if (plans_->record.points.empty() && replans_ < kMostReplans && planned_profile_) {
    ++replans_;
    decide(DecisionEvent::no_frontier,
           fmt::format("planning found no frontier point ({}); planning again {}",
                       plans_->record.stop_reason.empty() ? "no reason given" : plans_->record.stop_reason,
                       replans_ == 1 ? "with the piecewise-linear cost model" : "with half the time quantum"));
    plans_.reset();
    return start_planning(*planned_profile_);
  }
  // Before deploying, the clocks the target plan runs where the profile knows them least: those only
  // interpolated (`refine_passes`), and under noise those one round measured too roughly (the planner
  // picks the clocks that measured luckiest, and a plan built on them runs slower than predicted).
  const bool refining = refine_passes_ < config_.refine_passes && !reused_ && config_.interpolate;
  const bool confirming = confirm_passes_ < config_.confirm_passes && !reused_;
  if (refining || confirming) {
    const ChosenPlan wanted = choose_plan(*plans_, target_deadline());
    if (const std::size_t asked =
            refining ? ask_scans(wanted, [](ClockScan& scan, int clock) { return scan.request(clock); }) : 0) {
      ++refine_passes_;
      decide(DecisionEvent::refining,
             fmt::format("the plan runs {} clocks that were interpolated; measuring them (pass {} of at "
                         "most {})",
                         asked, refine_passes_, config_.refine_passes));
      return profile_again();
    }
    const int top = shape_.clocks.front();
    const auto known_roughly = [&](ClockScan& scan, int clock) {
      const auto known = scan.measured().find(clock);
      return clock != top && known != scan.measured().end() && known->second.time_error > config_.confirm_error &&
             scan.confirm(clock);
    };
    if (const std::size_t asked = confirming ? ask_scans(wanted, known_roughly) : 0) {
      ++confirm_passes_;
      decide(DecisionEvent::refining,
             fmt::format("the plan runs {} clocks whose time one measurement knows only to within more than {:.2g}% "
                         "under the noise; measuring them once more (pass {} of at most {})",
                         asked, 100 * config_.confirm_error, confirm_passes_, config_.confirm_passes));
      return profile_again();
    }
  }
  deploy_plan();
}

// The median over the measured clocks of their time's relative standard error (0 where none is known).
double TurnkeyController::median_time_error() const {
  std::vector<double> errors;
  for (const auto& scan : scans_)
    for (const auto& [clock, measurement] : scan.measured())
      if (measurement.time_error > 0) errors.push_back(measurement.time_error);
  if (errors.empty()) return 0;
  const auto middle = errors.begin() + static_cast<long>(errors.size() / 2);
  std::nth_element(errors.begin(), middle, errors.end());
  return *middle;
}

// Asks each slot's scan for the clock `plan` runs there (`ask` says whether the scan took it);
// returns how many it took.
std::size_t TurnkeyController::ask_scans(const ChosenPlan& plan, const std::function<bool(ClockScan&, int)>& ask) {
  std::size_t asked = 0;
  for (int s = 0; s < shape_.num_stages; ++s) {
    const auto& order = orders_[static_cast<std::size_t>(s)];
    for (std::size_t slot = 0; slot < order.size(); ++slot)
      if (ask(scans_[scan_index(order[slot])], plan.frequencies[static_cast<std::size_t>(s)][slot])) ++asked;
  }
  return asked;
}

// Back to profiling for the clocks asked for; planned again once they are measured.
void TurnkeyController::profile_again() {
  plans_.reset();
  phase_ = ControllerPhase::profiling;
}

void TurnkeyController::deploy_plan() {
  // Measured iteration time over emulated all-max time: what the model leaves out (the gradient
  // synchronisation, launch gaps), so that predictions compare with measurements.
  scale_ = plans_->all_max().time > 0 ? baseline_.time() / plans_->all_max().time : 1;
  std::string compared;
  if (const auto& c = plans_->comparison)
    compared = fmt::format(
        " ({}'s frontier kept: the plan at the target costs {:.6g} J per pipeline with it, "
        "{:.6g} J with {}'s (margin {:.2f}%), whose cost model was {})",
        to_string(c->kept), c->kept_cost, c->other_cost, to_string(c->other), 100 * c->margin,
        describe_cost_models(c->other_cost_models));
  decide(DecisionEvent::planned,
         fmt::format("{} frontier points in {:.2f} s; cost model {}{}", plans_->record.points.size(), plans_->seconds,
                     describe_cost_models(plans_->cost_models), compared));
  const double deadline = target_deadline();
  choose(
      DecisionEvent::deployed,
      [deadline](const ChoiceContext& c) {
        const NoiseAwareOptions options = target_options(c);
        const AllowedChoice chosen = plan_choice::choose_within_allowance(*c.plans, deadline, c.cautious(), options);
        TargetChoice out{chosen.plan};
        if (chosen.widened)
          out.widened = fmt::format(
              " with {:.2f}% of all-max's time allowed for the noise{} (within {:.2g}% the plan would save "
              "{:.2f}% of the noise-free {:.2f}%; this one {:.2f}%)",
              100 * chosen.allowance, options.clock_latency > 0 ? " and the clock latency" : "",
              100 * options.max_allowance, 100 * chosen.narrow_saving, 100 * chosen.noise_free_saving,
              100 * chosen.saving);
        // How much one pipeline's all-max iteration varies under the measured noise: how much later
        // the slowest of several pipelines ends than any one (the reference's stretch under changed paces).
        const auto top = expected_time_and_energy(*c.plans, all_max(*c.plans).frequencies, c.variability, {});
        out.top_spread = top.time > 0 ? top.time_stddev / top.time : 0;
        return out;
      },
      [this](const TargetChoice&) { deployed(); });
}

}  // namespace perseus::online
