#include "perseus/online/turnkey_controller.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "plan_choice_adapter.hpp"

namespace perseus::online {

struct VariabilityState {
  explicit VariabilityState(int stages) : estimator(stages) {}
  plan_choice::VariabilityEstimator estimator;
};

namespace {

constexpr double kCautionStep = 1.5;  // each step-up judges plans under this much more noise
// Rounds on a plan that judge it: enough for a noisy cluster's evidence, few enough to follow a drift.
constexpr std::size_t kJudgedRounds = 40;

// The 95% two-sided t quantile for the mean of n values (1.96 for many).
double t_quantile(std::size_t n) {
  static const double t[] = {0, 12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23};
  return n >= 2 && n - 1 <= 10 ? t[n - 1] : 1.96;
}

// `e` (the mean of n values) with its interval at least as wide as values of standard deviation
// `floor_sd` give: a few rounds that agree by chance must not look precise.
Estimate at_least_as_wide(Estimate e, std::size_t n, double floor_sd) {
  if (n == 0 || floor_sd <= 0) return e;
  double half = std::max((e.high - e.low) / 2, t_quantile(n) * floor_sd / std::sqrt(double(n)));
  return {e.value, e.value - half, e.value + half};
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// (stage, kind)'s mean instruction over the pipelines not marked disturbed (all of them when
// the measurement has no per-pipeline numbers).
std::optional<ClockMeasurement> clean_instruction(const RoundMeasurement& m, const std::vector<bool>& disturbed,
                                                  const StageKind& key) {
  double time = 0, energy = 0;
  int n = 0;
  for (std::size_t d = 0; d < m.pipeline_instructions.size(); ++d) {
    if (d < disturbed.size() && disturbed[d]) continue;
    auto it = m.pipeline_instructions[d].find(key);
    if (it == m.pipeline_instructions[d].end()) continue;
    time += it->second.first, energy += it->second.second, ++n;
  }
  if (n > 0) return ClockMeasurement{time / n, energy / n};
  auto it = m.instructions.find(key);
  if (it == m.instructions.end()) return std::nullopt;
  return ClockMeasurement{it->second.first, it->second.second};
}

double sample_stddev(const std::vector<double>& values) {
  if (values.size() < 2) return 0;
  double mean = 0, var = 0;
  for (double v : values) mean += v;
  mean /= double(values.size());
  for (double v : values) var += (v - mean) * (v - mean);
  return std::sqrt(var / double(values.size() - 1));
}

// The plain mean of `values` with a 95% interval (t quantiles for few).
Estimate mean_interval(const std::vector<double>& values) {
  Estimate out;
  if (values.empty()) return out;
  for (double v : values) out.value += v;
  out.value /= double(values.size());
  const double half =
      values.size() > 1 ? t_quantile(values.size()) * sample_stddev(values) / std::sqrt(double(values.size())) : 0;
  out.low = out.value - half;
  out.high = out.value + half;
  return out;
}

}  // namespace

Estimate robust_mean(const std::vector<double>& values, std::vector<bool>* kept) {
  if (kept) kept->assign(values.size(), false);
  if (values.empty()) return {};
  double mid = median(values);
  std::vector<double> deviations;
  for (double v : values) deviations.push_back(std::abs(v - mid));
  // A floor on the spread: rounds that agree to a part in 10^4 are all kept.
  double spread = std::max(1.4826 * median(deviations), 1e-4 * std::abs(mid));
  std::vector<double> used;
  for (std::size_t i = 0; i < values.size(); ++i)
    if (std::abs(values[i] - mid) <= 3.5 * spread) {
      used.push_back(values[i]);
      if (kept) (*kept)[i] = true;
    }
  return mean_interval(used);
}

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
      detector_(config_.detector) {
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
  variability_ = std::make_unique<VariabilityState>(shape_.num_stages);
}

TurnkeyController::~TurnkeyController() = default;

std::vector<std::array<double, 2>> TurnkeyController::variability() const {
  return variability_->estimator.estimate().sigma;
}

Variability TurnkeyController::choice_variability() const {
  auto v = variability_->estimator.estimate();
  for (auto& stage : v.sigma)
    for (double& sigma : stage) sigma *= caution_;
  return v;
}

bool TurnkeyController::ready() const {
  return !(config_.wait_for_plan && phase_ == ControllerPhase::planning && !planner_.ready());
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
  if (phase_ == ControllerPhase::planning && planner_.ready()) plan_ready();
  probing_ = false;
  ran_plan_ = false;
  switch (phase_) {
    case ControllerPhase::profiling:
      return profiling_clocks();
    case ControllerPhase::deployed:
      // A short all-max probe now and then: is the baseline still what it was? (A probe that
      // disagreed is repeated at once.)
      // Not while a straggler is followed: its rounds are not all-max's.
      if (config_.probe_every > 0 && !straggler_ &&
          (rounds_since_probe_ >= config_.probe_every || !probe_samples_.empty())) {
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
      return observe_deployed(m);
  }
}

void TurnkeyController::set_straggler(const std::optional<StragglerTold>& told) {
  if (!told) {
    if (told_straggler_) decide("straggler cleared", "the API cleared the straggler");
    told_straggler_.reset();
  } else {
    told_straggler_ = *told;
    decide("straggler told", told->slowdown
                                 ? fmt::format("the API says iterations take {}x the all-max time", *told->slowdown)
                                 : fmt::format("the API says iterations take {} s", told->iteration_time.value_or(0)));
  }
  // The plans change now; the ranks get them with the next round's clocks.
  if (phase_ == ControllerPhase::deployed) assign_plans(told ? "straggler (api)" : "straggler cleared (api)");
}

double TurnkeyController::target_time() const {
  return config_.deadline ? *config_.deadline : config_.slowdown * baseline_time_;
}

// The target in the emulator's time (the measured all-max time is the emulated all-max time there,
// exactly: a measurement a few nanoseconds short must not rule out every plan).
double TurnkeyController::target_deadline() const { return target_deadline_for(*plans_); }

double TurnkeyController::target_deadline_for(const PlanningOutput& plans) const {
  double scale = plans.all_max().time > 0 ? baseline_time_ / plans.all_max().time : 1;
  return config_.deadline ? *config_.deadline / scale : config_.slowdown * plans.all_max().time;
}

void TurnkeyController::decide(const std::string& event, const std::string& detail) {
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

void TurnkeyController::add_baseline(const RoundMeasurement& m, double conditions) {
  baseline_samples_.push_back({m.iteration_time, m.energy, conditions});
  if (m.blocking_power) {
    idle_power_sum_ += *m.blocking_power;
    ++idle_power_rounds_;
    p_block_ = idle_power_sum_ / idle_power_rounds_;
  }
  estimate_baseline();
}

// The baseline from its rounds: outliers in time or energy left out, the mean of the others.
void TurnkeyController::estimate_baseline() {
  std::vector<double> times, energies;
  for (const auto& r : baseline_samples_) times.push_back(r.time), energies.push_back(r.energy);
  std::vector<bool> time_kept, energy_kept;
  robust_mean(times, &time_kept);
  robust_mean(energies, &energy_kept);
  std::vector<double> kept_times, kept_energies;
  double conditions = 0;
  for (std::size_t i = 0; i < baseline_samples_.size(); ++i)
    if (time_kept[i] && energy_kept[i]) {
      kept_times.push_back(times[i]);
      kept_energies.push_back(energies[i]);
      conditions += baseline_samples_[i].conditions;
    }
  if (kept_times.empty()) kept_times = times, kept_energies = energies;
  baseline_time_estimate_ = robust_mean(kept_times);
  baseline_time_estimate_ =
      at_least_as_wide(baseline_time_estimate_, kept_times.size(), round_spread_floor(baseline_time_estimate_.value));
  baseline_energy_estimate_ = robust_mean(kept_energies);
  baseline_time_ = baseline_time_estimate_.value;
  baseline_energy_ = baseline_energy_estimate_.value;
  baseline_conditions_ = kept_times.empty() || conditions <= 0 ? 1 : conditions / double(kept_times.size());
  baseline_rounds_ = static_cast<int>(kept_times.size());
  baseline_round_spread_ = {std::max(sample_stddev(kept_times), round_spread_floor(baseline_time_)),
                            sample_stddev(kept_energies)};
  baseline_rejected_ = static_cast<int>(times.size() - kept_times.size());
}

// Per pipeline: whether its compute-bound time this round is above the median of the others' by
// more than the straggler threshold (all pipelines run the same clocks in these rounds).
std::vector<bool> TurnkeyController::disturbed_pipelines(const RoundMeasurement& m) const {
  std::vector<bool> out(m.pipeline_time.size(), false);
  if (m.pipeline_time.size() < 2) return out;
  for (std::size_t d = 0; d < out.size(); ++d) {
    std::vector<double> others;
    for (std::size_t e = 0; e < out.size(); ++e)
      if (e != d) others.push_back(m.pipeline_time[e]);
    double ref = median(others);
    out[d] = ref > 0 && m.pipeline_time[d] > ref * (1 + config_.detector.threshold);
  }
  return out;
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

// Detection in rounds where every pipeline runs the same clocks: each one's compute-bound time
// against the others'. Returns whether the verdict changed.
bool TurnkeyController::observe_straggler(const RoundMeasurement& m, const std::vector<double>& ratios) {
  bool before = detector_.current().has_value();
  if (!detector_.observe(ratios) || told_straggler_) return false;
  const auto& now = detector_.current();
  if (now) {
    decide(before ? "straggler changed" : "straggler detected",
           fmt::format("pipeline {} runs {:.3f}x slower than the others ({:.6g} s compute-bound){}", now->pipeline,
                       now->slowdown, m.pipeline_time[static_cast<std::size_t>(now->pipeline)],
                       phase_ == ControllerPhase::deployed ? "" : fmt::format(" while {}", to_string(phase_))));
  } else {
    decide("straggler recovered", "every pipeline is back within the threshold");
  }
  return true;
}

void TurnkeyController::observe_warmup(int round, const RoundMeasurement& m) {
  ++warmup_seen_;
  add_variability(m);
  observe_straggler(m, m.pipeline_time);
  // The first warm-up round carries start-up effects; the others are the baseline, outliers left out.
  if (round > 0 || config_.warmup_rounds <= 1) add_baseline(m, 1);
  if (warmup_seen_ < std::max(config_.warmup_rounds, 1)) return;
  // Outliers left too few rounds, or the baseline is not yet precise enough: go on measuring.
  const int wanted = std::max(config_.warmup_rounds - 1, 1);
  const double half_width = (baseline_time_estimate_.high - baseline_time_estimate_.low) / 2;
  const bool precise = baseline_time_ > 0 && half_width <= config_.baseline_precision * baseline_time_;
  if ((baseline_rounds_ < wanted || !precise) &&
      warmup_seen_ < std::max(config_.max_baseline_rounds, config_.warmup_rounds))
    return;
  if (baseline_samples_.empty()) add_baseline(m, 1);
  decide("baseline",
         fmt::format("all-max: {:.6g} s (95%: {:.6g}-{:.6g}) and {:.6g} J per iteration over {} rounds{}; "
                     "blocking power {}",
                     baseline_time_, baseline_time_estimate_.low, baseline_time_estimate_.high, baseline_energy_,
                     baseline_rounds_,
                     baseline_rejected_ > 0 ? fmt::format(" ({} outlying rounds left out)", baseline_rejected_) : "",
                     p_block_ ? fmt::format("{:.4g} W", *p_block_) : "unknown"));
  auto disturbed = disturbed_pipelines(m);
  if (reused_) {
    decide("profile reused", fmt::format("planning from {} (profile_path exists)", hooks_.profile_source));
    return start_planning(*reused_profile_);
  }
  // The top clock of every scan was just measured (from the pipelines that ran as fast as the others).
  for (std::size_t i = 0; i < operations_.size(); ++i) {
    auto measured = clean_instruction(m, disturbed, operations_[i]);
    auto& scan = scans_[i];
    if (measured && scan.next() == shape_.clocks.front()) scan.record(shape_.clocks.front(), *measured);
  }
  phase_ = ControllerPhase::profiling;
  decide("profiling", fmt::format("{} clocks from {} to {} MHz, coarse step {}, per (model stage, kind) of the {} "
                                  "schedule ({} of them)",
                                  shape_.clocks.size(), shape_.clocks.front(), shape_.clocks.back(),
                                  config_.scan.coarse_step, to_string(shape_.schedule), operations_.size()));
  if (profiling_done()) finish_profiling();
}

bool TurnkeyController::profiling_done() const {
  return std::all_of(scans_.begin(), scans_.end(), [](const auto& s) { return s.done(); });
}

RoundClocks TurnkeyController::profiling_clocks() {
  issued_.clear();
  for (auto& scan : scans_) issued_.push_back(scan.next());
  std::vector<std::vector<int>> stages;
  for (const auto& order : orders_) {
    std::vector<int> slots;
    for (const auto& inst : order) slots.push_back(issued_[scan_index(inst)].value_or(shape_.clocks.front()));
    stages.push_back(std::move(slots));
  }
  return std::vector<std::vector<std::vector<int>>>(static_cast<std::size_t>(shape_.pipelines), stages);
}

void TurnkeyController::observe_profiling(const RoundMeasurement& m) {
  ++profiling_rounds_;
  add_variability(m);
  observe_straggler(m, m.pipeline_time);
  // A slow pipeline's instructions are not the profile's: measured from the others only.
  auto disturbed = disturbed_pipelines(m);
  for (std::size_t i = 0; i < operations_.size() && i < issued_.size(); ++i) {
    auto measured = clean_instruction(m, disturbed, operations_[i]);
    if (issued_[i] && measured) scans_[i].record(*issued_[i], *measured);
  }
  issued_.clear();
  if (profiling_done()) finish_profiling();
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
    auto rows = config_.interpolate ? scan.interpolated() : scan.measured();
    for (auto it = rows.rbegin(); it != rows.rend(); ++it)
      profile.rows.push_back({stage, kind, it->first, it->second.time, it->second.energy, 0});
  }
  decide("profiled", fmt::format("{} rounds, {} clocks measured over {} (model stage, kind) (one round per clock would "
                                 "take {} rounds)",
                                 profiling_rounds_, measured, scans_.size(), shape_.clocks.size()));
  hooks_.profiled(profile);
  start_planning(std::move(profile));
}

void TurnkeyController::start_planning(Profile profile) {
  PlanningInput input;
  input.config.shape() = shape_.shape();
  input.config.p_block = p_block_.value_or(0);
  input.config.cost_model = config_.cost_model;
  input.config.unit_time = config_.unit_time.value_or(automatic_unit_time(profile));
  input.profile = std::move(profile);
  input.record_dir = hooks_.record_dir;
  phase_ = ControllerPhase::planning;
  decide("planning", fmt::format("on a worker thread: unit time {} s, blocking power {:.4g} W, cost model {}",
                                 input.config.unit_time, input.config.p_block, to_string(config_.cost_model)));
  planner_.start(std::move(input), hooks_.wake);
}

void TurnkeyController::plan_ready() {
  try {
    plans_ = planner_.take();
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("Perseus could not plan: {}", e.what()));
  }
  if (refine_passes_ < config_.refine_passes && !reused_ && config_.interpolate) {
    // Fill in where the front needs it: measure the clocks the target plan runs that were only
    // interpolated, then plan again.
    ChosenPlan wanted = choose_plan(*plans_, target_deadline_for(*plans_));
    std::size_t asked = 0;
    for (int s = 0; s < shape_.num_stages; ++s) {
      const auto& order = orders_[static_cast<std::size_t>(s)];
      for (std::size_t slot = 0; slot < order.size(); ++slot)
        if (scans_[scan_index(order[slot])].request(wanted.frequencies[static_cast<std::size_t>(s)][slot])) ++asked;
    }
    if (asked > 0) {
      ++refine_passes_;
      decide("refining", fmt::format("the plan runs {} clocks that were interpolated; measuring them (pass {} of at "
                                     "most {})",
                                     asked, refine_passes_, config_.refine_passes));
      plans_.reset();
      phase_ = ControllerPhase::profiling;
      return;
    }
  }
  deploy_plan();
}

void TurnkeyController::deploy_plan() {
  // Measured iteration time over emulated all-max time: what the model leaves out (the gradient
  // synchronisation, launch gaps), so that predictions compare with measurements.
  scale_ = plans_->all_max().time > 0 ? baseline_time_ / plans_->all_max().time : 1;
  std::vector<std::string> pwl;
  for (const auto& [where, model] : plans_->cost_models)
    if (model == "pwl") pwl.push_back(where);
  decide("planned",
         fmt::format("{} frontier points in {:.2f} s; cost model {}", plans_->record.points.size(), plans_->seconds,
                     pwl.empty() ? "exponential everywhere"
                                 : fmt::format("piecewise-linear for {} (where the exponential fit fails or misleads), "
                                               "exponential elsewhere",
                                               fmt::join(pwl, ", "))));
  target_plan_ =
      plan_choice::choose_plan_under_noise(*plans_, target_deadline(), choice_variability(), shape_.pipelines);
  plan_reason_ = "the cheapest plan predicted to meet the target";
  if (config_.deadline && *config_.deadline < baseline_time_) {
    plan_reason_ = "the deadline is below the measured all-max time: the fastest plan";
    decide("deadline below all-max", fmt::format("the deadline {} s is below the measured all-max time {:.6g} s: "
                                                 "running the fastest plan",
                                                 *config_.deadline, baseline_time_));
  }
  phase_ = ControllerPhase::deployed;
  assign_plans("deployed");
}

const ChosenPlan* TurnkeyController::plan_of(std::size_t d) const {
  if (!target_plan_ || d >= slowed_.size()) return nullptr;
  return slowed_[d] && slowed_plan_ ? &*slowed_plan_ : &*target_plan_;
}

std::string TurnkeyController::describe(const ChosenPlan& plan) const {
  return fmt::format("{} (predicted {:.6g} s, {:.6g} J per pipeline)", plan.label(), plan.time * scale_, plan.energy);
}

// Every pipeline's plan from the target and the straggler (told first, then detected).
void TurnkeyController::assign_plans(const std::string& why) {
  std::optional<ActiveStraggler> next;
  if (told_straggler_) {
    ActiveStraggler s;
    s.told = true;
    s.pipeline = told_straggler_->pipeline;
    double iteration = told_straggler_->slowdown ? *told_straggler_->slowdown * baseline_time_
                                                 : told_straggler_->iteration_time.value_or(baseline_time_);
    s.slowdown = iteration / baseline_time_;
    s.compute_time = iteration / scale_;
    next = s;
  } else if (detector_.current()) {
    ActiveStraggler s;
    s.pipeline = detector_.current()->pipeline;
    s.slowdown = detector_.current()->slowdown;
    // Its measured compute-bound time on its plan; detected before deployment: its plan's time stretched.
    s.compute_time = last_round_on_plans_ ? last_pipeline_time_.at(static_cast<std::size_t>(*s.pipeline))
                                          : target_plan_->time * s.slowdown;
    next = s;
  }
  std::vector<bool> slowed(static_cast<std::size_t>(shape_.pipelines), false);
  std::optional<ChosenPlan> slowed_plan;
  // The others finish by the straggler's time, but never later than the target asks.
  if (next && next->compute_time > target_plan_->time) {
    slowed_plan =
        plan_choice::choose_plan_under_noise(*plans_, next->compute_time, choice_variability(), shape_.pipelines);
    for (std::size_t d = 0; d < slowed.size(); ++d)
      if (!next->pipeline || static_cast<int>(d) != *next->pipeline) slowed[d] = true;
  }
  bool changed = !deployed_once_ || slowed != slowed_ || (slowed_plan.has_value() != slowed_plan_.has_value()) ||
                 (slowed_plan && slowed_plan->frequencies != slowed_plan_->frequencies);
  straggler_ = next;
  slowed_ = slowed;
  slowed_plan_ = std::move(slowed_plan);
  deployed_once_ = true;
  if (!changed) return;
  measured_.clear();
  judged_.clear();
  rounds_on_plan_ = 0;
  std::string who;
  for (std::size_t d = 0; d < slowed_.size(); ++d)
    who += fmt::format("{}pipeline {}: {}", d == 0 ? "" : "; ", d, describe(*plan_of(d)));
  decide(why, who);
}

RoundClocks TurnkeyController::plan_clocks() const {
  std::vector<std::vector<std::vector<int>>> out;
  for (std::size_t d = 0; d < static_cast<std::size_t>(shape_.pipelines); ++d) out.push_back(plan_of(d)->frequencies);
  return out;
}

// Per pipeline: its measured instruction time over the profile's, the median over the instructions
// it ran at the top clock (a profile's error below the top clock, or a plan slower under noise,
// does not show there; a slower cluster or GPU does); 1 (unknown) when it ran fewer than 3 there.
std::vector<double> TurnkeyController::pipeline_conditions(const RoundMeasurement& m) const {
  std::vector<double> out(m.slot_time.size(), 1.0);
  if (!plans_ || !plans_->emulator) return out;
  const int top = shape_.clocks.front();
  for (std::size_t d = 0; d < m.slot_time.size(); ++d) {
    const ChosenPlan* plan = probing_ ? nullptr : plan_of(d);
    std::vector<double> at_top;
    for (std::size_t s = 0; s < m.slot_time[d].size() && s < orders_.size(); ++s)
      for (std::size_t slot = 0; slot < m.slot_time[d][s].size() && slot < orders_[s].size(); ++slot) {
        int clock = plan ? plan->frequencies[s][slot] : top;
        if (clock != top) continue;
        auto cost = plans_->emulator->cost(orders_[s][slot], clock);
        if (!cost || cost->time <= 0 || m.slot_time[d][s][slot] <= 0) continue;
        if (clock == top) at_top.push_back(m.slot_time[d][s][slot] / cost->time);
      }
    if (at_top.size() >= 3) out[d] = median(at_top);
  }
  return out;
}

Reference TurnkeyController::reference() const {
  Reference ref{"all-max baseline", baseline_time_, baseline_energy_, 1};
  if (phase_ != ControllerPhase::deployed || conditions_.empty() || baseline_conditions_ <= 0) return ref;
  // Conditions relative to the baseline's; within a percent of it: the baseline as it is (noise).
  std::vector<double> c;
  for (double x : conditions_) c.push_back(x / baseline_conditions_);
  double slowest = *std::max_element(c.begin(), c.end()), fastest = *std::min_element(c.begin(), c.end());
  const double band = 0.01;
  if (std::abs(slowest - 1) <= band && !straggler_) return ref;
  const double D = static_cast<double>(c.size());
  const double gpus = static_cast<double>(shape_.num_stages * shape_.gpus_per_stage);
  ref.conditions = slowest;
  ref.iteration_time = baseline_time_ * slowest;
  ref.energy = 0;
  for (double x : c)
    ref.energy += baseline_energy_ / D * x + p_block_.value_or(0) * gpus * baseline_time_ * (slowest - x);
  ref.name = straggler_ ? "all-max baseline at the straggler's pace"
             : slowest - fastest <= band
                 ? fmt::format("all-max baseline under current conditions (x{:.3f})", slowest)
                 : fmt::format("all-max baseline at the slowest pipeline's pace (x{:.3f})", slowest);
  return ref;
}

std::optional<TurnkeyController::Measured> TurnkeyController::measured() const {
  if (measured_.empty()) return std::nullopt;
  Measured out;
  for (const auto& r : measured_) out.iteration_time += r.time, out.energy += r.energy;
  out.rounds = static_cast<int>(measured_.size());
  out.iteration_time /= out.rounds;
  out.energy /= out.rounds;
  return out;
}

namespace {

// Per-round ratios' mean, its interval widened by the baseline's relative uncertainty.
Estimate ratio_estimate(const std::vector<double>& ratios, double baseline_relative_half_width) {
  Estimate e = mean_interval(ratios);
  double spread = (e.high - e.low) / 2;
  double half = std::sqrt(spread * spread + std::pow(e.value * baseline_relative_half_width, 2));
  return {e.value, e.value - half, e.value + half};
}

}  // namespace

std::optional<Estimate> TurnkeyController::saving() const {
  if (recent_.empty() || baseline_energy_ <= 0) return std::nullopt;
  std::vector<double> ratios;
  for (const auto& r : recent_) ratios.push_back(r.energy / r.reference.energy);
  Estimate e =
      ratio_estimate(ratios, (baseline_energy_estimate_.high - baseline_energy_estimate_.value) / baseline_energy_);
  return Estimate{1 - e.value, 1 - e.high, 1 - e.low};
}

std::optional<Estimate> TurnkeyController::slowdown() const {
  if (recent_.empty() || baseline_time_ <= 0) return std::nullopt;
  std::vector<double> ratios;
  for (const auto& r : recent_) ratios.push_back(r.time / r.reference.iteration_time);
  Estimate e = ratio_estimate(ratios, (baseline_time_estimate_.high - baseline_time_estimate_.value) / baseline_time_);
  return Estimate{e.value - 1, e.low - 1, e.high - 1};
}

void TurnkeyController::remember(const RoundMeasurement& m) {
  recent_.push_back({m.iteration_time, m.energy, reference()});
  energy_saved_ += (recent_.back().reference.energy - m.energy) * m.iterations;
  deployed_iterations_ += m.iterations;
  if (recent_.size() > static_cast<std::size_t>(std::max(config_.report_rounds, 1))) recent_.erase(recent_.begin());
}

void TurnkeyController::observe_probe(const RoundMeasurement& m) {
  ++probes_;
  rounds_since_probe_ = 0;
  conditions_ = pipeline_conditions(m);
  remember(m);
  auto disturbed = disturbed_pipelines(m);
  if (std::any_of(disturbed.begin(), disturbed.end(), [](bool b) { return b; })) return;  // a straggler's round
  auto c = pipeline_conditions(m);
  double conditions = c.empty() ? 1 : median(c);
  AllMaxRound probe{m.iteration_time, m.energy, conditions};
  // One probe round is as noisy as one baseline round: it disagrees when it is further from the
  // baseline than the tolerance, the baseline's interval and three of its rounds' spread allow.
  const double time_band =
      std::max({baseline_time_ * config_.tolerance, baseline_time_estimate_.high - baseline_time_estimate_.low,
                3 * baseline_round_spread_[0]});
  const double energy_band =
      std::max({baseline_energy_ * config_.tolerance, baseline_energy_estimate_.high - baseline_energy_estimate_.low,
                3 * baseline_round_spread_[1]});
  auto agrees = [&](const AllMaxRound& a, double t, double e) {
    return std::abs(a.time - t) <= time_band && std::abs(a.energy - e) <= energy_band;
  };
  if (agrees(probe, baseline_time_, baseline_energy_)) {
    probe_samples_.clear();
    baseline_samples_.push_back(probe);
    if (baseline_samples_.size() > static_cast<std::size_t>(std::max(config_.max_baseline_rounds, 12)))
      baseline_samples_.erase(baseline_samples_.begin());
    return estimate_baseline();
  }
  probe_samples_.push_back(probe);
  if (probe_samples_.size() < 2) return;  // probed again next round
  const auto& a = probe_samples_[probe_samples_.size() - 2];
  if (!agrees(a, probe.time, probe.energy)) {
    if (probe_samples_.size() >= 3) probe_samples_.clear();  // too noisy to tell: keep the baseline
    return;
  }
  double before_time = baseline_time_, before_energy = baseline_energy_;
  baseline_samples_ = {a, probe};
  probe_samples_.clear();
  estimate_baseline();
  ++baseline_corrections_;
  decide("baseline corrected",
         fmt::format("two all-max probes in a row measured {:.6g} s and {:.6g} J per iteration, outside the baseline's "
                     "{:.6g} s and {:.6g} J; the baseline is now theirs (conditions x{:.3f})",
                     baseline_time_, baseline_energy_, before_time, before_energy, baseline_conditions_));
}

void TurnkeyController::observe_deployed(const RoundMeasurement& m) {
  ++rounds_on_plan_;
  ++rounds_since_probe_;
  conditions_ = pipeline_conditions(m);
  remember(m);
  measured_.push_back(recent_.back());
  if (measured_.size() > 10) measured_.erase(measured_.begin());
  judged_.push_back(recent_.back().time * baseline_time_ / recent_.back().reference.iteration_time);
  if (judged_.size() > kJudgedRounds) judged_.erase(judged_.begin());

  // Straggler detection: each pipeline's measured compute-bound time against its plan's prediction.
  std::vector<double> ratios;
  for (std::size_t d = 0; d < m.pipeline_time.size(); ++d) {
    double predicted = plan_of(d) ? plan_of(d)->time : 0;
    ratios.push_back(predicted > 0 && m.pipeline_time[d] > 0 ? m.pipeline_time[d] / predicted : 1.0);
  }
  if (observe_straggler(m, ratios))
    return assign_plans(detector_.current() ? "slowed to the straggler" : "back to the target plan");
  judge_plan();
}

// Closed loop: the target plan must not be measurably slower than asked, under the conditions it
// ran in (a slower cluster or a slow pipeline stretches what all-max would take as much). Not
// while a straggler is followed or a pipeline looks like one that detection has not confirmed yet.
void TurnkeyController::judge_plan() {
  if (straggler_ || detector_.suspects() || rounds_on_plan_ < config_.verify_rounds) return;
  const bool at_all_max = !target_plan_->point && target_plan_->fit_steps == 0;
  // The saving plan again once conditions changed since the step-up (the cluster's pace, or the
  // baseline), and not before retry_after rounds: under the same conditions it would fail the same way.
  const bool changed =
      std::abs(reference().conditions - conditions_at_step_) > 0.01 || baseline_corrections_ != corrections_at_step_;
  if (saving_plan_ && retry_round_ >= 0 && round_ >= retry_round_ && changed) {
    ChosenPlan before_plan = *target_plan_;
    caution_ = 1;
    target_plan_ =
        plan_choice::choose_plan_under_noise(*plans_, target_deadline(), choice_variability(), shape_.pipelines);
    saving_plan_.reset();
    retry_round_ = -1;
    steps_since_retry_ = 0;
    plan_reason_ = "tried again after a step-up: conditions may have changed";
    decide("retrying", fmt::format("conditions changed since stepping up (x{:.3f} then, x{:.3f} now{}): from {} back "
                                   "to {}",
                                   conditions_at_step_, reference().conditions,
                                   baseline_corrections_ != corrections_at_step_ ? ", baseline corrected" : "",
                                   describe(before_plan), describe(*target_plan_)));
    deployed_once_ = false;
    return assign_plans("saving plan again");
  }
  // The plan's rounds at the baseline's conditions (outlying rounds left out), against the target
  // with both uncertainties: a step-up only when even the low end of the 95% interval is above the
  // tolerance. Without noise the interval is the point; with it, the evidence grows with every
  // round on the plan, so a plan measurably too slow is caught, and one that only looks so in a
  // few noisy rounds is not.
  const Estimate plan_time = at_least_as_wide(robust_mean(judged_), judged_.size(), round_spread_floor(baseline_time_));
  const double baseline_half = (baseline_time_estimate_.high - baseline_time_estimate_.low) / 2;
  const double ratio = plan_time.value / baseline_time_;
  const double ratio_half =
      std::hypot((plan_time.high - plan_time.low) / 2 / baseline_time_, ratio * baseline_half / baseline_time_);
  double measured_time = plan_time.value;
  double target = target_time();
  if ((ratio - ratio_half) * baseline_time_ <= target * (1 + config_.tolerance)) return;
  if (at_all_max) return;  // what the baseline measured: nothing to step to
  ChosenPlan before_plan = *target_plan_;
  if (steps_since_retry_ >= config_.max_step_ups) {
    target_plan_ = all_max(*plans_);
  } else {
    // Correct the prediction by what was measured and take the next plan that then meets the target.
    const double faster = target_plan_->time * (1 - config_.tolerance / 2);
    double correction = measured_time / (target_plan_->time * scale_);
    ChosenPlan next = plan_choice::step_up(*plans_, *target_plan_, std::min(target / (scale_ * correction), faster),
                                           choice_variability(), shape_.pipelines);
    if (!next.point && next.fit_steps == 0) {
      // Only all-max meets the corrected time: under noise the miss is the model's (it grows with
      // how many paths a plan balances), not an offset every plan shares. The next, more cautious
      // plan instead: judged under more noise, predicted faster than the one that missed.
      caution_ *= kCautionStep;
      next = plan_choice::step_up(*plans_, *target_plan_, std::min(target_deadline(), faster), choice_variability(),
                                  shape_.pipelines);
    }
    target_plan_ = std::move(next);
  }
  ++step_ups_;
  ++steps_since_retry_;
  if (!saving_plan_) saving_plan_ = before_plan;
  conditions_at_step_ = reference().conditions;
  corrections_at_step_ = baseline_corrections_;
  if (config_.retry_after > 0) {
    retry_interval_ = retry_interval_ > 0 ? 2 * retry_interval_ : config_.retry_after;
    retry_round_ = round_ + retry_interval_;
  }
  const std::string evidence = fmt::format(
      "measured {:.6g} s (95%: from {:.6g} s with the baseline's uncertainty, over "
      "{} rounds, at the baseline's conditions)",
      measured_time, (ratio - ratio_half) * baseline_time_, judged_.size());
  plan_reason_ = fmt::format("stepped up: {} was above the target {:.6g} s by more than {:.2g}%", evidence, target,
                             100 * config_.tolerance);
  decide("stepped up", fmt::format("{} is above the target {:.6g} s by more than {:.2g}%: from {} to {}", evidence,
                                   target, 100 * config_.tolerance, describe(before_plan), describe(*target_plan_)));
  deployed_once_ = false;
  assign_plans("faster plan");
}

}  // namespace perseus::online
