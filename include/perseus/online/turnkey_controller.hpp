#pragma once
// The turnkey loop as a controller of its own: rounds measured go in, each round's
// clocks per pipeline and the decisions taken come out. It measures the all-max baseline, profiles
// every (model stage, kind) its schedule runs online (the split backward parts and overlapped
// pairs included; clocks top down, coarse to fine, early stop, every stage and kind at
// once), plans on a worker thread, deploys the cheapest plan that meets the target, verifies it
// against the baseline under the current conditions and steps to faster plans when it is measurably
// slower, and slows the other pipelines down to a straggler's pace (detected from the measured
// instruction durations, or told) until it recovers. No I/O: the caller runs the ranks, turns their
// results into RoundMeasurements and shows the state. Deterministic given the rounds (and the
// plans), so that replaying a job's rounds into a new controller restores it.
#include <array>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "perseus/online/background_planner.hpp"
#include "perseus/online/clock_latency_estimate.hpp"
#include "perseus/online/clock_scan.hpp"
#include "perseus/online/decision_event.hpp"
#include "perseus/online/noise_aware_choice.hpp"
#include "perseus/online/all_max_baseline.hpp"
#include "perseus/online/deployed_rounds.hpp"
#include "perseus/online/pipeline_baseline.hpp"
#include "perseus/online/reference_model.hpp"
#include "perseus/online/retry_policy.hpp"
#include "perseus/online/power_allocation.hpp"
#include "perseus/online/round_measurement.hpp"
#include "perseus/online/statistics.hpp"
#include "perseus/online/straggler_detector.hpp"
#include "perseus/pipeline/shape.hpp"
#include "perseus/pipeline/schedule.hpp"
#include "perseus/profile/profile.hpp"

