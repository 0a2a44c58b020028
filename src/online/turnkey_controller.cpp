#include "perseus/online/turnkey_controller.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <stdexcept>
#include <utility>

#include "perseus/emulate/pipeline_walk.hpp"
#include "perseus/online/background_task.hpp"
#include "turnkey_controller_detail.hpp"

namespace perseus::online {

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

using namespace turnkey_detail;

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

bool TurnkeyController::choosing_back_to_target() const {
  const auto back = [](const PendingChoices::Request& r) {
    return r.why == DecisionEvent::back_to_target_plan || r.why == DecisionEvent::straggler_cleared_api;
  };
  const auto& c = *choices_;
  return (c.running && back(*c.running)) || std::any_of(c.queued.begin(), c.queued.end(), back);
}

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
      // Plans paced to a straggler that recovered (or that a pipeline fell behind) run slower than
      // all-max: until their replacement is taken, the rounds run at all-max, as probes (not while a
      // power budget holds probes: all-max may draw more than it allows).
      if (!hold_probes_ && choosing_back_to_target()) {
        probing_ = true;
        return std::nullopt;
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

}  // namespace perseus::online
