// TurnkeyController and slow pipelines: stragglers detected or told, pipelines slow in the baseline
// or slowed since, their recoveries, and each pipeline's change of pace.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "perseus/online/turnkey_controller.hpp"
#include "turnkey_controller_detail.hpp"

namespace perseus::online {

using namespace turnkey_detail;

namespace {

// Whether conditions at `relative` times the others' hold a change of `factor` already: nearer it than
// none.
bool holds_change(double relative, double factor) { return std::abs(relative - factor) < std::abs(relative - 1); }

// A pace from the rounds in a row that showed it, but the first (which may have run the old pace for part
// of it), unless it is the only one.
double pace_from_rounds(const std::vector<double>& rounds) {
  return median(std::vector<double>(rounds.size() > 1 ? rounds.begin() + 1 : rounds.begin(), rounds.end()));
}

}  // namespace

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
// A pipeline slow in the baseline (or slowed since) that now runs measurably faster than it was expected
// to is recovering (follow_baseline_changes), not leaving the others behind: to the detector it runs as
// expected, or no faster than the others, or with two pipelines the other, running as predicted,
// would look a straggler. Returns whether the verdict changed.
bool TurnkeyController::observe_straggler(const RoundMeasurement& m, std::vector<double> ratios) {
  const double threshold = config_.detector.threshold;
  const double half = threshold / 2;
  if (pipelines_.known() && ratios.size() > 1)
    for (std::size_t d = 0; d < ratios.size(); ++d) {
      // Not slow in the baseline, nor slowed since (a pipeline whose slowdown was taken in as its pace,
      // and recovers, beside one slower all along: that one read 1.06x a straggler).
      if (relative_pace(d) <= 1 + half && pace_change(d) <= 1 + half) continue;
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
  straggler_verdict_changed(m, before);
  return !told_straggler_;
}

// What follows any change of the detector's verdict (`before`: whether one was followed before it).
void TurnkeyController::straggler_verdict_changed(const RoundMeasurement& m, bool before) {
  followed_ratios_.clear();
  ++straggler_changes_;
  pace_miss_ = 1;  // measured on the straggler before
  lead_without_allowance_ = false;
  if (told_straggler_) return;
  const auto& now = detector_.current();
  if (now) {
    decide(before ? DecisionEvent::straggler_changed : DecisionEvent::straggler_detected,
           fmt::format("pipeline {} runs {:.3f}x slower than the others ({:.6g} s compute-bound){}", now->pipeline,
                       now->slowdown, m.pipeline_time[static_cast<std::size_t>(now->pipeline)],
                       phase_ == ControllerPhase::deployed ? "" : fmt::format(" while {}", to_string(phase_))));
  } else {
    decide(DecisionEvent::straggler_recovered, "every pipeline is back within the threshold");
  }
}

// A detected straggler in an all-max round (a probe): every pipeline at the top clock, so its
// compute-bound time in units of its baseline pace within half the threshold of the others' median says
// it ended, a round before its own plan's round would (the others' plans, paced to it, ran 15% slower
// than all-max that round). The compute-bound time, as detection measures it: one slow GPU of a pipeline
// moves it, not the median of its instructions' conditions. Returns whether it was cleared.
bool TurnkeyController::straggler_ended_at_top_clock(const RoundMeasurement& m) {
  const auto& straggler = detector_.current();
  if (!straggler || told_straggler_ || !pipelines_.known()) return false;
  const auto s = static_cast<std::size_t>(straggler->pipeline);
  const auto ratios = paced_ratios(m, false);
  if (s >= ratios.size() || ratios.size() < 2) return false;
  if (ratios[s] > median_of_others(ratios, s) * (1 + config_.detector.threshold / 2)) return false;
  detector_.reset();
  straggler_verdict_changed(m);
  return true;
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

}  // namespace perseus::online
