// TurnkeyController judging its plans: probes, rounds on the plans against the reference, the clock
// latency, step-ups and retries, and the pace beside a straggler.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "perseus/online/turnkey_controller.hpp"
#include "turnkey_controller_detail.hpp"

namespace perseus::online {

using namespace turnkey_detail;

namespace {

// The target plan anew for the target with the miss to spare, under the measured noise.
std::function<TargetChoice(const ChoiceContext&)> target_for(double deadline) {
  return [deadline](const ChoiceContext& c) {
    return TargetChoice{plan_choice::choose_plan_under_noise(*c.plans, deadline, c.cautious(), target_options(c))};
  };
}

constexpr double kCautionStep = 1.5;  // each step-up judges plans under this much more noise

// Rounds on a plan that judge it: enough for a noisy cluster's evidence, few enough to follow a drift.
constexpr std::size_t kJudgedRounds = 40;

}  // namespace

void TurnkeyController::count_round_since_probe() {
  ++rounds_since_probe_;
  straggler_rounds_since_probe_ = straggler_is_a_change() ? straggler_rounds_since_probe_ + 1 : 0;
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
  if (straggler_ended_at_top_clock(m)) return assign_plans(DecisionEvent::back_to_target_plan);
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