namespace perseus::online {

namespace choice {
struct ChoiceContext;
struct TargetChoice;
}  // namespace choice

struct ControllerConfig {
  // Top-clock rounds before profiling. The first carries start-up effects; the others are the
  // baseline, less rounds in which a pipeline was slower than the rest and outliers in time or
  // energy (median +- 3.5 scaled MADs). More rounds, up to max_baseline_rounds, while too few are
  // clean or the baseline's time is not yet known to within baseline_precision (the half-width
  // of its 95% interval, a fraction of it): on a noisy cluster a short baseline would condemn or
  // pass plans by its own error.
  int warmup_rounds = 5;
  double baseline_precision = 0.001;
  int max_baseline_rounds = 40;
  // Hold the rounds while planning or choosing plans (else: they run the top clock or the current plans).
  bool wait_for_plan = false;
  bool interpolate = true;  // plan with the clocks between measured ones too (interpolated)
  // While profiling, one all-max round after every this many rounds (and one at the end) measures the
  // cluster's conditions: clocks measured while they changed are measured again, and every clock's
  // measurement is taken at the baseline's conditions, so that a slow spell during profiling does
  // not make the profile inconsistent (0: no such rounds). A round whose clocks all come out more
  // than 3% off their scans' curves is followed by such a round at once.
  int check_every = 4;
  int refine_passes = 0;  // measure the interpolated clocks a plan runs, then plan again
  // Under noise, measure once more the clocks a plan runs that one round knows to worse than
  // confirm_error (relative standard error of the time), then plan again: the planner picks the
  // clocks that measured luckiest, and a plan built on them runs slower than predicted.
  int confirm_passes = 2;
  double confirm_error = 0.001;
  double slowdown = 1.0;
  std::optional<double> deadline;
  // How much slower than the target a plan may measure before it is stepped up. The measurement's and
  // the model's errors (about a tenth of a point) come on top, and a plan is condemned only by the low
  // end of its interval, which holds the baseline's uncertainty (0.1%) however long the plan runs: at
  // 0.35% a plan truly half a percent slow is condemned (at 0.4% one ran 0.55% slow for 64 rounds).
  double tolerance = 0.0035;
  int verify_rounds = 3;
  int max_step_ups = 8;
  // While deployed, one all-max round every this many rounds re-checks the baseline (0: never).
  int probe_every = 40;
  // Every step-up is provisional: the saving plan is tried again at once when the evidence that
  // condemned it is stale (a corrected baseline, a straggler that came or went, the cluster's pace
  // changed by more than 1%), and otherwise after retry_after rounds, doubling with each retry that
  // fails again up to max_retry_after (0: never retried).
  int retry_after = 20;
  int max_retry_after = 40;
  // Deployed rounds that saving and slowdown are measured over.
  int report_rounds = 60;
  std::optional<double> unit_time;
  CostModelKind cost_model = CostModelKind::automatic;
  // Seconds until a locked clock takes effect on the GPUs; none: measured while deployed (how much
  // longer an instruction takes right after a change of clock than without one).
  std::optional<double> clock_latency;
  ScanOptions scan;
  DetectorOptions detector;
};

// The job as the controller sees it: its pipelines' shape (any schedule of the registry), and how
// many run side by side.
struct JobShape : PipelineShape {
  int pipelines = 1;        // data parallel
  std::vector<int> clocks;  // every rank supports these, descending
  int gpus_per_stage = 1;   // tensor parallel: GPUs that run one stage of one pipeline
};

enum class ControllerPhase { warmup, profiling, planning, deployed };
const char* to_string(ControllerPhase phase);

struct Decision {
  int round = 0;
  DecisionEvent event;
  std::string detail;
};

// What the controller is told of a straggler (POST /straggler): exactly one of slowdown (times the
// baseline time) and iteration_time (seconds); the slow pipeline when known.
struct StragglerTold {
  std::optional<double> slowdown, iteration_time;
  std::optional<int> pipeline;
};

struct ActiveStraggler {
  std::optional<int> pipeline;  // the slow pipeline, when known
  double slowdown = 1;          // its all-max time over the other pipelines' (their median)
  double compute_time = 0;      // its compute-bound iteration time (the model's terms): what the others slow down to
  bool told = false;            // through the API, not detected
  bool in_baseline = false;     // slow since the baseline: part of the all-max reference, not a change
};

// Clocks for one round: per pipeline, per stage, per slot of the stage's schedule (forwards and
// backwards only); none: every rank at its top clock.
using RoundClocks = std::optional<std::vector<std::vector<std::vector<int>>>>;

struct ControllerHooks {
  std::function<void(const Decision&)> decided = [](const Decision&) {};
  std::function<void(const Profile&)> profiled = [](const Profile&) {};  // the profile measured online
  // From the planner's or the chooser's thread: ready() may have become true.
  std::function<void()> wake = [] {};
  // On the chooser's thread before each plan choice (tests hold a choice there).
  std::function<void()> choosing = [] {};
  std::filesystem::path record_dir;  // where the planner writes the frontier; empty: nowhere
  std::string profile_source;        // the profile's name in the frontier record
};

class TurnkeyController {
 public:
  // `reused`: a profile to plan from instead of profiling. Throws std::invalid_argument on a bad shape.
  TurnkeyController(ControllerConfig config, JobShape shape, std::optional<Profile> reused = std::nullopt,
                    ControllerHooks hooks = {});
  ~TurnkeyController();
  TurnkeyController(const TurnkeyController&) = delete;
  TurnkeyController& operator=(const TurnkeyController&) = delete;

  // Whether next_round() can answer now: takes what planning and plan choices finished (on the
  // caller's thread, as every other call). False only with wait_for_plan while planning or a plan
  // choice runs; without it the rounds run the current plans (or the top clock) meanwhile.
  bool ready();
  RoundClocks next_round();
  void observe(const RoundMeasurement& m);
  void set_straggler(const std::optional<StragglerTold>& told);
  // Whether observe() wants RoundMeasurement::occurrences filled for the round it is running.
  bool wants_occurrences() const;

  // --- pacing under a cluster power budget (turnkey_pacing.cpp) ---
  // What the job can run, deployed (empty before): the unpaced plans first (the target's time, or a
  // straggler's), then slower paces along the frontier, at most `most` in all, evenly spaced along it.
  std::vector<PaceOption> pace_options(std::size_t most) const;
  // From the next round, every pipeline runs the cheapest plan that finishes by `iteration_time`
  // (measured seconds) where that is slower than it runs unpaced; none: unpaced. `hold_probes`: no
  // all-max probe round meanwhile (a budget it would break).
  void set_pace(std::optional<double> iteration_time, bool hold_probes = false);
  std::optional<double> pace() const;  // measured seconds; none when unpaced
  bool probes_held() const { return hold_probes_; }
  // The unpaced job with every GPU's power limit at `watts`: each instruction at the highest clock
  // at or below its plan's whose power fits (what a GPU's power limit does); none before deployment.
  std::optional<PaceOption> under_power_limit(double watts) const;

