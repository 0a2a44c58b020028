// TurnkeyController's conditions: each pipeline's pace now against the baseline's, measured at the
// top clock or through its plan's calibration, and the all-max reference they make.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "perseus/online/turnkey_controller.hpp"
#include "turnkey_controller_detail.hpp"

namespace perseus::online {

using namespace turnkey_detail;

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

}  // namespace

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
  const double round_sigma = relative_round_spread();
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

}  // namespace perseus::online
