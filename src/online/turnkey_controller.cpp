#include "perseus/online/turnkey_controller.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <stdexcept>
#include <utility>

#include "perseus/emulate/pipeline_walk.hpp"
#include "perseus/online/background_task.hpp"
#include "plan_choice_adapter.hpp"
#include "turnkey_choice.hpp"

namespace perseus::online {

struct VariabilityState {
  explicit VariabilityState(int stages) : estimator(stages) {}
  plan_choice::VariabilityEstimator estimator;
};

struct PendingChoices {
  struct Request {
    DecisionEvent why;
    std::function<choice::TargetChoice(const choice::ChoiceContext&)> target;
    std::function<void(const choice::TargetChoice&)> chosen;
  };
  BackgroundTask<choice::ChoiceResult> task;
  std::optional<Request> running;
  std::deque<Request> queued;
  // Calls from outside (a straggler told, a power budget's pace) that came while a choice ran:
  // made once it is taken, so that they act on its plans, as they would have without the thread.
  std::deque<std::function<void()>> deferred;
};

namespace {

// The median of conditions[o] / paces[o] (the cluster's conditions as pipeline o had them, over its GPUs'
// change of pace) over the pipelines whose conditions are known and that `left_out` does not name; none
// where no pipeline is left.
template <class LeftOut>
std::optional<double> median_over_paces(const std::vector<double>& conditions, const std::vector<double>& paces,
                                        LeftOut left_out) {
  std::vector<double> kept;
  for (std::size_t o = 0; o < conditions.size() && o < paces.size(); ++o)
    if (!left_out(o) && conditions[o] > 0 && paces[o] > 0) kept.push_back(conditions[o] / paces[o]);
  if (kept.empty()) return std::nullopt;
  return median(std::move(kept));
}

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

using choice::Assignment;
using choice::ChoiceContext;
using choice::TargetChoice;

// The target plan anew for the target with the miss to spare, under the measured noise.
std::function<TargetChoice(const ChoiceContext&)> target_for(double deadline) {
  return [deadline](const ChoiceContext& c) {
    return TargetChoice{plan_choice::choose_plan_under_noise(*c.plans, deadline, c.cautious(), target_options(c))};
  };
}

// Whether conditions at `relative` times the others' hold a change of `factor` already: nearer it than
// none.
bool holds_change(double relative, double factor) { return std::abs(relative - factor) < std::abs(relative - 1); }

constexpr double kCautionStep = 1.5;  // each step-up judges plans under this much more noise
// A check round while profiling runs every instruction at the top clock: a move of the cluster's
// conditions by more than this is no noise of it. The clocks measured before it are measured again,
// and a plan deployed after it starts at its conditions.
constexpr double kCheckBand = 0.01;
// Rounds on a plan that judge it: enough for a noisy cluster's evidence, few enough to follow a drift.
constexpr std::size_t kJudgedRounds = 40;

// A pace from the rounds in a row that showed it, but the first (which may have run the old pace for part
// of it), unless it is the only one.
double pace_from_rounds(const std::vector<double>& rounds) {
  return median(std::vector<double>(rounds.size() > 1 ? rounds.begin() + 1 : rounds.begin(), rounds.end()));
}

}  // namespace

const char* to_string(ControllerPhase phase) {
  switch (phase) {
    case ControllerPhase::warmup:
      return "warmup";
    case ControllerPhase::profiling:
      return "profiling";
    case ControllerPhase::planning:
      return "planning";
    case ControllerPhase::deployed:
      return "deployed";
  }
  return "?";
}

TurnkeyController::TurnkeyController(ControllerConfig config, JobShape shape, std::optional<Profile> reused,
                                     ControllerHooks hooks)
    : config_(std::move(config)),
      shape_(std::move(shape)),
      hooks_(std::move(hooks)),
      reused_profile_(std::move(reused)),
      retry_(config_.retry_after, config_.max_retry_after),
      report_(static_cast<std::size_t>(std::max(config_.report_rounds, 1))),
      detector_(config_.detector),
      latency_(config_.clock_latency.value_or(0)) {
  if (shape_.num_stages < 1 || shape_.num_microbatches < 1 || shape_.pipelines < 1)
    throw std::invalid_argument("the job needs at least one stage, microbatch and pipeline");
  if (shape_.clocks.empty()) throw std::invalid_argument("no clock to run");
  reused_ = reused_profile_.has_value();
  try {
    orders_ = shape_.stage_orders();
  } catch (const std::exception& e) {
    throw std::invalid_argument(e.what());
  }
  stage_of_model_.assign(static_cast<std::size_t>(shape_.num_model_stages()), 0);
  for (const auto& order : orders_)
    for (const auto& inst : order) {
      const int k = model_stage(inst, shape_.num_stages);
      stage_of_model_.at(static_cast<std::size_t>(k)) = inst.stage;
      operations_.emplace_back(k, inst.kind);
      if (k == 0 && inst.kind == InstructionKind::forward) ++first_forwards_;
    }
  std::sort(operations_.begin(), operations_.end());
  operations_.erase(std::unique(operations_.begin(), operations_.end()), operations_.end());
  for (std::size_t i = 0; i < operations_.size(); ++i) scans_.emplace_back(shape_.clocks, config_.scan);
  pace_change_.assign(static_cast<std::size_t>(shape_.pipelines), 1.0);
  fast_rounds_.assign(static_cast<std::size_t>(shape_.pipelines), {});
  slow_rounds_.assign(static_cast<std::size_t>(shape_.pipelines), {});
  variability_ = std::make_unique<VariabilityState>(shape_.num_stages);
  choices_ = std::make_unique<PendingChoices>();
}

TurnkeyController::~TurnkeyController() = default;

std::vector<std::array<double, 2>> TurnkeyController::variability() const {
  return variability_->estimator.estimate().sigma;
}

bool TurnkeyController::choice_pending() const { return choices_->running.has_value(); }

bool TurnkeyController::defer_while_choosing(std::function<void()> call) {
  if (!choice_pending()) return false;
  choices_->deferred.push_back(std::move(call));
  return true;
}

bool TurnkeyController::settle() {
  for (;;) {
    if (phase_ == ControllerPhase::planning && !choice_pending() && planner_.ready()) {
      plan_ready();
    } else if (choices_->task.ready()) {
      take_choice();
    } else if (!choice_pending() && !choices_->deferred.empty()) {
      auto call = std::move(choices_->deferred.front());
      choices_->deferred.pop_front();
      call();
    } else {
      return choice_pending();
    }
  }
}

bool TurnkeyController::ready() {
  bool choosing = false;
  try {
    choosing = settle();
  } catch (...) {
    // Planning or a choice failed: next_round() says so (this only says that it can answer).
    failure_ = std::current_exception();
    return true;
  }
  if (!config_.wait_for_plan) return true;
  // Still planning after settling, whether or not the planner finished since settle looked (asking it
  // again here would let a round run at all-max whenever it finished in between).
  return !choosing && phase_ != ControllerPhase::planning;
}

bool TurnkeyController::wants_occurrences() const {
  return phase_ == ControllerPhase::warmup || phase_ == ControllerPhase::profiling;
}

std::size_t TurnkeyController::clocks_measured() const {
  std::size_t n = 0;
  for (const auto& scan : scans_) n += scan.measured().size();
  return reused_ ? 0 : n;
}

std::size_t TurnkeyController::clocks_planned() const {
  std::size_t n = 0;
  for (const auto& scan : scans_) n += scan.planned();
  return reused_ ? 0 : n;
}

RoundClocks TurnkeyController::next_round() {
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
  settle();
  issued_on_ = plans_taken_;
  probing_ = false;
  ran_plan_ = false;
  held_at_top_.reset();  // only profiling holds a pipeline at the top clock
  switch (phase_) {
    case ControllerPhase::profiling:
      return profiling_clocks();
    case ControllerPhase::deployed:
      // A short all-max probe now and then: is the baseline still what it was? (A probe that
      // disagreed is repeated at once, but not while a straggler is followed: its rounds are not the
      // baseline's.) While a straggler is followed too, every probe_every rounds and once to measure one
      // whose plan nothing calibrates: the paced pipelines' plans and the straggler's may run nothing at
      // the top clock, and their calibrations, carried from plan to plan, drift (a paced pipeline's
      // conditions read 0.5% slow after 50 rounds, the reference with them). Not while a power budget
      // holds them.
      if (config_.probe_every > 0 && !hold_probes_) {
        const bool straggler = straggler_is_a_change();
        const bool wanted = probe_to_judge_ || straggler_wants_probe() ||
                            (!straggler && (rounds_since_probe_ >= config_.probe_every || !probe_samples_.empty()));
        straggler_periodic_probe_ = !wanted && straggler && straggler_rounds_since_probe_ >= config_.probe_every;
        if (wanted || straggler_periodic_probe_) {
          if (straggler) straggler_probed_ = straggler_changes_;
          probing_ = true;
          return std::nullopt;
        }
      }
      ran_plan_ = true;
      return plan_clocks();
    default:
      return std::nullopt;
  }
}

void TurnkeyController::observe(const RoundMeasurement& m) {
  int round = round_++;
  if (phase_ == ControllerPhase::deployed) {
    clock_changes_ += m.clock_changes;
    clocks_late_ += m.clocks_late;
  }
  last_round_on_plans_ = phase_ == ControllerPhase::deployed && ran_plan_;
  last_pipeline_time_ = m.pipeline_time;
  last_pipeline_energy_ = m.pipeline_energy;
  switch (phase_) {
    case ControllerPhase::warmup:
      return observe_warmup(round, m);
    case ControllerPhase::profiling:
      return observe_profiling(m);
    // Top-clock rounds while planning are not added to the baseline: after a restart the replayed
    // rounds of this phase may have been deployed ones.
    case ControllerPhase::planning:
      return;
    case ControllerPhase::deployed:
      if (probing_) return observe_probe(m);
      // A round that ran other clocks than the plans (one observed without asking, as a restarted
      // server replays) says nothing about them.
      if (!ran_plan_) return;
      // Nor does one that ran the plans before a choice was taken, or while one runs: it counts for
      // what training got, and the plans are judged once the choice is in place.
      if (issued_on_ != plans_taken_ || choice_pending()) {
        count_round_since_probe();
        return remember(m);
      }
      return observe_deployed(m);
  }
}

void TurnkeyController::set_straggler(const std::optional<StragglerTold>& told) {
  if (!told) {
    if (told_straggler_)
      decide(DecisionEvent::straggler_cleared, "the API cleared the straggler"), ++straggler_changes_;
    told_straggler_.reset();
  } else {
    told_straggler_ = *told;
    ++straggler_changes_;
    decide(DecisionEvent::straggler_told,
           told->slowdown ? fmt::format("the API says iterations take {}x the all-max time", *told->slowdown)
                          : fmt::format("the API says iterations take {} s", told->iteration_time.value_or(0)));
  }
  // Shown at once; the plans follow once chosen (after a choice already running), and the ranks get
  // them with the next round's clocks after that.
  if (phase_ == ControllerPhase::deployed || choice_pending()) {
    if (told || !detector_.current()) straggler_ = followed_straggler();
    assign_plans(told ? DecisionEvent::straggler_api : DecisionEvent::straggler_cleared_api);
  }
}

double TurnkeyController::target_time() const {
  return config_.deadline ? *config_.deadline : config_.slowdown * baseline_.time();
}

// The target in the emulator's time, from all-max's emulated time (the measured all-max time is the
// emulated all-max time there, exactly: a measurement a few nanoseconds short must not rule out every
// plan). It holds copies of what it reads, so that the planner's thread may call it.
std::function<double(double)> TurnkeyController::target_deadline_rule() const {
  return [deadline = config_.deadline, slowdown = config_.slowdown, measured = baseline_.time()](double all_max) {
    const double scale = all_max > 0 ? measured / all_max : 1;
    return deadline ? *deadline / scale : slowdown * all_max;
  };
}

double TurnkeyController::target_deadline() const { return target_deadline_rule()(plans_->all_max().time); }

void TurnkeyController::decide(DecisionEvent event, const std::string& detail) {
  decisions_.push_back({round_, event, detail});
  hooks_.decided(decisions_.back());
}

std::size_t TurnkeyController::scan_index(const StageKind& operation) const {
  auto it = std::lower_bound(operations_.begin(), operations_.end(), operation);
  return static_cast<std::size_t>(it - operations_.begin());
}

std::size_t TurnkeyController::scan_index(const Instruction& inst) const {
  return scan_index(StageKind{model_stage(inst, shape_.num_stages), inst.kind});
}

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

void TurnkeyController::count_round_since_probe() {
  ++rounds_since_probe_;
  straggler_rounds_since_probe_ = straggler_is_a_change() ? straggler_rounds_since_probe_ + 1 : 0;
}

// A followed straggler on a plan that runs nothing at the top clock and that nothing calibrated
// (detected before its plans ran, while profiling; or given the plan as it was detected, before its
// slowdown settled, the plan before's calibration carried over) has its pace read against the others'
// plans, whose errors under noise differ from its plan's (a target plan, many paths near its longest,
// ends later under noise than one with slack): the reference stood 0.7% above the truth and hid a plan
// 0.65% slower than all-max. So does any other pipeline whose plan runs nothing at the top clock on a
// calibration carried from another plan (one that recovered beside the straggler onto a new plan
// carried its paced plan's, 0.6% off, and the reported saving with it). One all-max round, once the
// plans ran a round, measures them at the top clock.
bool TurnkeyController::straggler_wants_probe() const {
  if (!straggler_is_a_change() || straggler_->told || !straggler_->pipeline || detector_.suspects()) return false;
  if (straggler_probed_ == straggler_changes_ || rounds_on_plan_ < 1) return false;
  const auto s = static_cast<std::size_t>(*straggler_->pipeline);
  for (std::size_t d = 0; d < calibration_.size(); ++d) {
    const Calibration& cal = calibration_[d];
    if (cal.plan_changed) continue;
    if (d == s ? !cal.per_ratio || cal.carried : cal.carried) return true;
  }
  return false;
}

// Per pipeline: its compute-bound time this round over what it is expected to take, in units of
// its own baseline pace (GPUs of different speeds are no straggler). `on_plans`: each pipeline ran
// its plan (expected: the plan's time); otherwise all ran the same clocks (expected: the same).
std::vector<double> TurnkeyController::paced_ratios(const RoundMeasurement& m, bool on_plans) const {
  std::vector<double> out(m.pipeline_time.size(), 1.0);
  for (std::size_t d = 0; d < out.size(); ++d) {
    double expected = (pipelines_.known() ? pipelines_.pace(d) : 1.0) * pace_change(d);
    if (on_plans) expected = d < predicted_.size() ? predicted_[d] : 0;
    out[d] = expected > 0 && m.pipeline_time[d] > 0 ? m.pipeline_time[d] / expected : 1.0;
  }
  return out;
}

// Per pipeline: whether its compute-bound time this round, in units of its baseline pace, is above
// the median of the others' by more than the straggler threshold (all pipelines run the same clocks
// in these rounds).
std::vector<bool> TurnkeyController::disturbed_pipelines(const RoundMeasurement& m) const {
  const auto ratios = paced_ratios(m, false);
  std::vector<bool> out(ratios.size(), false);
  // A pipeline held at the top clock this round ran other clocks: it is compared with nobody, and
  // nobody with it (its instructions are left out anyway).
  const bool held = held_at_top_ && *held_at_top_ < out.size();
  if (held) out[*held_at_top_] = true;
  if (ratios.size() - (held ? 1 : 0) < 2) return out;
  for (std::size_t d = 0; d < out.size(); ++d) {
    if (held && d == *held_at_top_) continue;
    const double ref = median_of_others(ratios, d, held ? held_at_top_ : std::nullopt);
    out[d] = ref > 0 && ratios[d] > ref * (1 + config_.detector.threshold);
  }
  return out;
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

// Pipeline d's pace (its baseline pace, as changed since) over the median of the others' (but
// `also`).
double TurnkeyController::relative_pace(std::size_t d, std::optional<std::size_t> also) const {
  std::vector<double> paces;
  for (std::size_t e = 0; e < pipelines_.pipelines() && e < pace_change_.size(); ++e)
    paces.push_back(pipelines_.pace(e) * pace_change_[e]);
  const double others = median_of_others(paces, d, also);
  return others <= 0 || d >= paces.size() ? 1.0 : paces[d] / others;
}

// Detection: each pipeline's compute-bound time, in units of its baseline pace, against the others'.
// A pipeline slow in the baseline that now runs measurably faster than it was expected to is
// recovering (follow_baseline_changes), not leaving the others behind: to the detector it runs as
// expected, or no faster than the others, or with two pipelines the other, running as predicted,
// would look a straggler. Returns whether the verdict changed.
bool TurnkeyController::observe_straggler(const RoundMeasurement& m, std::vector<double> ratios) {
  const double threshold = config_.detector.threshold;
  const double half = threshold / 2;
  if (pipelines_.known() && ratios.size() > 1)
    for (std::size_t d = 0; d < ratios.size(); ++d) {
      if (relative_pace(d) <= 1 + half) continue;  // not slow in the baseline
      // Its GPUs' conditions when an all-max round last measured them, before it sped up, where its pace
      // is still the baseline's: the cluster's then (a drift moves every pipeline's; at the baseline's,
      // 1.0 read a cluster 6% slower as the other pipeline straggling). Not the others' now: one of them
      // may have slowed unseen.
      const bool as_in_baseline = pace_change(d) == 1.0 && d < all_max_conditions_.size();
      double cluster = as_in_baseline && all_max_conditions_[d] > 0 ? all_max_conditions_[d] : 1.0;
      // That round already ran it faster than the baseline by more than half the threshold, the others as
      // in the baseline: it sped up by then, and the others' conditions then are the cluster's (its own read
      // 0.895 where the cluster ran at 1.0: the other pipeline, on its plan as predicted, was followed as a
      // straggler 1.12x slow, and the job ran 12% slower than all-max for good).
      if (as_in_baseline && cluster < 1 - half && all_max_conditions_.size() == ratios.size()) {
        std::vector<double> others;
        for (std::size_t o = 0; o < ratios.size(); ++o)
          if (o != d && all_max_conditions_[o] > 0) others.push_back(all_max_conditions_[o] / pace_change(o));
        if (!others.empty()) {
          const double theirs = median(std::move(others));
          if (std::abs(theirs - 1) <= half) cluster = theirs;
        }
      }
      if (ratios[d] >= cluster * (1 - half)) continue;
      ratios[d] = std::max(ratios[d], std::min(cluster, median_of_others(ratios, d)));
    }
  bool before = detector_.current().has_value();
  if (!detector_.observe(ratios)) return false;
  followed_ratios_.clear();
  ++straggler_changes_;
  pace_miss_ = 1;  // measured on the straggler before
  lead_without_allowance_ = false;
  if (told_straggler_) return false;
  const auto& now = detector_.current();
  if (now) {
    decide(before ? DecisionEvent::straggler_changed : DecisionEvent::straggler_detected,
           fmt::format("pipeline {} runs {:.3f}x slower than the others ({:.6g} s compute-bound){}", now->pipeline,
                       now->slowdown, m.pipeline_time[static_cast<std::size_t>(now->pipeline)],
                       phase_ == ControllerPhase::deployed ? "" : fmt::format(" while {}", to_string(phase_))));
  } else {
    decide(DecisionEvent::straggler_recovered, "every pipeline is back within the threshold");
  }
  return true;
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

// Each pipeline's conditions in an all-max round, where it ran like the others (0: disturbed, a detected
// straggler, or not measured); their median is the cluster's. A straggler detected is no measure of them
// even where noise brings it within the threshold this round (with two pipelines the median is the
// mean: half its slowdown read as the cluster's, then as its conditions once deployed).
std::vector<double> TurnkeyController::conditions_like_the_others(const RoundMeasurement& m,
                                                                  const std::vector<bool>& disturbed) const {
  const auto& straggler = detector_.current();
  std::vector<double> c(static_cast<std::size_t>(shape_.pipelines), 0.0);
  for (std::size_t d = 0; d < c.size(); ++d) {
    if (d < disturbed.size() && disturbed[d]) continue;
    if (straggler && static_cast<std::size_t>(straggler->pipeline) == d) continue;
    c[d] = all_max_conditions(m, d).value_or(0.0);
  }
  return c;
}

// Pipeline d's conditions in an all-max round, its change of pace since the baseline taken out.
std::optional<double> TurnkeyController::all_max_conditions(const RoundMeasurement& m, std::size_t d) const {
  const auto c = pipelines_.conditions(m, d, orders_, shape_.num_stages, nullptr, shape_.clocks.front());
  if (!c) return std::nullopt;
  return *c / pace_change(d);
}

// A straggler detected while profiling next to pipelines slow in the baseline may be those pipelines
// recovering: with two pipelines the ratios cannot tell the two apart (either way the others now run
// at its pace), but an all-max round can: a straggler runs slower than in the baseline, a recovered
// pipeline faster. Where the one said to straggle runs as in the baseline (within half the threshold)
// and every other, slow in the baseline, faster than then by more than half the threshold, those
// recovered: their new paces are taken in, the verdict is dropped, and the clocks measured since the
// last check (on their instructions, at their old pace) are measured again. So too with no verdict yet,
// where the pipelines not slow in the baseline run as then: a pipeline that set the baseline's pace and
// recovered moves the iteration's time as the cluster's conditions would, and taken for them (the
// cluster at x0.79), the other pipeline, at 1.0, read 1.27x slow on the plans, and the loop swung between
// following it and the recovery, 22% slower than all-max for good. Returns whether it did.
bool TurnkeyController::recovered_not_straggling(const RoundMeasurement& m) {
  const auto& straggler = detector_.current();
  if (told_straggler_ || !pipelines_.known()) return false;
  const double half = config_.detector.threshold / 2;
  // The pipelines that set the measure: the one said to straggle, or, with no verdict, those not slow
  // in the baseline (their median).
  std::optional<double> own;
  if (straggler) {
    own = all_max_conditions(m, static_cast<std::size_t>(straggler->pipeline));
  } else {
    std::vector<double> as_then;
    for (std::size_t d = 0; d < static_cast<std::size_t>(shape_.pipelines); ++d) {
      if (relative_pace(d) > 1 + half) continue;
      const auto now = all_max_conditions(m, d);
      if (!now || std::abs(*now - 1) > half) return false;
      as_then.push_back(*now);
    }
    if (!as_then.empty()) own = median(std::move(as_then));
  }
  if (!own || std::abs(*own - 1) > half) return false;
  struct Recovered {
    std::size_t pipeline;
    double factor, pace;  // its time now over then, against the straggler's; its pace in the baseline
  };
  std::vector<Recovered> recovered;
  for (std::size_t d = 0; d < static_cast<std::size_t>(shape_.pipelines); ++d) {
    if (straggler && d == static_cast<std::size_t>(straggler->pipeline)) continue;
    const double pace = relative_pace(d);
    if (!straggler && pace <= 1 + half) continue;
    const auto now = all_max_conditions(m, d);
    if (!now || *now >= 1 - half || pace <= 1 + half) return false;
    recovered.push_back({d, *now / *own, pace});
  }
  if (recovered.empty()) return false;
  const std::string as_in_baseline =
      straggler ? fmt::format("pipeline {}, said to straggle, runs as in the baseline", straggler->pipeline)
                : std::string("the others run as in the baseline");
  for (const auto& [d, factor, pace] : recovered) {
    // Not faster than the others by more than the threshold, which no speed difference of GPUs comes near.
    const double now = std::max(factor, (1 - config_.detector.threshold) / pace);
    take_pace_change(d, now);
    decide(DecisionEvent::slow_pipeline_recovered,
           fmt::format("pipeline {}, {:.3f}x the other pipelines' time at its pace before, runs at {:.3f}x now (an "
                       "all-max round while profiling: {})",
                       d, pace, pace * now, as_in_baseline));
  }
  detector_.reset();
  followed_ratios_.clear();
  if (may_measure_again(since_check_.size())) measure_again({&since_check_});
  return true;
}

// A check round while profiling: when the conditions moved since the last one (by more than a
// percent), the clocks measured in between are measured again (when the change came is not known),
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
  if (!recovered && std::abs(moved - 1) > kCheckBand && may_measure_again(asked)) {
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

void TurnkeyController::deployed() {
  plan_reason_ = plans_->record.points.empty()
                     ? fmt::format("planning found no frontier ({}): all-max",
                                   plans_->record.stop_reason.empty() ? "no reason given" : plans_->record.stop_reason)
                 : target_plan_->is_all_max() ? "no plan but all-max is predicted to meet the target"
                                              : "the cheapest plan predicted to meet the target" + target_widened_;
  if (plans_->record.points.empty())
    decide(DecisionEvent::no_frontier,
           fmt::format("still no frontier point after planning {} times: running all-max", replans_ + 1));
  if (config_.deadline && *config_.deadline < baseline_.time()) {
    plan_reason_ = "the deadline is below the measured all-max time: the fastest plan";
    decide(DecisionEvent::deadline_below_all_max,
           fmt::format("the deadline {} s is below the measured all-max time {:.6g} s: "
                       "running the fastest plan",
                       *config_.deadline, baseline_.time()));
  }
  phase_ = ControllerPhase::deployed;
}

const ChosenPlan* TurnkeyController::plan_of(std::size_t d) const {
  if (!target_plan_ || d >= pace_of_.size()) return nullptr;
  const int i = pace_of_[d];
  if (i == Assignment::kLeadPlan && lead_plan_) return &*lead_plan_;
  return i >= 0 && static_cast<std::size_t>(i) < paced_plans_.size() ? &paced_plans_[static_cast<std::size_t>(i)]
                                                                     : &*target_plan_;
}

std::string TurnkeyController::describe(const ChosenPlan& plan) const {
  return fmt::format("{} (predicted {:.6g} s, {:.6g} J per pipeline)", plan.label(), plan.time * scale_, plan.energy);
}

// Per pipeline, per (model stage, kind): its GPUs' speed now (a factor on time and energy): the
// baseline's, times how much its pace changed since, times the slowdown of `straggling` where it
// is a detected straggler (not one of the baseline, nor one told) on this pipeline.
std::map<StageKind, double> TurnkeyController::speeds_of(std::size_t d,
                                                         const std::optional<ActiveStraggler>& straggling) const {
  std::map<StageKind, double> out;
  double factor = pace_change(d);
  if (straggling && straggling->pipeline && !straggling->in_baseline && !straggling->told &&
      static_cast<std::size_t>(*straggling->pipeline) == d)
    factor *= straggling->slowdown;
  for (const auto& key : operations_) out[key] = (pipelines_.known() ? pipelines_.speed(d, key) : 1.0) * factor;
  return out;
}

// What a choice asked for now needs: the straggler to follow (told first, then detected) and the
// pipelines' speeds, copied, so that the choice runs on its own thread.
std::optional<ActiveStraggler> TurnkeyController::followed_straggler() const {
  if (told_straggler_) {
    ActiveStraggler s;
    s.told = true;
    s.pipeline = told_straggler_->pipeline;
    double iteration = told_straggler_->slowdown ? *told_straggler_->slowdown * baseline_.time()
                                                 : told_straggler_->iteration_time.value_or(baseline_.time());
    s.slowdown = iteration / baseline_.time();
    s.compute_time = iteration / scale_;
    return s;
  }
  if (!detector_.current()) return std::nullopt;
  ActiveStraggler s;
  s.pipeline = detector_.current()->pipeline;
  s.slowdown = detector_.current()->slowdown;
  return s;
}

ChoiceContext TurnkeyController::choice_context() const {
  ChoiceContext c;
  c.plans = &*plans_;
  c.straggler = followed_straggler();
  const auto D = static_cast<std::size_t>(shape_.pipelines);
  for (std::size_t d = 0; d < D; ++d) {
    c.speeds.push_back(speeds_of(d, std::nullopt));
    c.straggling.push_back(speeds_of(d, c.straggler));
    c.paces.push_back(pace_now(d));
  }
  c.pipelines_known = pipelines_.known();
  c.latency = latency_;
  c.threshold = config_.detector.threshold;
  c.variability = variability_->estimator.estimate();
  c.caution = caution_;
  c.deadline = target_deadline();
  c.tolerance = config_.tolerance;
  c.lead_deadline = c.deadline / miss_;
  c.pace_miss = pace_miss_;
  c.lead_without_allowance = lead_without_allowance_;
  if (pace_) c.budget_pace = *pace_ / scale_;
  c.unpaced = unpaced_behind_;
  c.target = target_plan_;
  return c;
}

void TurnkeyController::assign_plans(DecisionEvent why) { choose(why); }

void TurnkeyController::choose(DecisionEvent why, TargetChooser target,
                               std::function<void(const TargetChoice&)> chosen) {
  choices_->queued.push_back({why, std::move(target), std::move(chosen)});
  if (!choice_pending()) start_next_choice();
}

void TurnkeyController::start_next_choice() {
  if (choices_->queued.empty()) return;
  auto& pending = *choices_;
  pending.running = std::move(pending.queued.front());
  pending.queued.pop_front();
  // Copied now: the context as this round left it (a queued choice sees the one before it taken).
  pending.task.start(
      [context = choice_context(), target = pending.running->target, before = hooks_.choosing]() mutable {
        before();
        choice::ChoiceResult out;
        if (target) {
          out.target = target(context);
          context.caution *= out.target->caution_factor;
        }
        out.assignment = choice::assign(context, out.target ? out.target->plan : *context.target);
        return out;
      },
      hooks_.wake);
}

// A choice's result in place: the target plan (and what its asker does with it), then every
// pipeline's plan, said when it changed.
void TurnkeyController::take_choice() {
  PendingChoices::Request request = std::move(*choices_->running);
  choices_->running.reset();
  ++plans_taken_;
  choice::ChoiceResult result = choices_->task.take();
  std::vector<std::vector<std::vector<int>>> before;  // each pipeline's clocks until now
  for (std::size_t d = 0; d < pace_of_.size(); ++d)
    if (const ChosenPlan* plan = plan_of(d)) before.push_back(plan->frequencies);
  if (result.target) {
    target_plan_ = std::move(result.target->plan);
    target_widened_ = result.target->widened;
    caution_ *= result.target->caution_factor;
    if (result.target->top_spread) pace_model_ = PaceModel(*result.target->top_spread);
    deployed_once_ = false;
    if (request.chosen) request.chosen(*result.target);
  }
  Assignment& a = result.assignment;
  if (choices_->queued.empty()) straggler_ = a.straggler;  // else the queued choice's is newer
  lead_plan_ = std::move(a.lead_plan);
  bool changed = !deployed_once_ || a.pace_of != pace_of_ || a.paced.size() != paced_plans_.size() ||
                 (lead_plan_ && lead_plan_->frequencies != lead_frequencies_);
  lead_frequencies_ = lead_plan_ ? lead_plan_->frequencies : std::vector<std::vector<int>>{};
  for (std::size_t i = 0; !changed && i < a.paced.size(); ++i)
    changed = a.paced[i].frequencies != paced_plans_[i].frequencies;
  pace_of_ = std::move(a.pace_of);
  paced_plans_ = std::move(a.paced);
  predicted_ = std::move(a.predicted);
  calibration_.resize(predicted_.size());
  for (std::size_t d = 0; d < predicted_.size(); ++d)
    calibration_[d].plan_changed =
        calibration_[d].plan_changed || d >= before.size() || before[d] != plan_of(d)->frequencies;
  deployed_once_ = true;
  if (changed) {
    report_.new_plans();
    judged_conditions_.reset();
    judge_on_new_rounds();
    std::string who;
    for (std::size_t d = 0; d < pace_of_.size(); ++d)
      who += fmt::format("{}pipeline {}: {}", d == 0 ? "" : "; ", d, describe(*plan_of(d)));
    decide(request.why, who);
  }
  start_next_choice();
}

RoundClocks TurnkeyController::plan_clocks() const {
  std::vector<std::vector<std::vector<int>>> out;
  for (std::size_t d = 0; d < static_cast<std::size_t>(shape_.pipelines); ++d) out.push_back(plan_of(d)->frequencies);
  return out;
}

// Per stage and slot of `plan`: the seconds an instruction at the top clock right after a slower
// one runs at the clock before (the latency model's loss, as the plans are chosen with); none while
// the latency is not known.
std::optional<std::vector<std::vector<double>>> TurnkeyController::latency_loss(const ChosenPlan& plan) const {
  if (latency_ <= 0 || !plans_ || !plans_->emulator) return std::nullopt;
  const Emulator& emulator = *plans_->emulator;
  const int top = shape_.clocks.front();
  std::vector<std::vector<double>> out(plan.frequencies.size());
  for (std::size_t s = 0; s < plan.frequencies.size() && s < orders_.size(); ++s) {
    const auto& clocks = plan.frequencies[s];
    out[s].assign(clocks.size(), 0.0);
    for (std::size_t k = 0; k < clocks.size() && k < orders_[s].size(); ++k) {
      const int before_clock = clocks[k > 0 ? k - 1 : clocks.size() - 1];
      if (clocks[k] != top || before_clock == top) continue;
      const auto now = emulator.cost(orders_[s][k], top);
      const auto before = emulator.cost_before_change(orders_[s][k], before_clock);
      if (now && before && before->time > 0)
        out[s][k] = std::max(0.0, cost_after_clock_change(*now, *before, latency_).time - now->time);
    }
  }
  return out;
}

// Per pipeline: its measured top-clock instruction times over its own in the baseline (the median
// over the instructions it ran at the top clock, those right after a change of clock less what the
// latency cost them; a profile's error below the top clock, or a plan slower under noise, does not
// show there; a slower cluster or GPU does). Where a pipeline ran
// fewer than 3 at the top clock: the median of the pipelines that did and are no straggler, else
// what it was.
void TurnkeyController::measure_conditions(const RoundMeasurement& m, const std::vector<double>* plan_ratios) {
  const bool on_plans = plan_ratios != nullptr;
  const auto D = static_cast<std::size_t>(shape_.pipelines);
  if (straggler_changes_ != straggler_changes_seen_.changes) straggler_changes_seen_ = {straggler_changes_, round_};
  // Only a change beyond what one round's few top-clock instructions tell apart replaces the
  // conditions known.
  constexpr double kClearlyMoved = 0.02;
  constexpr std::size_t kWindow = 8;  // rounds of each pipeline's conditions known (below)
  const auto moved = [](double now, double known) { return now > 0 && std::abs(now / known - 1) > kClearlyMoved; };
  // Until measured, each pipeline runs at the conditions profiling's last all-max round found, where
  // the cluster's moved beyond that round's noise: a plan deployed during a slow spell or after a step
  // of drift is calibrated by those conditions, not the baseline's, where it runs nothing at the top
  // clock (a 1.5% step read as the plan's error held the reference 1.5% fast, and the plan condemned).
  // Each pipeline at its own where that round measured them (one slowed below the straggler threshold
  // moved the cluster's, with two pipelines their mean, by half its slowdown: the other, read at those,
  // 1.8% slow for good), else at the cluster's; times its change of pace (a pipeline slow in the
  // baseline that recovered while profiling runs that much faster: read at the cluster's alone, the
  // reference stayed at the slow baseline's time, 21% high).
  const double round_sigma = baseline_.time() > 0 ? round_spread_floor(baseline_.time()) / baseline_.time() : 0.0;
  if (conditions_.size() != D) {
    // Beyond profiling's band, or beyond twice a round's noise the same way in its last two check rounds (a
    // step of drift of 0.85% within the band, read as the plans' error, held one pipeline's conditions
    // 0.85% low until a probe).
    const auto beyond_noise = [&](double c, double way) { return (c - 1) * way > 2 * round_sigma; };
    const double way = profile_conditions_ > 1 ? 1.0 : -1.0;
    const bool cluster_moved =
        profile_conditions_ > 0 &&
        (std::abs(profile_conditions_ - 1) > kCheckBand ||
         (round_sigma > 0 && beyond_noise(profile_conditions_, way) && beyond_noise(profile_conditions_before_, way)));
    for (std::size_t d = conditions_.size(); d < D; ++d) {
      const double own = d < profile_pipeline_conditions_.size() ? profile_pipeline_conditions_[d] : 0.0;
      const double at = !cluster_moved ? 1.0 : own > 0 ? own : profile_conditions_;
      conditions_.push_back(at * pace_change(d));
    }
  }
  if (all_max_conditions_.size() != D) all_max_conditions_ = conditions_;  // the first plan round: as deployed
  if (!pipelines_.known()) return;
  std::vector<std::optional<double>> now(D);
  std::vector<double> now_error(D, 0.0);
  std::vector<double> shared;  // what pipelines that are no straggler measured: the cluster's conditions
  const std::vector<double> no_ratios;
  const auto& ratios = on_plans ? *plan_ratios : no_ratios;
  calibration_.resize(D);
  std::vector<char> steady(D, 0);  // measured at the top clock only right after changes of clock
  // The cluster's change of conditions this round, as the pipelines that ran the top clock measured it
  // against their conditions last known (right after changes of clock too: noisier, but of this round;
  // not a followed straggler, whose slowdown as detected carries the GPUs' spread): what moves the
  // conditions a plan that runs nothing there is calibrated by on its first round, where they may have
  // just changed with it. A change, not the others' conditions: a pipeline's own may lie apart from
  // theirs for good (one slow in the baseline that recovered while profiling, calibrated at the others'
  // on a change of plan, read 4.9% slow, and the reference's energy 1.9% high).
  std::vector<double> measured_changes;
  // A followed straggler's slowdown relative to the others this round, where it moved clearly from the
  // one followed (the median over its rounds): the others' GPUs slowed or recovered beside it, or it
  // recovered within the round.
  const auto slowdown_moved = [&](std::size_t d) -> std::optional<double> {
    const double others = d < ratios.size() && ratios.size() > 1 ? median_of_others(ratios, d) : 0.0;
    if (others <= 0 || ratios[d] <= 0) return std::nullopt;
    const double now = ratios[d] / others;
    if (std::abs(now / followed_slowdown() - 1) <= config_.detector.threshold / 2) return std::nullopt;
    return now;
  };
  // Where only a followed straggler ran the top clock, the cluster's change this round is that
  // pipeline's against its conditions last known (its slowdown as detected carries its GPUs' spread;
  // a change of it does not).
  double straggler_change = 0;  // 0: none
  // Each change is a pipeline's measurement over its own conditions last known: both carry its GPUs'
  // change of pace since the baseline (pace_change), which the ratio cancels.
  for (std::size_t d = 0; d < D; ++d) {
    const ChosenPlan* plan = on_plans ? plan_of(d) : nullptr;
    const auto late = plan ? latency_loss(*plan) : std::nullopt;
    bool steady_only = false;
    now[d] = pipelines_.conditions(m, d, orders_, shape_.num_stages, plan ? &plan->frequencies : nullptr,
                                   shape_.clocks.front(), late ? &*late : nullptr, &steady_only, &now_error[d]);
    steady[d] = steady_only ? 1 : 0;
    const bool followed =
        straggler_ && !straggler_->told && straggler_->pipeline && static_cast<std::size_t>(*straggler_->pipeline) == d;
    const bool known = d < conditions_.size() && conditions_[d] > 0;
    if (now[d] && !followed && known) measured_changes.push_back(*now[d] / conditions_[d]);
    if (followed && known) {
      // Its plan changed too, to one that runs too few instructions at the top clock: as that plan's
      // ratio says, calibrated as before (a followed straggler keeps its calibration).
      const auto& per_ratio = calibration_[d].per_ratio;
      const double x = now[d] ? *now[d] : d < ratios.size() && per_ratio ? ratios[d] * *per_ratio : 0.0;
      // Not where its slowdown relative to the others moved clearly this round: that change is its own (a
      // straggler that recovered as the other pipeline's plan changed read as the cluster 8% faster, and
      // that plan was calibrated anew so).
      if (x > 0 && !slowdown_moved(d)) straggler_change = x / straggler_conditions_known(d);
    }
  }
  const double cluster_change = measured_changes.empty() ? 0.0 : median(measured_changes);  // 0: none
  note_followed_slowdown(ratios);
  // A followed straggler measured over a few of its rounds on the plans since detection or its last
  // change, none suspected since: its slowdown has settled.
  const bool settled_straggler = !detector_.suspects() && followed_ratios_.size() >= 3;
  constexpr int kProbeRounds = 5;  // a followed straggler's plan's rounds calibrated on a probe
  // A plan's time over its prediction within this of its round before: it ran as it did then (one
  // round's ratio varies by a few tenths of this under noise of 0.02).
  constexpr double kSameRatio = 0.005;
  const auto ran_as_before = [](const Calibration& cal, double ratio) {
    return cal.last_ratio > 0 && std::abs(ratio / cal.last_ratio - 1) < kSameRatio;
  };
  // A plan calibrated anew is calibrated on the mean of its ratios over its first rounds, up to this
  // many, as long as each lies within the noise of their mean (two standard deviations of one
  // round's, at least kSameRatio): a change of conditions beyond that ends it (half a 1% step of the
  // cluster's within a round lies within three).
  constexpr int kAnewRounds = 6;
  const auto agrees = [&](double ratio, double mean) {
    return mean > 0 && std::abs(ratio / mean - 1) <= std::max(kSameRatio, 2 * round_sigma);
  };
  const auto way_off = [](double ratio, double mean) { return ratio > mean ? 1 : -1; };
  const auto mean_since = [](const Calibration::SinceAnew& since) { return since.ratio_sum / since.rounds; };
  // Within two standard deviations of a round's difference from the mean of those since (at least kSameRatio).
  const auto agrees_with_mean = [&](double ratio, const Calibration::SinceAnew& since) {
    const double mean = mean_since(since);
    return mean > 0 &&
           std::abs(ratio / mean - 1) <= std::max(kSameRatio, 2 * round_sigma * std::sqrt(1 + 1.0 / since.rounds));
  };
  // The one round a plan was calibrated anew on lies off the two after it, which lie close to each other, by no
  // more than noise can stray (five standard deviations of its difference from their mean), and no pipeline
  // measured the cluster move: that round strayed.
  const auto first_round_strayed = [&](const Calibration::SinceAnew& since, double ratio, double cluster) {
    if (since.rounds != 1 || since.off_way == 0) return false;
    const double first = mean_since(since);
    if (since.off_way != way_off(ratio, first)) return false;
    const double pair = (since.off_ratio + ratio) / 2;
    return std::abs(ratio / since.off_ratio - 1) <= std::max(kSameRatio, 2 * round_sigma * std::sqrt(2.0)) &&
           std::abs(first / pair - 1) <= 5 * round_sigma * std::sqrt(1.5) &&
           (cluster <= 0 || std::abs(cluster - 1) <= std::max(kSameRatio, 2 * round_sigma));
  };
  // A probe's conditions and those the plan's calibration reads in its rounds around the probe (it ran
  // as in its round before), weighed by the inverse of their variances: the probe's from the spread of
  // its top-clock instructions; the calibration's half a round's time for the two rounds, and as much
  // again for the rounds it was taken from.
  const auto towards_the_probe = [&](const Calibration& cal, double around, double probed, double probed_error) {
    if (cal.carried) return probed;  // another plan's calibration: that plan's error, not this one's
    const double calibrated = around * cal.per_ratio.value_or(0);
    const double probe_variance = probed_error * probed_error, own_variance = round_sigma * round_sigma;
    if (calibrated <= 0 || !(probe_variance > 0) || !(own_variance > 0)) return probed;
    const double weight = own_variance / (own_variance + probe_variance);
    return calibrated * std::pow(probed / calibrated, weight);
  };
  // A pending probe's verdict from this many rounds after it at most, against this many before it.
  constexpr int kPendingRounds = 3;
  constexpr std::size_t kRoundsBeforeProbe = 4;
  // A followed straggler's calibrated conditions, its plan running as in its round before the probe, off
  // the probe's beyond the noise of both: the calibration carries another plan's error (one taken on a plan
  // paced to another pipeline's slow spell read the straggler 1.3% slow, and hid its plan's 0.8% slowdown
  // for the rest of the run), where the straggler's slowdown is measured at all-max.
  const auto probe_disagrees = [&](const Calibration& cal, double ratio) {
    if (!cal.probed || !cal.per_ratio || !ran_as_before(cal, ratio)) return false;
    const double calibrated = ratio * *cal.per_ratio;
    const double apart = std::max({kSameRatio, 2 * round_sigma, 3 * cal.probed_error});
    return calibrated > 0 && std::abs(calibrated / *cal.probed - 1) > apart;
  };
  // A plan's second round after it was calibrated anew on a change of plan moved clearly from its first,
  // which had moved from what the plan before's calibration expected by more than two plans' errors
  // differ, the same way.
  const auto began_in_a_change = [&](const Calibration& cal, const Calibration::SinceAnew& since, double ratio) {
    constexpr double kPlansApart = 0.01;
    if (since.rounds != 1) return false;
    const double first = mean_since(since), before = since.before;
    if (before <= 0 || first <= 0) return false;
    const double expected = cal.anew_conditions / before;
    return moved(ratio, first) && std::abs(first / expected - 1) > kPlansApart &&
           (ratio - first) * (first - expected) > 0;
  };
  // What a round of a plan calibrated anew does to that calibration: adds to it, replaces the one round it held
  // (which strayed), is left out (the first round off the mean, or the next off the other way), or ends it. A
  // round that shows the GPUs' pace changed within the plan's first round ends it whatever else it shows (under
  // noise above 0.33% a round, that change would also pass for a first round that strayed).
  enum class AnewRound { kAgrees, kFirstStrayed, kLeftOut, kEnds };
  const auto anew_round = [&](const Calibration::SinceAnew& since, double ratio, double cluster, bool began) {
    if (agrees_with_mean(ratio, since)) return AnewRound::kAgrees;
    if (began) return AnewRound::kEnds;
    if (first_round_strayed(since, ratio, cluster)) return AnewRound::kFirstStrayed;
    if (way_off(ratio, mean_since(since)) != since.off_way) return AnewRound::kLeftOut;
    return AnewRound::kEnds;
  };
  for (std::size_t d = 0; d < D; ++d) {
    auto& cal = calibration_[d];
    const bool steady_only = steady[d] != 0;
    // An all-max round measures each pipeline's conditions at the top clock: its next plan is
    // calibrated from those, whatever came or went before (a straggler slow in the baseline that
    // recovered from a slowdown on top runs at its own pace, not at the others').
    if (!on_plans && now[d]) {
      cal.conditions_changed = cal.straggled = false;
      cal.probed = *now[d];
      cal.probed_error = now_error[d];
    }
    // A plan that runs (next to) nothing at the top clock (a straggler's pace, or a profile whose top
    // clock is no faster than the next) says nothing there: its pipeline's time over what the plan
    // predicts does, in units of what that ratio was when the conditions were last known (measured
    // at the top clock in the same round, or, undisturbed, by the all-max rounds before), which
    // takes the plan's error out.
    // A pipeline given another plan whose own conditions did not change with it (it is no straggler
    // that came, went or is followed, and did not recover) is calibrated anew on that plan's first
    // round, from the conditions last known: another plan's ratio carries that plan's error.
    if (d < ratios.size() && ratios[d] > 0 && m.pipeline_time[d] > 0) {
      if (cal.plan_changed) cal.from_probe = {};  // the probe calibrated the plan before
      const Calibration::SinceAnew since = std::exchange(cal.since_anew, {});
      const bool began = began_in_a_change(cal, since, ratios[d]);
      const bool straggling_here = follows_straggler_on(d);
      const bool usable = !straggling_here && !detector_.suspects() && d < conditions_.size();
      // A round of the same plan under the same conditions, none measured at the top clock: what the probes
      // and the rounds since it was calibrated anew calibrate it by.
      const bool same_plan_off_top = usable && !cal.plan_changed && !cal.conditions_changed && !now[d];
      // A detected straggler that recovered onto another plan measuring nothing at the top clock:
      // neither its conditions as a straggler nor its old plan's ratio hold. Its ratio on the new plan
      // does, in the plan's calibration on the others that run it (the others' conditions would carry
      // a slowdown of theirs that no one follows); failing those, it runs at the cluster's conditions
      // as the others have them, each over its GPUs' change of pace (another pipeline that slowed
      // while it was followed, taken in as that pipeline's pace, is no condition of its GPUs).
      if (usable && cal.plan_changed && cal.straggled && !now[d] && D > 1) {
        const auto shared_calibration = calibration_on_others(d, ratios);
        const auto cluster = others_conditions(d);
        cal.per_ratio = shared_calibration
                            ? *shared_calibration
                            : (cluster ? *cluster * pace_change(d) : median_of_others(conditions_, d)) / ratios[d];
        cal.carried = false;
      } else if (usable && cal.per_ratio && cal.plan_changed && !cal.conditions_changed) {
        const double cluster_here = conditions_[d] * (cluster_change > 0 ? cluster_change : straggler_change);
        const double before = *cal.per_ratio;
        const bool cluster_moved = moved(cluster_here, conditions_[d]);
        cal.start_anew(cluster_moved ? cluster_here : conditions_[d], ratios[d], round_, before);
        // The others' conditions known are what their measurements since a straggler came, changed or went
        // made them only once a window of rounds has passed (a straggler's recovered three rounds ago
        // still read 1.3% slow, and the others' measurements since moved the calibration by that).
        const bool others_settled = round_ - straggler_changes_seen_.round > static_cast<int>(kWindow);
        cal.anew_others = {cluster_moved || !others_settled ? 0.0 : cluster_beside(d, conditions_, true).value_or(0.0),
                           straggler_changes_,
                           {}};
      } else if (straggling_here && !now[d] && !cal.plan_changed &&
                 ((cal.probed && (!cal.per_ratio || cal.carried || probe_disagrees(cal, ratios[d]))) ||
                  (cal.from_probe.rounds > 0 && cal.from_probe.rounds < kProbeRounds))) {
        // The followed straggler's plan, that runs nothing at the top clock, calibrated on nothing, or on
        // conditions a probe now finds otherwise: on the probe's conditions, over its first rounds after it
        // (one round's ratio is as noisy as the probe).
        if (cal.probed) cal.from_probe = {*cal.probed, 0, 0};
        cal.carried = false;
        auto& probe = cal.from_probe;
        // A round off the mean of those before by more than two standard deviations of its difference
        // from it (at least kSameRatio) is left out: noise (a short pipeline's round strays that far now
        // and then), or a change of conditions, which the next round shows the same way; then the rounds
        // before it calibrate the plan, no more (the cluster 1% slower, averaged in, read as the plan's
        // error and the straggler's conditions 0.7% low for good).
        const double off = probe.rounds > 0 ? ratios[d] / (probe.ratio_sum / probe.rounds) - 1 : 0.0;
        const double apart = 2 * round_sigma * std::sqrt(1 + 1.0 / std::max(probe.rounds, 1));
        if (probe.rounds > 0 && std::abs(off) > std::max(kSameRatio, apart)) {
          const int way = off > 0 ? 1 : -1;
          if (probe.off_way == way) probe.rounds = kProbeRounds;
          probe.off_way = way;
        } else {
          probe.off_way = 0;
          probe.ratio_sum += ratios[d];
          ++probe.rounds;
          cal.per_ratio = probe.conditions / (probe.ratio_sum / probe.rounds);
        }
      } else if (straggling_here && !now[d] && !cal.plan_changed && cal.probed && cal.per_ratio &&
                 ran_as_before(cal, ratios[d])) {
        // A later probe of the followed straggler's plan, within the noise of its calibration, the plan
        // running as before it: weighed in with the estimates that calibrated it, each as much (a probe
        // and a few rounds' ratios each know its conditions to a few tenths of a percent; the first probe's
        // alone held them 0.4% high for the rest of the run, and the history's slowdown 0.37 points low).
        const double around = (ratios[d] + cal.last_ratio) / 2;
        const double calibrated = around * *cal.per_ratio;
        const int before = cal.weighed.per_ratio == *cal.per_ratio ? cal.weighed.count : 1;
        cal.per_ratio = calibrated * std::pow(*cal.probed / calibrated, 1.0 / (before + 1)) / around;
        cal.weighed = {*cal.per_ratio, before + 1};
      } else if (straggling_here && cal.plan_changed && !now[d] && settled_straggler) {
        // The followed straggler given another plan (a retry, a step-up) with nothing at the top clock,
        // rounds after its slowdown was last detected: its conditions did not change with the plan. The
        // old plan's calibration would carry the old plan's error into them (a plan slower under noise
        // than predicted read as a straggler 0.4% slower, and hid that plan's slowdown).
        cal.start_anew(conditions_[d], ratios[d], round_);
      } else if (same_plan_off_top && cal.probed && cal.per_ratio &&
                 (cal.last_ratio > 0 ? ran_as_before(cal, ratios[d])
                                     : !moved(ratios[d] * *cal.per_ratio, *cal.probed))) {
        // Its plan runs nothing at the top clock, calibrated on one round of it (or of a plan before),
        // and a probe just measured its conditions at all-max, the plan running as in its round before
        // the probe: its conditions did not change around the probe, so where its calibration says
        // otherwise the calibration was off (carried from plan to plan 1.5% off; started anew from a
        // cluster's conditions that a pipeline's change of pace, not yet taken in, moved: 4.5%), and it
        // is calibrated anew on the probe. A plan that ran otherwise than before the probe keeps its
        // calibration: its conditions changed around the probe, maybe within it (a probe that measured
        // half a 1.5% step calibrated the step away, and the conditions read 1.5% low from then on). The
        // probe and the calibration are weighed by their errors: a short pipeline's probe measures its
        // conditions from a few instructions, a few tenths of a percent off (one 0.96% high, taken whole,
        // held the reported slowdown 0.6 points low).
        const double around = cal.last_ratio > 0 ? (ratios[d] + cal.last_ratio) / 2 : ratios[d];
        cal.start_anew(towards_the_probe(cal, around, *cal.probed, cal.probed_error), ratios[d], round_);
        cal.pending_probe = {};
      } else if (same_plan_off_top && cal.probed && cal.per_ratio && cal.last_ratio > 0 && !cal.recent_ratios.empty()) {
        // The same, but the first round after the probe ran otherwise than the round before it: under noise
        // one round's ratio strays by that now and then (a plan calibrated 1.4% off through a step of drift
        // kept it for good, the probe left out for a round 0.63% off), so the probe waits for the mean of
        // the next rounds, against the mean of those before it.
        cal.pending_probe = {*cal.probed,
                             cal.probed_error,
                             mean_interval(cal.recent_ratios).value,
                             static_cast<int>(cal.recent_ratios.size()),
                             ratios[d],
                             1};
      } else if (auto& pending = cal.pending_probe; same_plan_off_top && pending.conditions > 0 && cal.per_ratio) {
        // A pending probe's next rounds: where their mean (with the first's) ran as the rounds before the
        // probe did, the plan ran as before around it, and is calibrated on the probe as above; where they
        // do not by the last of them, the conditions changed around the probe, and it is left out.
        pending.after_sum += ratios[d];
        ++pending.after_rounds;
        const double after = pending.after_sum / pending.after_rounds;
        if (std::abs(after / pending.before - 1) < kSameRatio) {
          const double around = (pending.after_sum + pending.before * pending.before_rounds) /
                                (pending.after_rounds + pending.before_rounds);
          cal.start_anew(towards_the_probe(cal, around, pending.conditions, pending.error), around, round_);
          pending = {};
        } else if (pending.after_rounds >= kPendingRounds) {
          pending = {};
        }
      } else if (const AnewRound verdict = same_plan_off_top && since.rounds > 0 && since.rounds < kAnewRounds
                                               ? anew_round(since, ratios[d], cluster_change, began)
                                               : AnewRound::kEnds;
                 verdict != AnewRound::kEnds) {
        // The plan's next rounds after it was calibrated anew, as long as they run as its first ones did:
        // calibrated on their mean ratio. One round off their mean is left out, noise (a round of a short
        // pipeline strays that far now and then: calibrated on the two rounds before it, 0.45% low by
        // chance, the conditions read 0.5% slow until the next probe); the next off the same way is a
        // change of conditions, which ends it.
        // Where the one round it was calibrated on strayed, the two after it calibrate it (a plan's first round
        // 1.2% slow by chance, the two after it read as a change, its conditions 1% fast for good).
        if (verdict == AnewRound::kAgrees) {
          cal.since_anew = {since.ratio_sum + ratios[d], since.rounds + 1, since.before, 0, 0};
        } else if (verdict == AnewRound::kFirstStrayed) {
          cal.since_anew = {since.off_ratio + ratios[d], 2, since.before, 0, 0};
        } else {
          cal.since_anew = since;
          cal.since_anew.off_way = way_off(ratios[d], mean_since(since));
          cal.since_anew.off_ratio = ratios[d];
        }
        cal.per_ratio = cal.anew_conditions / mean_since(cal.since_anew);
      } else if (!straggling_here && d < conditions_.size() && !cal.plan_changed && !cal.conditions_changed &&
                 !now[d] && began) {
        // Its new plan's first round ran off what the plan before's calibration expected, and its second
        // further off the same way: its GPUs' pace changed within the first round (a pipeline recovering
        // as its plan changed; calibrated on that round, its conditions read 2.7% slow for good), not
        // the plan's error. It runs on the plan before's calibration until something measures it anew; so
        // too while the detector suspects a straggler (the change that began in that round).
        cal.per_ratio = since.before;
        cal.carried = true;
        cal.anew_round.reset();
      } else if (cal.plan_changed) {
        cal.anew_round.reset();
        cal.carried = cal.per_ratio.has_value();
      }
      cal.last_ratio = ratios[d];
      // Rounds the detector suspected a straggler in, or after a change, are no measure of the plan's pace.
      if (cal.plan_changed || cal.conditions_changed || !usable) cal.recent_ratios.clear(), cal.pending_probe = {};
      if (usable) cal.recent_ratios.push_back(ratios[d]);
      if (cal.recent_ratios.size() > kRoundsBeforeProbe) cal.recent_ratios.erase(cal.recent_ratios.begin());
      if (now[d] && !steady_only) {
        // A few instructions right after a change of clock (the latency not known) measure noisily:
        // averaged over the plan's rounds. A followed straggler's conditions did not change with its
        // plan (a step-up, a retry): where such a round reads them otherwise than known beyond the noise
        // of a round, those known count as the rounds they are the mean of (one read them 1.4% slow,
        // and the plan it went back to next was calibrated on that for good).
        if (cal.plan_changed) {
          cal.noisy = {};
          if (straggling_here && settled_straggler && !cal.window.empty() && d < conditions_.size() &&
              !agrees(*now[d], conditions_[d])) {
            cal.noisy.rounds = static_cast<int>(cal.window.size());
            cal.noisy.sum = cal.noisy.rounds * conditions_[d] / ratios[d];
          }
        }
        cal.noisy.sum += *now[d] / ratios[d];
        ++cal.noisy.rounds;
        cal.per_ratio = cal.noisy.sum / cal.noisy.rounds;
        now[d] = ratios[d] * *cal.per_ratio;
        cal.carried = false;
      } else if (now[d]) {
        cal.per_ratio = *now[d] / ratios[d];
        cal.noisy = {};
        cal.anew_round.reset();  // measured at the top clock
        cal.carried = false;
      } else if (cal.per_ratio) {
        now[d] = ratios[d] * *cal.per_ratio;
      } else if (usable) {
        // Its first round on a plan (a recovery within that round is taken in by take_pace_change as
        // for a plan calibrated anew: one that ended in the plans' first round was held in the
        // calibration, the reference stayed at the slow pace, and the slowdown read -20%). The calibration
        // before it is the model's own (a ratio of one at the conditions known), so that a straggler that
        // came within that round is not calibrated away (read at 1.12x where it ran 1.27x, the others'
        // paced plans were calibrated from that at 0.79x of their own, and the reference's energy 2.3% low).
        cal.start_anew(conditions_[d], ratios[d], round_, 1.0);
      }
    }
    const bool straggling = straggler_ && straggler_->pipeline && static_cast<std::size_t>(*straggler_->pipeline) == d;
    // Nor one the detector suspects: a straggler starting shows up so for a round before it is followed,
    // and its conditions are not the others'.
    if (now[d] && !straggling && !detector_.suspected(d)) shared.push_back(*now[d] / pace_change(d));
    if (on_plans) {
      cal.probed.reset();
      cal.plan_changed = false;
      cal.conditions_changed = cal.straggled = straggling && !straggler_->in_baseline;  // the next round's, if it ends
    }
  }
  // Only the straggler ran instructions at the top clock (the others run paced, slower plans): the
  // cluster's conditions are its own less its slowdown relative to the others. Not while the detector
  // suspects it of slowing further (a pipeline slow in the baseline that slowed 1.26x more gave its
  // conditions to the other, whose first round on a plan ran nothing at the top clock: that plan was
  // calibrated on them, the reference's energy read 7% high and the saving 4 points over the truth).
  if (shared.empty() && straggler_ && straggler_->pipeline && !straggler_->told && straggler_->slowdown > 0) {
    const auto d = static_cast<std::size_t>(*straggler_->pipeline);
    if (d < D && now[d] && !detector_.suspected(d))
      shared.push_back(*now[d] / (straggler_->in_baseline ? 1.0 : followed_slowdown()));
  }
  // Each pipeline's over its last rounds on the plans (at most kWindow), anew after a change beyond
  // half a percent and the noise: one round's is noisy, and the slowest of noisy estimates would
  // overstate the stretch.
  // A straggler whose plan runs (next to) nothing at the top clock, with nothing to calibrate its time
  // by: the others' conditions (now, or as last known) times its slowdown relative to them.
  const auto straggling = [&](std::size_t d) {
    return follows_straggler_on(d) && !straggler_->told && straggler_->slowdown > 0;
  };
  std::vector<double> others_before;  // the conditions the others were last known at
  for (std::size_t d = 0; d < D; ++d)
    if (!straggling(d)) others_before.push_back(conditions_[d] / pace_change(d));
  // Its slowdown relative to them: as followed, or this round's where that moved clearly (the conditions
  // it was followed at would hold the reference at its pace, as if the others still ran it).
  const auto relative = [&](std::size_t d) { return slowdown_moved(d).value_or(followed_slowdown()); };
  const auto unmeasured = [&](std::size_t d) {
    if (!straggling(d)) return !shared.empty() ? median(shared) * pace_change(d) : conditions_[d];
    const double others = !shared.empty() ? median(shared) : !others_before.empty() ? median(others_before) : 1.0;
    return others * relative(d);
  };
  for (std::size_t d = 0; d < D; ++d) {
    const double x = now[d] ? *now[d] : unmeasured(d);
    auto& window = calibration_[d].window;
    // An all-max round measures every instruction at the top clock: its conditions are precise.
    if (!on_plans) window.clear();
    if (!window.empty()) {
      const double mean = mean_interval(window).value;
      // A round off the mean by less than three standard errors of its own measurement restarts the
      // window only when the next round is off the same way: a plan that runs a few instructions at the
      // top clock reads its conditions to about 1% a round, and one round's draw, taken alone, set them
      // 1.1% slow and the next plan's calibration with them (the reference 1.5-2% slow for 30 rounds).
      const int way = x > mean ? 1 : -1;
      const double noise = now[d] && on_plans ? 3 * now_error[d] * x : 0.0;
      auto& off_way = calibration_[d].window_off_way;
      if (std::abs(x - mean) <= std::max(0.005 * mean, 4 * sample_stddev(window))) {
        off_way = 0;
      } else if (std::abs(x - mean) > noise || off_way == way) {
        window.clear();
        off_way = 0;
      } else {
        off_way = way;
      }
    }
    window.push_back(x);
    if (window.size() > kWindow) window.erase(window.begin());
    const double before = conditions_[d];
    conditions_[d] = mean_interval(window).value;
    if (on_plans && moved(conditions_[d], before)) moved_since_all_max_ = true;
  }
  if (on_plans) follow_the_others_since_anew(now);
  // All-max plans, as a probe, run every instruction at the top clock with no change of clock: no latency
  // is in what they measure (after 40 rounds stepped up to all-max, a latency measured on the saving plan
  // tried again restated its rounds at the conditions of the probe before them, a 1% step of drift
  // earlier: the reported slowdown 0.4 points over the truth for 60 rounds).
  bool every_plan_all_max = on_plans;
  for (std::size_t d = 0; d < D && every_plan_all_max; ++d) {
    const ChosenPlan* plan = plan_of(d);
    every_plan_all_max = plan && plan->is_all_max();
  }
  if (!on_plans || every_plan_all_max) {
    all_max_conditions_ = conditions_;
    plan_rounds_since_all_max_ = 0;
    moved_since_all_max_ = false;
  }
}

// A plan calibrated anew on its first round from the conditions known, where the others' change in that
// round was within one round's noise: a step of the cluster's within that round is in the calibration,
// as the plan's error (a 1.5% step of drift held the paced pipeline's conditions, and the reference's
// energy, 0.6% low until the next step). Over the plan's first rounds, what the others measured at the
// top clock (over their changes of pace) tells such a step apart from the noise: where its mean moved
// from the others' conditions known then by more than three of its standard errors (and 0.75%), with no
// pace changed and nothing suspected in between, the calibration moves with it, once.
void TurnkeyController::follow_the_others_since_anew(const std::vector<std::optional<double>>& measured) {
  constexpr double kSettledMove = 0.0075;
  constexpr int kSettledRounds = 3;
  std::vector<double> known(measured.size(), 0.0);  // 0: not measured this round
  for (std::size_t o = 0; o < measured.size(); ++o) known[o] = measured[o].value_or(0.0);
  for (std::size_t d = 0; d < calibration_.size() && d < conditions_.size(); ++d) {
    auto& cal = calibration_[d];
    auto& since = cal.anew_others;
    if (since.conditions <= 0) continue;
    if (cal.since_anew.rounds <= 0 || since.changes != straggler_changes_ || detector_.suspects() || !cal.per_ratio) {
      since = {};
      continue;
    }
    const auto others = cluster_beside(d, known, true);
    if (!others) continue;
    // A round off by half the straggler threshold is a pipeline's change of pace (a recovery within the
    // plan's first round, taken in rounds later), not a step within one round's noise.
    if (std::abs(*others / since.conditions - 1) > config_.detector.threshold / 2) {
      since = {};
      continue;
    }
    since.rounds_measured.push_back(*others);
    if (since.rounds_measured.size() < static_cast<std::size_t>(kSettledRounds)) continue;
    const Estimate mean = mean_interval(since.rounds_measured);
    const double change = mean.value / since.conditions;
    const double noise = (mean.high - mean.low) / 2 / mean.value;
    if (std::abs(change - 1) <= std::max(kSettledMove, 1.5 * noise)) continue;
    cal.anew_conditions *= change;
    *cal.per_ratio *= change;
    for (double& w : cal.window) w *= change;
    conditions_[d] = mean_interval(cal.window).value;
    since = {};
  }
}

// The cluster's conditions as the pipelines other than d have them in `conditions` (0: not known), each
// over its GPUs' change of pace since the baseline: their median, leaving out a followed straggler where
// `but_straggler` (its slowdown is its own); none without another pipeline.
std::optional<double> TurnkeyController::cluster_beside(std::size_t d, const std::vector<double>& conditions,
                                                        bool but_straggler) const {
  std::vector<double> paces;
  for (std::size_t o = 0; o < conditions.size(); ++o) paces.push_back(pace_change(o));
  return median_over_paces(conditions, paces,
                           [&](std::size_t o) { return o == d || (but_straggler && follows_straggler_on(o)); });
}

// A followed straggler's conditions as last known, holding its slowdown. In the round one that came is
// first followed, those known hold it wholly, in part or not at all (a plan calibrated in the round it
// began hides it; the round it began in ran slow for part of it): they are the others' times its
// slowdown as detected (else what they missed of it read as the cluster's change: the other pipeline's
// conditions then stood at 1.25x, or, a partly slow round in them, at 1.024x for good, the reference's
// energy 0.7% high).
double TurnkeyController::straggler_conditions_known(std::size_t d) const {
  const double known = conditions_[d];
  if (!straggler_ || straggler_->in_baseline || straggler_->slowdown <= 0 || calibration_[d].straggled) return known;
  const auto others = others_conditions(d);
  if (!others) return known;
  return *others * pace_change(d) * straggler_->slowdown;
}

// The median of the other pipelines' conditions last known (the cluster's, as they measured them).
std::optional<double> TurnkeyController::others_conditions(std::size_t d) const {
  return cluster_beside(d, conditions_, false);
}

// The cluster's conditions as the other pipelines last knew them: those of the ones that follow no
// straggler, or, where the followed straggler is the only other, its own over its slowdown. (A followed
// straggler's conditions carry its slowdown: a pipeline that recovered beside a 1.085x one read as
// having recovered already, and its plan's calibration kept the 5.5% it had run slow.)
std::optional<double> TurnkeyController::cluster_conditions_beside(std::size_t d) const {
  if (const auto others = cluster_beside(d, conditions_, true)) return others;
  if (!straggler_is_a_change() || !straggler_->pipeline || straggler_->told || straggler_->slowdown <= 0)
    return std::nullopt;
  const auto s = static_cast<std::size_t>(*straggler_->pipeline);
  if (s == d || s >= conditions_.size() || conditions_[s] <= 0) return std::nullopt;
  return conditions_[s] / pace_change(s) / followed_slowdown();
}

void TurnkeyController::Calibration::start_anew(double conditions, double ratio, int round, double before) {
  carried = false;
  anew_conditions = conditions;
  anew_round = round;
  per_ratio = conditions / ratio;
  since_anew = {ratio, 1, before};
}

// The calibration of pipeline d's plan as the other pipelines that run the same plan have it (a plan's
// error is the model's, the same on every pipeline; their ratios are each in units of their own pace):
// the median of theirs, those not yet measured this round at the conditions they were last known at.
std::optional<double> TurnkeyController::calibration_on_others(std::size_t d, const std::vector<double>& ratios) const {
  const ChosenPlan* mine = plan_of(d);
  if (!mine) return std::nullopt;
  std::vector<double> theirs;
  for (std::size_t o = 0; o < ratios.size() && o < conditions_.size() && o < calibration_.size(); ++o) {
    const ChosenPlan* plan = plan_of(o);
    if (o == d || ratios[o] <= 0 || !plan || plan->frequencies != mine->frequencies) continue;
    const auto& cal = calibration_[o];
    theirs.push_back(!cal.plan_changed && cal.per_ratio ? *cal.per_ratio : conditions_[o] / ratios[o]);
  }
  if (theirs.empty()) return std::nullopt;
  return median(std::move(theirs));
}

// A clock latency of milliseconds measured for the first time, clearly, with no straggler about (a
// pipeline slow since the baseline is part of it, not one): the top-clock instructions right after a
// change of clock were counted as they ran (the latency was not known), so the conditions since the
// last all-max round, and the plans' times calibrated by them, are the latency's as much as the
// cluster's. (A latency of a few standard errors, or of a fraction of a millisecond, comes and goes
// with the noise: the conditions stay. So do conditions that moved clearly since that round: the
// cluster's, which that round's would put back.)
void TurnkeyController::forget_conditions_since_all_max() {
  constexpr double kNoticeable = 2e-3, kClear = 5;  // seconds; standard errors
  if (conditions_forgotten_ || all_max_conditions_.size() != conditions_.size() || latency_ < kNoticeable ||
      latency_ < kClear * latency_stderr_ || straggler_is_a_change() || detector_.suspects() || moved_since_all_max_)
    return;
  conditions_forgotten_ = true;
  conditions_ = all_max_conditions_;
  calibration_.resize(conditions_.size());
  for (auto& cal : calibration_) {
    cal.per_ratio.reset();
    cal.window.clear();
  }
  report_.restate(static_cast<std::size_t>(plan_rounds_since_all_max_), reference());
}

Reference TurnkeyController::reference() const { return reference_under(conditions_); }

Reference TurnkeyController::reference_under(const std::vector<double>& conditions) const {
  Reference ref{"all-max baseline", baseline_.time(), baseline_.energy(), 1};
  if (phase_ != ControllerPhase::deployed || conditions.empty() || !pipelines_.known()) return ref;
  std::vector<double> paces;
  double pipeline_energy = 0;
  for (std::size_t d = 0; d < conditions.size(); ++d) {
    paces.push_back(pipelines_.pace(d));
    pipeline_energy += pipelines_.energy(d);
  }
  const double stretch = pace_model_.stretch(paces, conditions);
  ref.conditions = stretch;
  ref.iteration_time = baseline_.time() * stretch;
  // Each pipeline's GPUs compute for its conditions times as long at the same power, and block
  // until the iteration ends: E_d(now) = c_d (E_d - P G T0) + P G T(now), the baseline's per
  // pipeline energies scaled to the job's baseline energy.
  const double gpus = static_cast<double>(shape_.num_stages * shape_.gpus_per_stage);
  const double p = p_block_.value_or(0);
  const double to_job = pipeline_energy > 0 ? baseline_.energy() / pipeline_energy : 0;
  ref.energy = 0;
  for (std::size_t d = 0; d < conditions.size(); ++d) {
    const double e = to_job > 0 ? pipelines_.energy(d) * to_job : baseline_.energy() / double(conditions.size());
    ref.energy += conditions[d] * (e - p * gpus * baseline_.time()) + p * gpus * ref.iteration_time;
  }
  const bool moved = std::abs(stretch - 1) > 0.001;
  if (straggler_is_a_change()) ref.name = fmt::format("all-max baseline at the straggler's pace (x{:.3f})", stretch);
  else if (moved) ref.name = fmt::format("all-max baseline under current conditions (x{:.3f})", stretch);
  return ref;
}

// A recovered pipeline's rounds restated: each under the conditions it was measured in, the recovered
// pipeline's (its change of pace moved since) taken as the cluster's then, as the others that are no
// followed straggler had them, times its change of pace now; with none, as it has them now. Its new pace
// was measured against the others' in those rounds; where its plan ran the top clock its own conditions
// had followed the recovery already. (The conditions now need not be theirs: under a cluster that slowed
// 1.12x a round after the recovery, the others' plans, still paced to the slow pace in those rounds, 11%
// slower than all-max, would read as on time.)
std::vector<Reference> TurnkeyController::restated_references(std::size_t rounds) const {
  std::vector<Reference> references;
  const std::size_t count = std::min(rounds, measured_against_.size());
  for (std::size_t k = measured_against_.size() - count; k < measured_against_.size(); ++k) {
    const auto& [pace_changes, conditions] = measured_against_[k];
    std::vector<double> restated = conditions;
    std::vector<bool> changed(conditions.size(), false);
    for (std::size_t d = 0; d < conditions.size() && d < pace_changes.size(); ++d)
      changed[d] = std::abs(pace_change(d) / pace_changes[d] - 1) > 1e-9;
    const double then = median_over_paces(conditions, pace_changes, [&](std::size_t o) {
                          return changed[o] || follows_straggler_on(o);
                        }).value_or(0.0);
    for (std::size_t d = 0; d < conditions.size(); ++d)
      if (changed[d]) restated[d] = then > 0 ? then * pace_change(d) : d < conditions_.size() ? conditions_[d] : 1.0;
    references.push_back(reference_under(restated));
  }
  // Rounds older than those kept (none, as long as a recovery takes as many rounds as detection): now's.
  references.insert(references.begin(), rounds - count, reference());
  return references;
}

std::optional<Estimate> TurnkeyController::saving() const {
  if (baseline_.energy() <= 0) return std::nullopt;
  return report_.saving((baseline_.energy_estimate().high - baseline_.energy()) / baseline_.energy());
}

std::optional<Estimate> TurnkeyController::slowdown() const {
  if (baseline_.time() <= 0) return std::nullopt;
  return report_.slowdown((baseline_.time_estimate().high - baseline_.time()) / baseline_.time());
}

void TurnkeyController::remember(const RoundMeasurement& m) {
  report_.add(m.iteration_time, m.energy, m.iterations, reference());
  std::vector<double> pace_changes;
  for (std::size_t d = 0; d < conditions_.size(); ++d) pace_changes.push_back(pace_change(d));
  measured_against_.push_back({std::move(pace_changes), conditions_});
  const auto kept = static_cast<std::size_t>(std::max(config_.detector.rounds, 1)) + 2;
  if (measured_against_.size() > kept) measured_against_.erase(measured_against_.begin());
  if (const auto again = std::exchange(restate_next_, {}); again.rounds > 0)
    report_.restate(restated_references(again.rounds + 1), again.oldest_share);
  if (last_round_on_plans_) ++plan_rounds_since_all_max_;  // every one reported, judged or not
}

// One all-max round is as noisy as one baseline round: it disagrees with a time and energy when it is further
// from them than the tolerance, the baseline's interval and three of its rounds' spread allow.
bool TurnkeyController::agree_as_baseline_rounds(const AllMaxRound& round, double time, double energy) const {
  const double time_band =
      std::max({baseline_.time() * config_.tolerance, baseline_.time_estimate().high - baseline_.time_estimate().low,
                3 * baseline_.round_spread()[0]});
  const double energy_band =
      std::max({baseline_.energy() * config_.tolerance,
                baseline_.energy_estimate().high - baseline_.energy_estimate().low, 3 * baseline_.round_spread()[1]});
  return std::abs(round.time - time) <= time_band && std::abs(round.energy - energy) <= energy_band;
}

void TurnkeyController::observe_probe(const RoundMeasurement& m) {
  ++probes_;
  if (!std::exchange(straggler_periodic_probe_, false)) rounds_since_probe_ = 0;
  straggler_rounds_since_probe_ = 0;
  const Reference judged_under = reference();
  measure_conditions(m, nullptr);
  if (std::exchange(probe_to_judge_, false)) rejudge_under_probe(judged_under);
  remember(m);
  auto disturbed = disturbed_pipelines(m);
  if (std::any_of(disturbed.begin(), disturbed.end(), [](bool b) { return b; })) return;  // a straggler's round
  // The probe at the baseline's conditions: what the reference says all-max takes now is the
  // baseline stretched by the conditions, so a probe that agrees with the reference agrees with the
  // baseline.
  const Reference ref = reference();
  if (ref.iteration_time <= 0 || ref.energy <= 0) return;
  AllMaxRound probe{m.iteration_time * baseline_.time() / ref.iteration_time,
                    m.energy * baseline_.energy() / ref.energy};
  if (agree_as_baseline_rounds(probe, baseline_.time(), baseline_.energy())) {
    probe_samples_.clear();
    baseline_.add(probe, static_cast<std::size_t>(std::max(config_.max_baseline_rounds, 12)));
    return estimate_baseline();
  }
  probe_samples_.push_back(probe);
  if (probe_samples_.size() < 2) return;  // probed again next round
  const auto& a = probe_samples_[probe_samples_.size() - 2];
  if (!agree_as_baseline_rounds(a, probe.time, probe.energy)) {
    if (probe_samples_.size() >= 3) probe_samples_.clear();  // too noisy to tell: keep the baseline
    return;
  }
  const double before_time = baseline_.time(), before_energy = baseline_.energy();
  baseline_.replace({a, probe});
  probe_samples_.clear();
  estimate_baseline();
  correct_baseline(before_time, before_energy);
  decide(DecisionEvent::baseline_corrected,
         fmt::format("two all-max probes in a row measured {:.6g} s and {:.6g} J per iteration at the baseline's "
                     "conditions, outside the baseline's {:.6g} s and {:.6g} J; the baseline is now theirs",
                     baseline_.time(), baseline_.energy(), before_time, before_energy));
}

// A probe taken before a verdict: where it measured all-max slower than the reference the plan's rounds
// were judged against (a change the calibration had taken in part for the plans' own), those rounds are
// judged again against it. Where it measured all-max faster, the rounds ran slower conditions than now
// (a slow spell that ended): they stay as judged, and the verdict's evidence names their conditions, so
// the plan is tried again as soon as it is condemned, on evidence the probe already made stale.
void TurnkeyController::rejudge_under_probe(const Reference& judged_under) {
  const Reference now = reference();
  if (judged_under.iteration_time <= 0 || now.iteration_time <= 0) return;
  const double moved = judged_under.iteration_time / now.iteration_time;
  if (moved < 1)
    for (double& r : judged_) r *= moved;
  else judged_conditions_ = judged_under.conditions;
}

// The baseline changed from (time, energy): what was measured against it is measured against the
// new one (the running plan judged again, the reported numbers corrected).
void TurnkeyController::correct_baseline(double time, double energy) {
  ++baseline_corrections_;
  const double t = time > 0 ? baseline_.time() / time : 1, e = energy > 0 ? baseline_.energy() / energy : 1;
  for (double& r : judged_) r /= t;
  report_.rebase(t, e);
}

void TurnkeyController::observe_deployed(const RoundMeasurement& m) {
  // A latency measured anew: the plans were chosen for another, so what this round says of them is moot;
  // not what it says of the conditions, with the latency now known taken out.
  const bool latency_changed = measure_latency(m);
  if (latency_changed) forget_conditions_since_all_max();
  // Each pipeline's measured compute-bound time against its plan's prediction, in units of its
  // baseline pace: its conditions where the top clock says nothing, and straggler detection. The round
  // is measured against those conditions (a straggler that started in it is no slowdown of the plans').
  const auto ratios = paced_ratios(m, true);
  measure_conditions(m, &ratios);
  remember(m);
  if (latency_changed) {
    // Too few rounds judged to weigh the plans' own evidence against the model's cost of the latency:
    // judged anew first, under conditions that take the latency out.
    if (judged_on_their_own() && !judged_enough()) {
      latency_pending_ = true;
      judged_.clear();
      rounds_on_plan_ = 0;
      return;
    }
    return choose_for_latency();
  }
  ++rounds_on_plan_;
  count_round_since_probe();
  report_.last_ran_the_plans();
  judged_.push_back(report_.last().time / report_.last().reference.iteration_time);
  if (judged_.size() > kJudgedRounds) judged_.erase(judged_.begin());
  if (latency_pending_ && judged_enough()) {
    latency_pending_ = false;
    return choose_for_latency();
  }
  compute_time_sums_.resize(m.pipeline_time.size(), 0.0);
  for (std::size_t d = 0; d < m.pipeline_time.size(); ++d) compute_time_sums_[d] += m.pipeline_time[d];

  const bool was_unpaced = std::exchange(unpaced_behind_, false);
  if (observe_straggler(m, ratios))
    return assign_plans(detector_.current() ? DecisionEvent::slowed_to_straggler : DecisionEvent::back_to_target_plan);
  if (follow_slowed_pipelines()) return assign_plans(DecisionEvent::paced_to_new_speeds);
  if (fell_behind_the_straggler(ratios)) {
    unpaced_behind_ = true;
    return assign_plans(DecisionEvent::back_to_target_plan);
  }
  if (was_unpaced) return assign_plans(DecisionEvent::slowed_to_straggler);  // it ran as paced again
  const std::size_t setting_the_pace = slowest_pipeline();
  if (follow_baseline_changes(ratios)) {
    // A target at all-max was what the pace setter's GPUs allowed; the GPUs that set the pace now may
    // allow a saving plan. The target was fitted to the pace setter's GPUs: where the pipeline that
    // sets the pace now runs its stages at other relative speeds (GPU spread), it is chosen anew for
    // them (the old one cost it 2.8% more energy, run where the other's slack was). (Otherwise another
    // target stays: its rounds judge it, and a plan chosen anew on a profile measured next to a slow
    // pipeline may save less than the one that ran.)
    const std::size_t now_setting = slowest_pipeline();
    if (target_plan_->is_all_max() || (now_setting != setting_the_pace && !alike_gpus(now_setting, setting_the_pace)))
      return choose(DecisionEvent::paced_to_new_speeds, target_for(target_deadline() / miss_));
    return assign_plans(DecisionEvent::paced_to_new_speeds);
  }
  judge_plan();
}

// The clock latency from a round on the plans: per stage, an instruction right after a change of
// clock takes longer (shorter, after a change to a slower clock) than one of the same kind at the
// same clock right after the same clock, by the latency times 1 - (its time at its clock over its
// time at the clock before). The least-squares latency over the rounds so far, once there are
// enough of them and it is clearly above zero; plans are chosen again for it when it differs from
// what they were chosen for by more than a quarter (and half a millisecond).
// A plan may change the clock at every slot of a stage (a short pipeline's does): a change into the
// top clock with no instruction of its kind in the round to compare with is compared with the
// pipeline's own top-clock time in the baseline, times how much slower its top-clock instructions
// ran this round than there (their median: a straggler starting or the cluster drifting moves them
// all, a latency only those right after a change), while no straggler is followed or suspected.
bool TurnkeyController::measure_latency(const RoundMeasurement& m) {
  if (config_.clock_latency || !plans_ || !plans_->emulator) return false;
  constexpr std::size_t kEnough = 40, kEnoughRounds = 8;
  const Emulator& emulator = *plans_->emulator;
  const int top = shape_.clocks.front();
  const bool baseline_comparable = pipelines_.known() && !straggler_is_a_change() && !detector_.suspects() && !paced();
  for (std::size_t d = 0; d < m.slot_time.size() && d < static_cast<std::size_t>(shape_.pipelines); ++d) {
    const ChosenPlan* plan = plan_of(d);
    if (!plan) continue;
    // However few ran at the top clock after a slot at the top clock: a plan whose other top-clock slots
    // all come right after a change would otherwise never measure the latency (one from 960 MHz lost 1%
    // to 2 ms, and the conditions, read off it, 0.4% slow for good).
    bool steady_only = false;
    auto conditions_now = baseline_comparable
                              ? pipelines_.conditions(m, d, orders_, shape_.num_stages, &plan->frequencies, top,
                                                      nullptr, &steady_only, nullptr, 1)
                              : std::nullopt;
    if (!steady_only) conditions_now.reset();
    for (std::size_t s = 0; s < m.slot_time[d].size() && s < orders_.size(); ++s) {
      const auto& times = m.slot_time[d][s];
      const auto& clocks = plan->frequencies[s];
      const auto& order = orders_[s];
      const std::size_t n = std::min({times.size(), clocks.size(), order.size()});
      // The mean of every unchanged one: a single one's noise would be in every sample compared with it.
      std::map<std::tuple<int, InstructionKind, int>, std::pair<double, int>> unchanged;
      for (std::size_t k = 1; k < n; ++k)
        if (clocks[k] == clocks[k - 1] && times[k] > 0) {
          auto& [sum, count] = unchanged[{model_stage(order[k], shape_.num_stages), order[k].kind, clocks[k]}];
          sum += times[k], ++count;
        }
      for (std::size_t k = 1; k < n; ++k) {
        if (clocks[k] == clocks[k - 1] || times[k] <= 0) continue;
        const StageKind key{model_stage(order[k], shape_.num_stages), order[k].kind};
        std::optional<double> reference;
        double reference_error = 0;
        if (auto same = unchanged.find({key.first, key.second, clocks[k]}); same != unchanged.end())
          reference = same->second.first / same->second.second;
        else if (const double conditions = conditions_now.value_or(0); clocks[k] == top && conditions > 0)
          if (auto base = pipelines_.top_time(d, key)) {
            reference = *base * conditions;
            reference_error = pipelines_.top_time_error(d, key) * conditions;
          }
        const auto now = emulator.cost(order[k], clocks[k]),
                   before = emulator.cost_before_change(order[k], clocks[k - 1]);
        if (!reference || !now || !before || before->time <= 0) continue;
        const double share = 1 - now->time / before->time;
        if (std::abs(share) < 0.05) continue;
        // The baseline's (pipeline, model stage, kind), numbered from 1.
        const int baseline_reference =
            reference_error > 0
                ? 1 + (static_cast<int>(d) * shape_.num_model_stages() + key.first) * kNumInstructionKinds +
                      static_cast<int>(key.second)
                : 0;
        latency_samples_.add({share, times[k] - *reference, baseline_reference, reference_error});
      }
    }
  }
  latency_samples_.end_round();
  const auto fit = latency_samples_.fit(kEnough, kEnoughRounds);
  if (!fit) return false;
  constexpr double kSmallest = 5e-4;
  // Taken once clearly above none, dropped only below 2 standard errors: a latency near the boundary
  // would otherwise come and go with every few rounds' samples, and the plans be chosen again each time
  // (the rounds of those choices measure no conditions).
  const bool measured = latency_ > 0 ? fit->above(2, kSmallest) : fit->clear(kSmallest);
  const double now = measured ? fit->latency : 0.0;
  if (std::abs(now - latency_) <= std::max(0.25 * latency_, kSmallest)) return false;
  const double stderr_ = fit->standard_error;
  latency_said_ = fmt::format(
      "a clock change takes effect {:.2f} ms (+-{:.2f}) after it is asked for "
      "(measured over {} changes; {} {:.2f} ms)",
      1e3 * now, 2e3 * stderr_, fit->samples,
      latency_pending_ ? "measured on the plans' first rounds" : "plans were chosen for", 1e3 * latency_);
  latency_ = now;
  latency_stderr_ = stderr_;
  return true;
}

// No followed straggler or pace sets the plans' time: their rounds speak for them.
bool TurnkeyController::judged_on_their_own() const { return !straggler_is_a_change() && !paced(); }

bool TurnkeyController::judged_enough() const {
  return judged_.size() >= static_cast<std::size_t>(std::max(1, config_.verify_rounds));
}

// The plans running were measured under the latency all along: where they meet the target with room
// to spare, they are kept. Plans chosen anew win back the time the changes lose by
// raising clocks elsewhere (at the frontier's fast end, many times the energy of the time won back).
void TurnkeyController::choose_for_latency() {
  if (judged_on_their_own() && judged_enough()) {
    const double ratio = robust_mean(judged_).value, target = target_time() / baseline_.time();
    // The rounds were judged against conditions the latency made look slower, and the model's cost of
    // the latency has been seen to fall short of the truth by half on measured profiles: kept only
    // with half the tolerance to spare and where the model says the latency costs a quarter of it.
    double cost = 0;
    NoiseAwareOptions at_once, late;
    at_once.pipelines = late.pipelines = shape_.pipelines;
    late.clock_latency = latency_;
    const Variability v = variability_->estimator.estimate();
    for (std::size_t d = 0; d < static_cast<std::size_t>(shape_.pipelines); ++d)
      if (const ChosenPlan* plan = plan_of(d))
        cost = std::max(cost, expected_time(*plans_, plan->frequencies, v, late) /
                                      expected_time(*plans_, plan->frequencies, v, at_once) -
                                  1);
    if (ratio <= target * (1 + config_.tolerance / 2) && cost <= config_.tolerance / 4) {
      decide(DecisionEvent::clock_latency,
             fmt::format("{}: the plans running under it measured {:.4f}x the all-max reference over {} rounds, "
                         "within half the tolerance of the target {:.4f}x, and it costs them {:.2f}% by the model: "
                         "kept, and judged again",
                         latency_said_, ratio, judged_.size(), target, 100 * cost));
      // Their rounds were measured against conditions that did not take the latency out.
      judged_.clear();
      rounds_on_plan_ = 0;
      return;
    }
  }
  decide(DecisionEvent::clock_latency, latency_said_ + ": choosing them again");
  ++straggler_changes_;  // the evidence of every verdict on a plan is stale
  choose(DecisionEvent::chosen_for_clock_latency, target_for(target_deadline() / miss_));
}

// A pipeline slow since the baseline that runs faster than that by more than half the straggler
// threshold for as many rounds as detection takes has recovered: its pace is what it runs now. Slow
// by more than half the threshold, whatever it runs now (within the threshold of the others); slow by
// less (a slowdown that GPU spread hid part of), where it now runs no faster than the others by more
// than half the threshold: a speed-up its slowness explains. (One not slower in the baseline that runs
// faster is as likely the others slowing: with two pipelines the ratios cannot tell them apart.)
// Returns whether a pace changed.
bool TurnkeyController::follow_baseline_changes(const std::vector<double>& measured) {
  if (measured.size() < 2 || !pipelines_.known()) return false;
  bool changed = false;
  // A straggler that is a change (not in the baseline): next to it the others would look recovered. A
  // detected one is compared at the slowdown it is followed at; one told, where it runs slower than
  // its own plan predicts, is left out.
  std::vector<double> ratios = measured;
  std::optional<std::size_t> straggling;
  if (straggler_is_a_change() && straggler_->pipeline &&
      static_cast<std::size_t>(*straggler_->pipeline) < ratios.size()) {
    const auto p = static_cast<std::size_t>(*straggler_->pipeline);
    if (!straggler_->told && straggler_->slowdown > 0) ratios[p] /= straggler_->slowdown;
    else if (ratios[p] > 1 + config_.detector.threshold / 2) straggling = p;
  }
  const std::size_t compared = ratios.size() - (straggling ? 1 : 0);  // pipelines judged against each other
  for (std::size_t d = 0; d < ratios.size() && d < pace_change_.size(); ++d) {
    auto& fast = fast_rounds_[d];
    if (d == straggling || compared < 2) {
      fast.clear();
      slow_rounds_[d].clear();
      continue;
    }
    const double pace = relative_pace(d, straggling);
    const double half = config_.detector.threshold / 2;
    const double others = median_of_others(ratios, d, straggling);
    const double relative = ratios[d] / others;
    if (slowed_less_than_a_straggler(d, ratios[d], others)) changed = true;
    // A pipeline on faster GPUs than the others that slowed since (a slowdown taken in, pace_change_ above
    // 1) may still be no slower than them: its recovery is its own time falling, taken down to its pace
    // before that slowdown and no further than half the threshold past it, however far it fell (the
    // baseline's pace may hold part of a slowdown that began within the warm-up; such a fall refused made
    // the other pipeline, running as predicted, a 1.07x straggler that the job was paced to).
    const double slowed_since = pace_change(d);
    const bool slowed_itself = pace <= 1 && slowed_since > 1 + half;
    // Not slower than the others in the first place, and its own conditions show no speed-up (one slow in
    // the baseline on faster GPUs ran at the others' pace there).
    const bool its_conditions_fell = own_conditions_fell(d);
    if (pace <= 1 && !slowed_itself && !its_conditions_fell) {
      fast.clear();
      continue;
    }
    // Next to others that slowed by less than a straggler (their conditions), it looks recovered without
    // having changed: a recovery is its own time falling by more than theirs rose.
    const bool fell_itself = 1 - ratios[d] > others - 1;
    const bool explained = slowed_itself || pace > 1 + half || pace * relative >= 1 - half || its_conditions_fell;
    if (relative < 1 - half && fell_itself && explained) fast.push_back(relative);
    else fast.clear();
    if (fast.size() < static_cast<std::size_t>(std::max(config_.detector.rounds, 1))) continue;
    // Its pace now from those rounds but the first (which may have run slow for part of it): with
    // GPUs faster than the others' (a slowdown of more than it showed in the baseline ended),
    // faster than the others, but not by more than the threshold, which no measured speed
    // difference of GPUs comes near.
    const double since = pace_from_rounds(fast);
    const double now =
        std::max(since, slowed_itself ? (1 - half) / slowed_since : (1 - config_.detector.threshold) / pace);
    take_pace_change(d, now);
    // Training ran at the old pace's reference in those rounds where all-max would have run at the new
    // one (the others' plans paced to the slow pipeline: 25% slower than all-max for two rounds,
    // reported as on time). One no slower than the others set no all-max pace to restate.
    if (!slowed_itself)
      restate_next_ = {std::max(restate_next_.rounds, fast.size()),
                       since < 1 ? std::clamp((1 - fast.front()) / (1 - since), 0.0, 1.0) : 1.0};
    fast.clear();
    changed = true;
    decide(DecisionEvent::slow_pipeline_recovered,
           fmt::format("pipeline {}, {:.3f}x the other pipelines' time at its pace before (the baseline's, or "
                       "one taken since), runs at {:.3f}x now",
                       d, pace, pace * now));
  }
  return changed;
}

// Whether pipeline d's conditions (its GPUs now against its baseline's: its top-clock instructions, or its
// calibrated plan where it runs none there) lie below the other pipelines' by more than half the straggler
// threshold, having fallen by more than theirs rose: a recovery of its own GPUs, not the others slowing,
// however far below the others' pace it takes it (one slow in the baseline on GPUs faster than the others'
// ran at their pace there: refused, the others' plans stayed paced to its old pace and the job ran 1.2%
// slower than all-max).
bool TurnkeyController::own_conditions_fell(std::size_t d) const {
  if (d >= conditions_.size() || conditions_[d] <= 0) return false;
  const auto others = cluster_beside(d, conditions_, true);
  if (!others || *others <= 0) return false;
  const double own = conditions_[d] / pace_change(d);
  return own / *others < 1 - config_.detector.threshold / 2 && 1 - own > *others - 1;
}

// A pipeline whose GPUs slowed by less than a straggler (more than half the threshold, its own time
// rising by more than the others' fell). Paced to a slower one, its plan, paced to the old speed, would
// end the iteration after the pace setter every round; setting the pace (the target plan), it ends every
// iteration that much later and the others keep the slack it gives them. Its new pace is taken as a
// recovery's is, from the rounds in a row it ran slow but the first. Returns whether it was taken.
bool TurnkeyController::slowed_less_than_a_straggler(std::size_t d, double ratio, double others) {
  auto& slow = slow_rounds_[d];
  const double half = config_.detector.threshold / 2;
  const int plan = d < pace_of_.size() ? pace_of_[d] : Assignment::kLeadPlan;  // no plan yet: left alone
  const bool on_target = plan == Assignment::kTargetPlan;
  // On the target plan, slower by the threshold is the straggler detector's to name (and follow until it recovers).
  if (plan == Assignment::kLeadPlan || others <= 0 || (on_target && ratio / others > 1 + config_.detector.threshold) ||
      ratio / others <= 1 + half || ratio - 1 <= 1 - others) {
    slow.clear();
    return false;
  }
  slow.push_back(ratio / others);
  if (slow.size() < static_cast<std::size_t>(std::max(config_.detector.rounds, 1))) return false;
  const double since = pace_from_rounds(slow);
  slow.clear();
  take_pace_change(d, since);
  decide(DecisionEvent::pipeline_slowed,
         fmt::format("pipeline {}, {}, runs {:.3f}x slower than its plan predicts (less than a straggler): its plan "
                     "is paced to its GPUs as they run now",
                     d, on_target ? "on the target plan" : "paced to a slower one", since));
  return true;
}

// A pipeline paced to a detected straggler, or to a pipeline slow in the baseline, that ran slower than
// its plan by more than the straggler threshold in a round in which the pace setter ran as followed (its
// GPUs slowed: it ended the iteration after the pace setter, and training ran that much slower than
// all-max would): the detector confirms it a round later, and every round on the paced plans until
// then costs as much. In that round every pipeline but the pace setter runs the target plan (no slower
// than all-max on GPUs that ran as before); the round after, the detector's verdict assigns the plans
// again. Not in a plan's first round, which may have run part of it on the plan before, nor under a
// power budget's pace, which the target plans would exceed.
bool TurnkeyController::fell_behind_the_straggler(const std::vector<double>& ratios) {
  if (!straggler_ || straggler_->told || !straggler_->pipeline || rounds_on_plan_ < 2 || paced()) return false;
  const auto s = static_cast<std::size_t>(*straggler_->pipeline);
  const double threshold = config_.detector.threshold;
  // A followed straggler runs its slowdown times its plan's prediction; a pipeline slow in the baseline
  // runs its prediction (made on its own GPUs).
  const double expected = straggler_->in_baseline ? 1.0 : straggler_->slowdown;
  if (s >= ratios.size() || expected <= 0 || std::abs(ratios[s] / expected - 1) > threshold / 2) return false;
  for (std::size_t d = 0; d < ratios.size(); ++d) {
    if (d == s || ratios[d] <= 1 + threshold) continue;
    decide(DecisionEvent::behind_the_straggler,
           fmt::format("pipeline {} ran {:.3f}x its plan's prediction while pipeline {} ran as followed: the others "
                       "run the target plan until the straggler detector tells what changed",
                       d, ratios[d], s));
    return true;
  }
  return false;
}

// A detected straggler's slowdown is one round's (its ratio over the others' where detection confirmed
// it, a few tenths of a point off under noise); its rounds on the plans since, each its time over its
// plan's prediction against the others', tell it more precisely. The first round on new plans is left
// out (it may have run part of the round on the plans before).
void TurnkeyController::note_followed_slowdown(const std::vector<double>& ratios) {
  constexpr std::size_t kRounds = 20;
  const bool followed = straggler_is_a_change() && !straggler_->told && straggler_->pipeline;
  if (!followed) {
    followed_ratios_.clear();
    return;
  }
  const auto s = static_cast<std::size_t>(*straggler_->pipeline);
  if (s >= ratios.size() || ratios.size() < 2 || s >= calibration_.size()) return;  // an all-max round
  if (detector_.suspects() || calibration_[s].plan_changed || ratios[s] <= 0) return;
  const double others = median_of_others(ratios, s);
  if (others <= 0) return;
  followed_ratios_.push_back(ratios[s] / others);
  if (followed_ratios_.size() > kRounds) followed_ratios_.erase(followed_ratios_.begin());
}

double TurnkeyController::followed_slowdown() const {
  constexpr std::size_t kEnough = 3;
  if (followed_ratios_.size() < kEnough) return straggler_->slowdown;
  return median(followed_ratios_);
}

// A pipeline's GPUs run `factor` times as long as they did: its plans' predictions take the new pace
// in, their times, over them, as many times its conditions as before.
void TurnkeyController::take_pace_change(std::size_t d, double factor) {
  // The conditions it was calibrated anew from, against the cluster's at its pace before: already the
  // changed pace's (its ratio on the plans before showed it), or still the old one's.
  const auto others = cluster_conditions_beside(d);
  const double pace_before = pace_change_[d];
  pace_change_[d] *= factor;
  if (!straggler_is_a_change()) pace_miss_ = 1;  // measured on the paces before
  if (d < calibration_.size()) {
    auto& cal = calibration_[d];
    const bool changed_already = others && holds_change(cal.anew_conditions / (*others * pace_before), factor);
    // Its plan was calibrated on its first round, a few rounds ago, with nothing suspected then: the
    // change began in that round or later (part of that round's time is the change's, not the plan's
    // error). Its last round ran wholly at the new pace: the plan's calibration is the conditions
    // known then, times the change, over that round's ratio. (Where those conditions held the change
    // already, it is not taken twice: a pipeline slow in the baseline that recovered read 0.72x.)
    const int fresh = std::max(config_.detector.rounds, 1) + 2;
    if (cal.anew_round && round_ - *cal.anew_round <= fresh && cal.last_ratio > 0 && !changed_already)
      cal.per_ratio = cal.anew_conditions * factor / cal.last_ratio;
    cal.anew_round.reset();
    cal.since_anew = {};
    if (cal.per_ratio) *cal.per_ratio *= factor;
    cal.noisy.sum *= factor;
    cal.conditions_changed = true;
  }
  ++straggler_changes_;
}

// A pipeline that slows while a straggler is followed (the detector follows one: the slowest when it
// came) would end the iteration after it: its new pace is taken in as a recovery's is, so that it
// runs a plan for its GPUs as they run now (its recovery is then followed as any pipeline's slow
// pace is, follow_baseline_changes). Returns whether a pace changed.
bool TurnkeyController::follow_slowed_pipelines() {
  bool changed = false;
  for (const Straggler& s : detector_.also_slow()) {
    const auto d = static_cast<std::size_t>(s.pipeline);
    if (d >= pace_change_.size()) continue;
    detector_.forget(s.pipeline);
    take_pace_change(d, s.slowdown);
    changed = true;
    decide(DecisionEvent::pipeline_slowed,
           fmt::format("pipeline {} runs {:.3f}x slower than its plan predicts while pipeline {} is followed as the "
                       "straggler",
                       d, s.slowdown, detector_.current() ? detector_.current()->pipeline : -1));
  }
  return changed;
}

std::size_t TurnkeyController::slowest_pipeline() const {
  std::size_t slowest = 0;
  for (std::size_t d = 1; d < pace_change_.size(); ++d)
    if (pace_now(d) > pace_now(slowest)) slowest = d;
  return slowest;
}

bool TurnkeyController::alike_gpus(std::size_t a, std::size_t b) const {
  constexpr double kAlike = 0.005;  // what the baseline's rounds tell apart is coarser
  std::vector<double> ratios;
  for (const auto& key : operations_) ratios.push_back(pipelines_.speed(a, key) / pipelines_.speed(b, key));
  if (ratios.empty()) return true;
  const double middle = median(ratios);  // how much slower a is as a whole (a pipeline slow since the start)
  return std::all_of(ratios.begin(), ratios.end(), [&](double r) { return std::abs(r / middle - 1) <= kAlike; });
}

Evidence TurnkeyController::evidence() const {
  return {baseline_corrections_, straggler_changes_, reference().conditions};
}

// Back to the saving plan after a step-up: all the way when the evidence against it is stale or
// a retry halfway held; after rounds alone, halfway (the plan predicted to meet the target with
// half the miss measured then), so that a miss that persists costs little and one that ended costs
// two retries.
void TurnkeyController::retry_saving_plan(const std::string& why, bool stale) {
  ChosenPlan before_plan = *target_plan_;
  caution_ = 1;
  steps_since_retry_ = 0;
  // Halfway lies between the plan stepped up to and the saving plan, never past the first: a step-up by
  // what the interval said can be far smaller than the miss measured over a few rounds (a 0.05% step
  // after a 0.88% miss over 4 rounds; half that miss asked a plan faster than all-max).
  const double stepped = before_plan.time > 0 ? target_deadline() / before_plan.time : 1.0;
  miss_ = stale || halfway_held_ ? 1.0 : std::min(1 + (miss_ - 1) / 2, std::max(1.0, 1 + (stepped - 1) / 2));
  if (miss_ < 1.002) miss_ = 1;
  retried_as_condemned_ = !stale && miss_ == 1;
  halfway_held_ = false;
  retry_.retried(round_);
  plan_reason_ = "tried again after a step-up: " + why;
  choose(DecisionEvent::saving_plan_again, target_for(target_deadline() / miss_),
         [this, why, before_plan = std::move(before_plan)](const TargetChoice&) {
           decide(DecisionEvent::retrying,
                  fmt::format("{}: from {} back to {}{}", why, describe(before_plan), describe(*target_plan_),
                              miss_ > 1
                                  ? fmt::format(" (planned for {:.2f}% of the miss measured then)", 100 * (miss_ - 1))
                                  : std::string()));
         });
}

// Closed loop: the plans must not be measurably slower than asked, against what all-max would take
// under the conditions they ran in (a slower cluster or a slow pipeline stretches that as much).
// Not while a power budget's pace or a straggler told through the API is followed (their time is
// given, not the target's), or while a pipeline looks like a straggler that detection has not
// confirmed yet.
void TurnkeyController::judge_plan() {
  std::string why;
  bool stale = false;
  if (retry_.due(round_, evidence(), &why, &stale)) return retry_saving_plan(why, stale);
  const bool followed = straggler_is_a_change();
  if ((followed && straggler_->told) || paced() || detector_.suspects() || rounds_on_plan_ < config_.verify_rounds)
    return;
  if (retry_.held(rounds_on_plan_) && miss_ > 1) {  // halfway held: all the way next
    halfway_held_ = true;
    retry_.wait(round_, evidence());
  }
  const bool at_all_max = target_plan_->is_all_max();
  // The plan's rounds against the reference (outlying rounds left out), against the target with
  // both uncertainties: a step-up only when even the low end of the 95% interval is above the
  // tolerance. Without noise the interval is the point; with it, the evidence grows with every
  // round on the plan, so a plan measurably too slow is caught, and one that only looks so in a
  // few noisy rounds is not.
  const Estimate plan_ratio =
      at_least_as_wide(robust_mean(judged_), judged_.size(), round_spread_floor(baseline_.time()) / baseline_.time());
  const double baseline_half = (baseline_.time_estimate().high - baseline_.time_estimate().low) / 2 / baseline_.time();
  const double ratio = plan_ratio.value;
  const double ratio_half = std::hypot((plan_ratio.high - plan_ratio.low) / 2, ratio * baseline_half);
  const double target = target_time() / baseline_.time();
  // Following a straggler, the others are paced earlier; once they have been (or they end well before
  // it) and the straggler still computes longest, its own plan is what runs too slow: it gives up its
  // allowance, and measured too slow again, the target plan it is chosen beside steps up. A
  // pipeline slow since the baseline runs the target plan and the others are paced to it: with the
  // target at all-max, only their pace can be too slow.
  const bool straggler_paces = followed && !target_sets_the_pace();
  const bool paced_to_a_change = straggler_paces && !straggler_sets_the_pace(ratio / target);
  const bool only_the_pace =
      paced_to_a_change || (at_all_max && straggler_ && straggler_->in_baseline && !straggler_->told);
  // Pacing the others a little earlier than a straggler that came costs little of their saving (their
  // slack is its slowdown): their pace is held to half the tolerance. The straggler's own plan keeps the
  // whole tolerance: held to half, it gave up more of its saving than the hundredths of a point it won.
  // The saving plan back after rounds alone was measured too slow before, on evidence still current: what
  // its new rounds need to show to condemn it again is less (three quarters of the tolerance). A plan truly
  // a little over the tolerance would otherwise stay, its interval straddling it, after a lucky start; at
  // half, plans a quarter of a point slow, well within it, were condemned too.
  const double allowed = paced_to_a_change       ? config_.tolerance / 2
                         : retried_as_condemned_ ? config_.tolerance * 3 / 4
                                                 : config_.tolerance;
  if (ratio - ratio_half <= target * (1 + allowed)) return;
  if (only_the_pace) return pace_straggler_faster(ratio, ratio_half, target, allowed);
  if (straggler_paces && !lead_without_allowance_) return step_straggler_plan_up(ratio, ratio_half, target, allowed);
  if (const auto overrun = paced_pipeline_overrun()) return pace_paced_pipelines_earlier(*overrun);
  if (at_all_max) return;  // what the baseline measured: nothing to step to
  if (probe_before_verdict(ratio, ratio_half, target)) return;
  ChosenPlan before_plan = *target_plan_;
  // The plan condemned last time, back after rounds alone and condemned again with no change of the
  // evidence in between: its miss is its own (a clock the profile measured faster than it runs, a model
  // that misses it under the noise), and rounds do not make it stale. A saving plan stepped up to stays
  // until the evidence is stale; after a step to all-max, retries still come after rounds (a disturbance
  // costs its rounds, not the run).
  const bool condemned_again = retried_as_condemned_ && condemned_plan_ == target_plan_->frequencies;
  condemned_plan_ = target_plan_->frequencies;
  TargetChooser next;
  if (steps_since_retry_ >= config_.max_step_ups) {
    next = [](const ChoiceContext& c) { return TargetChoice{all_max(*c.plans)}; };
  } else {
    // Correct the prediction by what was measured and take the next plan that then meets the target.
    const double all_max_time = plans_->all_max().time;
    const double faster = target_plan_->time * (1 - config_.tolerance / 2);
    const double correction = ratio * all_max_time / target_plan_->time;
    // The more cautious plan is predicted faster by at least what the measured interval's low end is
    // above the tolerance: a plan condemned by a hair steps to the next plan, not a point and more
    // faster (near the top of a steep frontier, that is all-max and the whole saving).
    const double beyond = std::max(0.0, (ratio - ratio_half) / (target * (1 + allowed)) - 1);
    miss_ = std::max(1.0, correction);
    retried_as_condemned_ = false;
    next = [current = *target_plan_, corrected = std::min(target * all_max_time / correction, faster),
            cautious = std::min(target_deadline(), target_plan_->time * (1 - beyond))](const ChoiceContext& c) {
      const NoiseAwareOptions options = target_options(c);
      TargetChoice out{plan_choice::step_up(*c.plans, current, corrected, c.cautious(), options)};
      if (out.plan.is_all_max()) {
        // Only all-max meets the corrected time: under noise the miss is the model's (it grows with
        // how many paths a plan balances), not an offset every plan shares. The next, more cautious
        // plan instead: judged under more noise, predicted faster than the one that missed.
        ChoiceContext more = c;
        more.caution *= kCautionStep;
        out.caution_factor = kCautionStep;
        out.plan = plan_choice::step_up(*c.plans, current, cautious, more.cautious(), options);
      }
      return out;
    };
  }
  ++step_ups_;
  ++steps_since_retry_;
  choose(DecisionEvent::faster_plan, std::move(next),
         [this, ratio, ratio_half, target, allowed, condemned_again,
          before_plan = std::move(before_plan)](const TargetChoice&) {
           retry_.stepped_up(round_, verdict_evidence(), condemned_again && !target_plan_->is_all_max());
           judged_conditions_.reset();
           const std::string evidence_text = fmt::format(
               "measured {:.4f}x the all-max reference (95%: from {:.4f}x with the baseline's "
               "uncertainty, over {} rounds)",
               ratio, ratio - ratio_half, judged_.size());
           plan_reason_ = fmt::format("stepped up: {} was above the target {:.4f}x by more than {:.2g}%", evidence_text,
                                      target, 100 * allowed);
           decide(DecisionEvent::stepped_up,
                  fmt::format("{} is above the target {:.4f}x by more than {:.2g}%: from {} to {}; the saving "
                              "plan is tried again when this evidence is stale{}",
                              evidence_text, target, 100 * allowed, describe(before_plan), describe(*target_plan_),
                              retry_.stale_only() ? " (it missed twice on it)"
                                                  : fmt::format(", or after {} rounds", retry_.interval())));
         });
}

// A verdict before the deployment's first all-max probe, on a plan whose rounds no probe measured the
// conditions of, with a miss within what a 2% change of them hides (a step of drift in the plans' first
// rounds, taken in part into their calibration, reads as their own slowness): one probe first. Not where
// one round's spread could make the miss (one noisy probe would move the calibration by as much).
bool TurnkeyController::probe_before_verdict(double ratio, double ratio_half, double target) {
  constexpr double kHiddenChange = 0.02;
  if (config_.probe_every <= 0 || hold_probes_ || straggler_is_a_change() || probes_ > 0 ||
      rounds_since_probe_ < rounds_on_plan_ || ratio - ratio_half > target * (1 + kHiddenChange))
    return false;
  const double spread = std::max(sample_stddev(judged_), round_spread_floor(baseline_.time()) / baseline_.time());
  if (2 * spread >= ratio - target) return false;
  probe_to_judge_ = true;
  return true;
}

Evidence TurnkeyController::verdict_evidence() const {
  Evidence e = evidence();
  if (judged_conditions_) e.conditions = *judged_conditions_;
  return e;
}

// Whether a pipeline that sets the pace itself (the target plan or the pace setters' plan, not one
// paced to another) computed longest of all, over the rounds on these plans, and it is not the followed
// straggler: a pipeline slow since the baseline that a straggler slower by less does not outrun.
// Pacing the others earlier cannot make it faster: its plan steps up.
bool TurnkeyController::target_sets_the_pace() const {
  if (!straggler_ || !straggler_->pipeline || compute_time_sums_.empty()) return false;
  const auto longest = static_cast<std::size_t>(std::max_element(compute_time_sums_.begin(), compute_time_sums_.end()) -
                                                compute_time_sums_.begin());
  return longest != static_cast<std::size_t>(*straggler_->pipeline) && longest < pace_of_.size() &&
         (pace_of_[longest] == Assignment::kTargetPlan || pace_of_[longest] == Assignment::kLeadPlan);
}

// Whether the followed straggler computed longest of all pipelines over the rounds on these plans,
// after the others were paced earlier than it at least once, or before, where the others computed
// shorter than it by more than the `miss` measured: pacing them earlier by it would not move the
// iteration's end.
bool TurnkeyController::straggler_sets_the_pace(double miss) const {
  if (!straggler_ || !straggler_->pipeline) return false;
  const auto s = static_cast<std::size_t>(*straggler_->pipeline);
  if (s >= compute_time_sums_.size()) return false;
  const double others_ahead = pace_miss_ > 1 ? 1.0 : miss;
  for (std::size_t d = 0; d < compute_time_sums_.size(); ++d)
    if (d != s && compute_time_sums_[d] * others_ahead >= compute_time_sums_[s]) return false;
  return true;
}

// With no straggler followed, how much longer than the pace setters (the pipelines on the target or
// the lead plan) the pipelines on plans paced to them computed over the rounds on these plans, where
// more than by half the tolerance. Their speed was measured over a few rounds (a recovery's) and they
// run slower than that said: taken 0.4% faster, a recovered pipeline ended every iteration 0.3-0.8%
// after the pace setter, and the target plan stepped up to all-max and back three times without moving
// that end. (Within half the tolerance, which pipeline computes longest is the noise's draw.)
std::optional<double> TurnkeyController::paced_pipeline_overrun() const {
  if (straggler_is_a_change() || compute_time_sums_.empty()) return std::nullopt;
  double paced = 0, setters = 0;
  for (std::size_t d = 0; d < compute_time_sums_.size() && d < pace_of_.size(); ++d) {
    double& longest = pace_of_[d] >= 0 ? paced : setters;
    longest = std::max(longest, compute_time_sums_[d]);
  }
  if (setters <= 0 || paced <= setters * (1 + config_.tolerance / 2)) return std::nullopt;
  return paced / setters;
}

// Pipelines on plans paced to others ended the iteration later than the pace setters by `overrun`:
// they are paced earlier by it. The target plan is not condemned: the rounds on the new paces judge it.
void TurnkeyController::pace_paced_pipelines_earlier(double overrun) {
  const double before = pace_miss_;
  pace_miss_ *= overrun;
  decide(DecisionEvent::stepped_up,
         fmt::format("the pipelines paced to others computed {:.4f}x the pace setters' time over {} rounds: paced "
                     "for {:.2f}% of miss (from {:.2f}%)",
                     overrun, judged_.size(), 100 * (pace_miss_ - 1), 100 * (before - 1)));
  assign_plans(DecisionEvent::paced_earlier);
}

// A detected straggler followed: the straggler's plan and the others' pace are each chosen to the
// tolerance, and pipelines of about equal pace under noise end later together than the model of
// each says; measured too slow, the others are paced earlier by the miss measured (the straggler
// keeps its plan: making it faster costs far more of the saving).
void TurnkeyController::pace_straggler_faster(double ratio, double ratio_half, double target, double allowed) {
  if (steps_since_retry_ >= config_.max_step_ups) return;
  const double before = pace_miss_;
  pace_miss_ *= ratio / target;
  count_step_up_beside_the_target();
  decide(DecisionEvent::stepped_up,
         fmt::format("following the straggler, measured {:.4f}x the all-max reference at its pace (95%: from "
                     "{:.4f}x, over {} rounds), above the target {:.4f}x by more than {:.2g}%: the others paced "
                     "for {:.2f}% of miss (from {:.2f}%)",
                     ratio, ratio - ratio_half, judged_.size(), target, 100 * allowed, 100 * (pace_miss_ - 1),
                     100 * (before - 1)));
  assign_plans(DecisionEvent::faster_pace_for_straggler);
}

// A followed straggler computed longest and its own plan measured too slow: the model's miss on it is
// its own (the plan was chosen on its GPUs, far down the frontier, and ran 0.3-0.5% slower than
// predicted where the target plan ran 0.1% so). Its next plan is chosen without the allowance a plan
// may take on purpose, until the straggler changes (a retry after rounds keeps it); the target plan
// steps up only where it still runs too slow then. Stepped up the target plan's way first, the
// straggler's plan moved one frontier point and each retry brought it back.
void TurnkeyController::step_straggler_plan_up(double ratio, double ratio_half, double target, double allowed) {
  lead_without_allowance_ = true;
  count_step_up_beside_the_target();
  decide(DecisionEvent::stepped_up,
         fmt::format("the followed straggler's own plan measured {:.4f}x the all-max reference at its pace (95%: "
                     "from {:.4f}x, over {} rounds), above the target {:.4f}x by more than {:.2g}%: it is chosen "
                     "again without the allowance",
                     ratio, ratio - ratio_half, judged_.size(), target, 100 * allowed));
  judge_on_new_rounds();  // the plan chosen anew or not
  assign_plans(DecisionEvent::faster_plan);
}

// A step-up that condemned a pace or the followed straggler's own plan, not the target plan: counted as
// the target plan's are, and retried after rounds as they are.
void TurnkeyController::count_step_up_beside_the_target() {
  condemned_plan_.clear();
  ++step_ups_;
  ++steps_since_retry_;
  retry_.stepped_up(round_, evidence());
}

// The plans are judged on the rounds from now on only.
void TurnkeyController::judge_on_new_rounds() {
  judged_.clear();
  compute_time_sums_.clear();
  rounds_on_plan_ = 0;
}

}  // namespace perseus::online