  // --- state, for status pages ---
  ControllerPhase phase() const { return phase_; }
  int round() const { return round_; }
  const JobShape& shape() const { return shape_; }
  const ControllerConfig& config() const { return config_; }
  bool reused_profile() const { return reused_; }
  int profiling_rounds() const { return profiling_rounds_; }
  int profiling_checks() const { return profiling_checks_; }  // of those, all-max check rounds
  std::size_t clocks_measured() const;
  std::size_t clocks_planned() const;
  bool has_baseline() const { return baseline_.rounds() > 0; }
  double baseline_time() const { return baseline_.time(); }
  double baseline_energy() const { return baseline_.energy(); }
  const Estimate& baseline_time_estimate() const { return baseline_.time_estimate(); }
  const Estimate& baseline_energy_estimate() const { return baseline_.energy_estimate(); }
  int baseline_rounds() const { return baseline_.rounds(); }
  int baseline_rejected() const { return baseline_.rejected(); }
  int probes() const { return probes_; }
  // The reference now; the baseline itself before deployment.
  Reference reference() const;
  // The reference under these conditions (per pipeline, each holding its change of pace).
  Reference reference_under(const std::vector<double>& conditions) const;
  // Why the target plan is the one it is (deployed, stepped up, retried, ...).
  const std::string& plan_reason() const { return plan_reason_; }
  // Log-normal sigma per stage and kind, measured in warm-up and profiling rounds.
  std::vector<std::array<double, 2>> variability() const;
  std::optional<double> p_block() const { return p_block_; }
  double target_time() const;
  const PlanningOutput* plans() const { return plans_ ? &*plans_ : nullptr; }
  const ChosenPlan* target_plan() const { return target_plan_ ? &*target_plan_ : nullptr; }
  // The plan pipeline d runs; null before deployment.
  const ChosenPlan* plan_of(std::size_t pipeline) const;
  double scale() const { return scale_; }  // measured all-max time over the model's
  int step_ups() const { return step_ups_; }
  const std::optional<ActiveStraggler>& straggler() const { return straggler_; }
  // What detection says now, in every phase (before deployment nobody slows down for it yet).
  const std::optional<Straggler>& detected_straggler() const { return detector_.current(); }
  // Mean of the rounds on the current plans; none before any.
  using Measured = MeasuredRounds;
  std::optional<Measured> measured() const { return report_.measured(); }
  // Against reference(): 1 - energy/reference energy and time/reference time - 1 (each round's,
  // averaged over the last report_rounds deployed rounds, probes and plan changes included: what
  // training got), with 95% intervals.
  std::optional<Estimate> saving() const;
  std::optional<Estimate> slowdown() const;
  // Joules saved so far: per deployed round (probes included), (reference - measured energy per
  // iteration) x the round's iterations.
  double energy_saved() const { return report_.energy_saved(); }
  long long deployed_iterations() const { return report_.iterations(); }  // in those rounds
  const std::vector<double>& last_pipeline_time() const { return last_pipeline_time_; }
  const std::vector<double>& last_pipeline_energy() const { return last_pipeline_energy_; }
  const std::vector<Decision>& decisions() const { return decisions_; }
  // Clock changes the ranks made while deployed, and how many had not taken effect by the end of
  // their instruction; the clock latency plans are chosen for (seconds) and whether it was measured.
  long long clock_changes() const { return clock_changes_; }
  long long clocks_late() const { return clocks_late_; }
  double clock_latency() const { return latency_; }
  std::size_t latency_samples() const { return latency_samples_.size(); }

 private:
  // Defined by part: the rounds and the choices (turnkey_controller.cpp), the warm-up, profiling and
  // planning (turnkey_profiling.cpp), slow pipelines and stragglers (turnkey_stragglers.cpp), the
  // conditions and the reference (turnkey_conditions.cpp), judging the plans (turnkey_judging.cpp).
  using ScanClock = std::pair<std::size_t, int>;  // a profiling scan's index and one of its clocks
  struct Variability choice_variability() const;  // what plans are chosen under (caution_ included)
  void decide(DecisionEvent event, const std::string& detail);
  std::size_t scan_index(const StageKind& operation) const;
  std::size_t scan_index(const Instruction& inst) const;
  double target_deadline() const;
  std::function<double(double)> target_deadline_rule() const;
  double median_time_error() const;
  void add_baseline(const RoundMeasurement& m);
  void estimate_baseline();
  std::vector<double> paced_ratios(const RoundMeasurement& m, bool on_plans) const;
  std::vector<bool> disturbed_pipelines(const RoundMeasurement& m) const;
  std::optional<ClockMeasurement> clean_instruction(const RoundMeasurement& m, const std::vector<bool>& disturbed,
                                                    const StageKind& key) const;
  std::optional<ClockMeasurement> baseline_top_clock(const std::vector<bool>& disturbed, const StageKind& key) const;
  std::optional<std::vector<std::vector<double>>> latency_loss(const ChosenPlan& plan) const;
  // `plan_ratios`: paced_ratios(m, true) of a round on the plans; null for an all-max round.
  void measure_conditions(const RoundMeasurement& m, const std::vector<double>* plan_ratios);
  void forget_conditions_since_all_max();
  std::optional<double> calibration_on_others(std::size_t pipeline, const std::vector<double>& ratios) const;
  double straggler_conditions_known(std::size_t pipeline) const;
  std::optional<double> others_conditions(std::size_t pipeline) const;
  std::optional<double> cluster_conditions_beside(std::size_t pipeline) const;
  std::optional<double> cluster_beside(std::size_t pipeline, const std::vector<double>& conditions,
                                       bool but_straggler) const;
  void add_variability(const RoundMeasurement& m);
  double round_spread_floor(double iteration_time) const;
  double relative_round_spread() const;  // round_spread_floor at the baseline's time, over it (0: no baseline)
  double relative_pace(std::size_t pipeline, std::optional<std::size_t> also = std::nullopt) const;
  bool observe_straggler(const RoundMeasurement& m, std::vector<double> ratios);
  double recheck_band() const;
  void straggler_verdict_changed(const RoundMeasurement& m, bool before = true);
  bool straggler_ended_at_top_clock(const RoundMeasurement& m);
  void observe_probe(const RoundMeasurement& m);
  bool agree_as_baseline_rounds(const AllMaxRound& round, double time, double energy) const;
  void join_short_baseline(const RoundMeasurement& m, double conditions, const std::vector<bool>& disturbed);
  bool baseline_precise() const;
  void correct_baseline(double time, double energy);
  void judge_plan();
  bool probe_before_verdict(double ratio, double ratio_half, double target);
  Evidence verdict_evidence() const;
  void rejudge_under_probe(const Reference& judged_under);
  bool slowed_less_than_a_straggler(std::size_t d, double ratio, double others);
  void retry_saving_plan(const std::string& why, bool stale);
  void remember(const RoundMeasurement& m);
  void observe_warmup(int round, const RoundMeasurement& m);
  void note_slow_pipelines(int level_from);
  void observe_profiling(const RoundMeasurement& m);
  void observe_deployed(const RoundMeasurement& m);
  bool measure_latency(const RoundMeasurement& m);
  void choose_for_latency();
  bool follow_baseline_changes(const std::vector<double>& measured);
  bool own_conditions_fell(std::size_t pipeline) const;
  // The pipeline slowest at all-max on its GPUs as they run now (the one that sets the pace).
  std::size_t slowest_pipeline() const;
  // Whether pipelines a and b run their (model stage, kind)s at about the same relative speeds (one may be
  // slower than the other as a whole).
  bool alike_gpus(std::size_t a, std::size_t b) const;
  bool straggler_wants_probe() const;
  void count_round_since_probe();
  bool follow_slowed_pipelines();
  bool fell_behind_the_straggler(const std::vector<double>& ratios);
  void take_pace_change(std::size_t d, double factor);
  void follow_the_others_since_anew(const std::vector<std::optional<double>>& measured);
  void note_followed_slowdown(const std::vector<double>& ratios);
  double followed_slowdown() const;
  bool profiling_done() const;
  bool may_measure_again(std::size_t clocks) const;
  std::size_t measure_again(std::initializer_list<const std::vector<ScanClock>*> rounds);
  std::optional<double> all_max_conditions(const RoundMeasurement& m, std::size_t d) const;
  std::vector<double> conditions_like_the_others(const RoundMeasurement& m, const std::vector<bool>& disturbed) const;
  void observe_check(const RoundMeasurement& m);
  bool recovered_not_straggling(const RoundMeasurement& m);
  RoundClocks profiling_clocks();
  void finish_profiling();
  void start_planning(Profile profile);
  void plan_ready();
  std::size_t ask_scans(const ChosenPlan& plan, const std::function<bool(ClockScan&, int)>& ask);
  void profile_again();
  void deploy_plan();
  void deployed();  // the deployment's target plan is in place
  std::map<StageKind, double> speeds_of(std::size_t d, const std::optional<ActiveStraggler>& straggling) const;
  void assign_plans(DecisionEvent why);
  RoundClocks plan_clocks() const;
  std::string describe(const ChosenPlan& plan) const;
  std::optional<ActiveStraggler> followed_straggler() const;  // told first, then detected
  choice::ChoiceContext choice_context() const;
  // Starts a plan choice on the chooser's thread (or queues it behind the one running): a new
  // target plan when `target` is given (then `chosen` runs with it, on this thread, before the
  // assignment's decision), and every pipeline's plan. Rounds keep their plans until it is taken.
  using TargetChooser = std::function<choice::TargetChoice(const choice::ChoiceContext&)>;
  void choose(DecisionEvent why, TargetChooser target = {},
              std::function<void(const choice::TargetChoice&)> chosen = {});
  void start_next_choice();
  void take_choice();
  // Takes finished planning and choices, and runs what waited for them. Returns whether a choice runs.
  bool settle();
  bool choice_pending() const;
  // Whether a choice running or queued takes the pipelines back from plans paced to a straggler.
  bool choosing_back_to_target() const;
  // While a choice runs, `call` waits for it (returns true); else the caller goes on now.
  bool defer_while_choosing(std::function<void()> call);
  Evidence evidence() const;
  void pace_straggler_faster(double ratio, double ratio_half, double target, double allowed);
  void pace_paced_pipelines_earlier(double overrun);
  void step_straggler_plan_up(double ratio, double ratio_half, double target, double allowed);
  void count_step_up_beside_the_target();
  void judge_on_new_rounds();
  bool target_sets_the_pace() const;
  bool straggler_sets_the_pace(double miss) const;
  std::optional<double> paced_pipeline_overrun() const;
  bool paced() const;  // a pace slows the pipelines down now
  // A straggler that came after the baseline (detected or told), not a pipeline slow in it.
  bool straggler_is_a_change() const { return straggler_ && !straggler_->in_baseline; }
  // The straggler followed as a change is pipeline d.
  bool follows_straggler_on(std::size_t d) const {
    return straggler_is_a_change() && straggler_->pipeline && static_cast<std::size_t>(*straggler_->pipeline) == d;
  }
  bool judged_on_their_own() const;  // no followed straggler or pace sets the plans' time
  bool judged_enough() const;        // the plans have verify_rounds rounds (at least one) judged
  // Its GPUs' pace over theirs in the baseline (a slow pipeline that recovered, one slowed under a straggler).
  double pace_change(std::size_t d) const { return d < pace_change_.size() ? pace_change_[d] : 1.0; }
  // Pipeline d's compute-bound all-max time now over the median pipeline's in the baseline (1 unknown).
  double pace_now(std::size_t d) const { return pipelines_.known() ? pipelines_.pace(d) * pace_change(d) : 1.0; }
  double unpaced_time() const;  // the model's iteration time without a pace (the target's, or a straggler's)

  ControllerConfig config_;
  JobShape shape_;
  ControllerHooks hooks_;
  std::vector<std::vector<Instruction>> orders_;  // per stage, as the schedule runs it
  // What is profiled: every (model stage, kind) the orders run, sorted; a scan and this round's
  // clock (issued_) for each.
  std::vector<StageKind> operations_;
  std::vector<ClockScan> scans_;
  std::vector<std::optional<int>> issued_;
  // The pipeline held at the top clock this profiling round, if any (the detected straggler: its
  // slack is the others', and its instructions are not measured).
  std::optional<std::size_t> held_at_top_;
  std::vector<int> stage_of_model_;  // per model stage: the stage (GPU) that runs it
  int first_forwards_ = 0;           // forwards of model stage 0 per iteration (overlapped pairs not counted)
  std::optional<Profile> reused_profile_;
  bool reused_ = false;
  ControllerPhase phase_ = ControllerPhase::warmup;
  int round_ = 0;
  int profiling_rounds_ = 0;
  // Profiling's check rounds: the conditions the clocks since the last one were measured under, the
  // rounds since, and what was measured since (scan, clock).
  double profile_conditions_ = 1;
  double profile_conditions_before_ = 1;  // those the check round before measured
  // Each pipeline's own in the last check round (0: not measured there, or a straggler's): with two
  // pipelines the cluster's are the mean of both, and one that slowed below the straggler threshold
  // moved the other's by half its slowdown.
  std::vector<double> profile_pipeline_conditions_;
  int rounds_since_check_ = 0, profiling_checks_ = 0;
  int profile_redos_ = 0;            // times clocks were asked to be measured again
  std::size_t profile_redone_ = 0;   // clocks asked to be measured again
  bool earlier_on_curve_ = true;     // every profiling round since the check ran on its clocks' curves
  std::optional<double> off_curve_;  // a round's clocks over their curves' times, when that asked for a check
  // The last profiling round's clocks over their curves' times (median over the scans), and its clocks.
  std::optional<double> last_off_curve_;
  std::vector<ScanClock> last_recorded_;
  std::vector<std::vector<int>> condemned_plan_;  // the target plan's clocks at the last verdict against it
  std::optional<double> previous_off_curve_;      // the same for the profiling round before that one
  std::vector<ScanClock> previous_recorded_;
  bool checking_ = false;
  std::vector<ScanClock> since_check_;
  AllMaxBaseline baseline_;
  PipelineBaseline pipelines_;  // each pipeline in the warm-up's baseline rounds
  // Per pipeline: its all-max pace now over its baseline pace, where a pipeline slow in the
  // baseline has since run faster by more than half the straggler threshold (it recovered).
  std::vector<double> pace_change_;
  // Per pipeline slow in the baseline: its time over the others' in the rounds in a row it ran
  // faster than expected.
  std::vector<std::vector<double>> fast_rounds_;
  // Per pipeline paced to another: its time over the others' in the rounds in a row it ran slower than
  // planned by less than a straggler.
  std::vector<std::vector<double>> slow_rounds_;
  double noise_sigma_ = 0;                  // the largest (stage, kind) sigma measured so far
  int iterations_per_round_ = 1;            // as the warm-up and profiling rounds ran them
  std::vector<AllMaxRound> probe_samples_;  // probes that disagreed with the reference, in a row
  int warmup_seen_ = 0;                     // warm-up rounds observed
  bool last_baseline_round_kept_ = true;    // the newest all-max round was no outlier
  int probes_ = 0;
  bool probing_ = false;  // the round running now is an all-max probe
  int rounds_since_probe_ = 0;
  // Rounds on the plans since a followed straggler began or was last probed; its periodic probes leave
  // rounds_since_probe_ as it is, so that the probe after it recovers comes as it would without them.
  int straggler_rounds_since_probe_ = 0;
  bool straggler_periodic_probe_ = false;  // the probe running now is one of those
  // A plan about to be condemned by a miss a small change of the conditions could hide: one all-max
  // probe first, its rounds judged again under what the probe measured.
  bool probe_to_judge_ = false;
  // The conditions the judged rounds ran in, where a probe before a verdict measured others that did
  // not move the judged rounds: the verdict's evidence, so that the change counts as one since it.
  std::optional<double> judged_conditions_;
  // A pipeline slow in the baseline found recovered: the rounds it ran fast in were reported against
  // its slow pace, and are reported again at the next round's paces, under their own conditions (the
  // oldest for the share of it the recovery ran).
  struct Restatement {
    std::size_t rounds = 0;
    double oldest_share = 1;
  } restate_next_;
  // The conditions each of the last rounds remembered was measured against, and each pipeline's change
  // of pace they held, oldest first (as many as a recovery restates): a restated round keeps its own.
  struct MeasuredAgainst {
    std::vector<double> pace_changes, conditions;
  };
  std::vector<MeasuredAgainst> measured_against_;
  std::vector<Reference> restated_references(std::size_t rounds) const;
  bool ran_plan_ = false;                // the round running now runs the plans
  int plans_taken_ = 0, issued_on_ = 0;  // choices taken so far, and when the running round was issued
  bool last_round_on_plans_ = false;     // the last round observed ran the plans
  int steps_since_retry_ = 0;
  // What plans are chosen under: the measured variability times this. A plan that runs slower than
  // its prediction shows what the model leaves out (the online profile's own measurement error,
  // which a plan balanced on it leans on) acting like more noise, so each step-up raises it.
  double caution_ = 1;
  // Following a detected straggler: the pace-setting plans' measured miss. Kept until the straggler
  // changes, not relaxed by retries: it is the model's under noise (pipelines of equal pace end later
  // together), which rounds alone do not cure.
  double pace_miss_ = 1;
  bool lead_without_allowance_ = false;    // the followed straggler's own plan measured too slow
  std::vector<double> compute_time_sums_;  // per pipeline: its compute-bound seconds since the plans changed
  // The target plan is chosen to meet the target with this much to spare: what the last step-up
  // measured a plan to miss its prediction by (1: none), halved by each retry that rounds alone called.
  double miss_ = 1;
  bool halfway_held_ = false;          // a retry halfway held: the next goes all the way
  bool retried_as_condemned_ = false;  // the saving plan runs again after rounds alone (no stale evidence)
  // A followed straggler's time over its plan's prediction against the others', per round on the plans
  // since it was detected or changed (the last 20): its slowdown, more precisely than detection's round.
  std::vector<double> followed_ratios_;
  // Per pipeline: its measured time over its baseline time at the top clock, in the last deployed
  // round (1 before any): what the reference stretches the baseline by.
  std::vector<double> conditions_;
  // Per pipeline: what its conditions are read from between all-max rounds.
  struct Calibration {
    std::vector<double> window;       // its conditions over its last rounds (since a change)
    int window_off_way = 0;           // the round before lay off its mean within that round's noise: +1 above, -1 below
    std::optional<double> per_ratio;  // its conditions over its time/predicted ratio, when last known
    bool plan_changed = false;        // another plan since its last round on the plans
    bool conditions_changed = false;  // a straggler there or a recovery since then
    bool straggled = false;           // a detected straggler there in its last round on the plans
    bool carried = false;             // per_ratio is another plan's: nothing calibrated the plan it runs
    // When per_ratio was set anew on its plan's first round, that round and the conditions it was set
    // from: the round may have run partly at a pace the pipeline is found to have changed to a few
    // rounds later (take_pace_change then sets it again from these).
    std::optional<int> anew_round;
    double anew_conditions = 0;
    // The others' conditions (over their changes of pace) known when per_ratio was set anew from the
    // conditions known (0: not so set, set within a window of rounds after a straggler came, changed or
    // went, or followed already), straggler_changes_ then, and what the others measured at the top clock
    // in each round since (follow_the_others_since_anew).
    struct OthersThen {
      double conditions = 0;
      int changes = 0;
      std::vector<double> rounds_measured;
    } anew_others;
    double last_ratio = 0;              // its time over its plan's prediction in its last round on the plans
    std::vector<double> recent_ratios;  // those ratios over its last rounds on this plan (a few)
    // A probe whose first round after it ran otherwise than the rounds before it, by more than one
    // round's ratio strays under noise now and then: its conditions and error, the mean ratio of the
    // rounds before it (and how many), and the ratios of the rounds after it so far (their sum, their
    // count), until their mean says whether the plan ran as before.
    struct PendingProbe {
      double conditions = 0, error = 0, before = 0;
      int before_rounds = 0;
      double after_sum = 0;
      int after_rounds = 0;
    } pending_probe;
    std::optional<double> probed;  // its conditions as an all-max round since its last round on the plans measured them
    double probed_error = 0;       // that measurement's standard error (relative)
    // Calibrated anew on this round of a new plan, from `conditions` as then known; `before` is the
    // calibration it falls back to (since_anew.before; 0: none).
    void start_anew(double conditions, double ratio, int round, double before = 0);
    // Its plan's ratios since it was calibrated anew, while they agree (their sum, their count; none
    // once one did not, or anything changed): one round's ratio is a few tenths of a percent off
    // under noise on a short pipeline, and the calibration from it would carry that to every round.
    // Each round on the plans keeps them only where it calibrated anew or added its ratio.
    struct SinceAnew {
      double ratio_sum = 0;
      int rounds = 0;
      double before = 0;     // the calibration of the plan before (a plan's first: the model's own, 1)
      int off_way = 0;       // +1 or -1: the round before lay that way off their mean, left out; 0: none
      double off_ratio = 0;  // that round's ratio
    } since_anew;
    struct Noisy {
      double sum = 0;
      int rounds = 0;
    } noisy;  // its ratios from few slots on its plan: their sum over so many rounds
    // A followed straggler's plan that runs nothing at the top clock, calibrated on the conditions a
    // probe measured at all-max: its ratios over the plan's first rounds after the probe (their sum).
    struct FromProbe {
      double conditions = 0;
      double ratio_sum = 0;
      int rounds = 0;
      int off_way = 0;  // the last round was left out, this far off their mean: +1 slower, -1 faster
    } from_probe;
    // The calibration later probes of a followed straggler weighed in (a change of it by anything else
    // starts the count again), and how many estimates it is the mean of.
    struct Weighed {
      double per_ratio = 0;
      int count = 0;
    } weighed;
  };
  std::vector<Calibration> calibration_;
  std::vector<double> all_max_conditions_;  // per pipeline, as the last all-max round measured them
  int plan_rounds_since_all_max_ = 0;       // rounds on the plans reported since that one
  // The conditions the plans' rounds measured moved clearly (over 2%) since that round: the cluster's
  // doing (a latency's bias is there from the first round on the plans, not a step midway).
  bool moved_since_all_max_ = false;
  PaceModel pace_model_;
  std::string plan_reason_;
  std::string target_widened_;  // TargetChoice::widened of the target plan
  RetryPolicy retry_;
  int baseline_corrections_ = 0;
  int straggler_changes_ = 0;
  // straggler_changes_ as measure_conditions last saw it, and the round it saw it change in.
  struct ChangesSeen {
    int changes = 0;
    int round = 0;
  } straggler_changes_seen_;
  int straggler_probed_ = -1;  // straggler_changes_ when a probe last measured a followed straggler at all-max
  std::unique_ptr<struct VariabilityState> variability_;
  double idle_power_sum_ = 0;
  int idle_power_rounds_ = 0;
  std::optional<double> p_block_;
  BackgroundPlanner planner_;
  std::optional<PlanningOutput> plans_;
  double scale_ = 1;
  std::optional<ChosenPlan> target_plan_;
  // Pipelines slower than others finish later anyway: the others run plans paced to the slowest
  // (a straggler, or a pipeline slow in the baseline). Per pipeline an index into paced_plans_;
  // -1: the target plan.
  std::vector<ChosenPlan> paced_plans_;
  std::vector<int> pace_of_;
  std::optional<ChosenPlan> lead_plan_;
  std::vector<std::vector<int>> lead_frequencies_;  // lead_plan_'s last time, to tell a change
  std::vector<double> predicted_;  // per pipeline: its plan's time on its GPUs, no straggler (the model's terms)
  bool deployed_once_ = false;
  int step_ups_ = 0;
  int refine_passes_ = 0;
  int confirm_passes_ = 0;
  int replans_ = 0;                         // plannings again after one found no frontier
  std::optional<Profile> planned_profile_;  // what the last planning planned from
  int rounds_on_plan_ = 0;
  bool unpaced_behind_ = false;  // the plans of this round were assigned unpaced (fell_behind_the_straggler)
  DeployedRounds report_;
  std::vector<double> judged_;  // the rounds on the current plans: time over the reference's
  std::string latency_said_;    // what the last measurement of the clock latency found
  std::vector<double> last_pipeline_time_, last_pipeline_energy_;
  std::optional<double> pace_;  // measured seconds; see set_pace
  bool hold_probes_ = false;
  StragglerDetector detector_;
  std::optional<StragglerTold> told_straggler_;
  std::optional<ActiveStraggler> straggler_;
  std::vector<Decision> decisions_;
  long long clock_changes_ = 0, clocks_late_ = 0;
  double latency_ = 0;  // seconds, what plans are chosen for
  double latency_stderr_ = 0;
  bool conditions_forgotten_ = false;     // for a latency measured (forget_conditions_since_all_max)
  bool latency_pending_ = false;          // a latency measured, acted on once the plans' rounds are judged
  ClockLatencyEstimate latency_samples_;  // per changed slot of the plans' rounds
  std::exception_ptr failure_;            // what planning or a choice threw in ready(), for next_round() to throw
  // Plan choices running or queued and what waits for them; last, so that its thread ends first.
  std::unique_ptr<struct PendingChoices> choices_;
};

}  // namespace perseus::online
