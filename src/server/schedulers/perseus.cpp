// The turnkey scheduler: a thin adapter between the job manager and the turnkey
// controller (online/turnkey_controller.hpp), which holds the loop. Here: checking the ranks'
// schedules and clocks, turning results into round measurements and the controller's clocks into
// each rank's power states, the profile file, the decision records and the status JSON.
// Tensor-parallel ranks of a stage share a plan; each data-parallel pipeline runs its own.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <optional>
#include <set>

#include "perseus/online/turnkey_controller.hpp"
#include "perseus/plan/frontier_record.hpp"
#include "perseus/plot/svg.hpp"
#include "perseus/util/atomic_file.hpp"
#include "round_measurement.hpp"
#include "scheduler_args.hpp"
#include "schedulers.hpp"

namespace perseus::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using online::ChosenPlan;

struct PerseusConfig {
  online::ControllerConfig controller;
  std::string profile_path;
  int minimum_power_state = 0;
};

// Forwards per iteration, those inside overlapped pairs included: microbatches x model chunks.
int count_forwards(const std::vector<InstructionKind>& compute) {
  return static_cast<int>(std::count(compute.begin(), compute.end(), InstructionKind::forward) +
                          std::count(compute.begin(), compute.end(), InstructionKind::forward_backward));
}

// Whether every rank's forwards and backwards are what `shape` runs on its stage.
bool ranks_follow(const std::vector<std::vector<InstructionKind>>& compute, const SchedulerContext& context,
                  const PipelineShape& shape) {
  try {
    shape.check();
    for (std::size_t i = 0; i < context.ranks.size(); ++i) {
      const auto order = stage_schedule(shape.schedule, context.ranks[i].pp_rank, shape.num_stages,
                                        shape.num_microbatches, 0, shape.virtual_stages);
      if (order.size() != compute[i].size()) return false;
      for (std::size_t k = 0; k < order.size(); ++k)
        if (order[k].kind != compute[i][k]) return false;
    }
    return true;
  } catch (const std::exception&) {  // a shape the schedule does not take
    return false;
  }
}

// The job's shape from its ranks: the first schedule of the registry (and, for one with model
// chunks, the fewest chunks) whose order every rank follows. Throws std::runtime_error saying what
// does not fit.
online::JobShape job_shape(const SchedulerContext& context, int minimum_power_state) {
  online::JobShape shape;
  shape.num_stages = context.job.pp_degree;
  shape.pipelines = context.job.dp_degree;
  std::vector<std::vector<InstructionKind>> compute;
  for (const auto& r : context.ranks) compute.push_back(compute_kinds(r.pipe_schedule));
  const int forwards = count_forwards(compute.front());
  for (std::size_t i = 0; i < compute.size(); ++i)
    if (count_forwards(compute[i]) != forwards)
      throw std::runtime_error(fmt::format("rank {} runs {} forwards per iteration, rank 0 runs {}",
                                           context.ranks[i].rank, count_forwards(compute[i]), forwards));
  bool found = false;
  for (auto kind : all_schedule_kinds()) {
    // Chunks per stage: the schedule's own, or where it takes a number, each from 2 on that divides the forwards.
    const bool fixed = !takes_virtual_stages(kind);
    for (int chunks = schedule_virtual_stages(kind, fixed ? 1 : 2); !found && chunks <= forwards; ++chunks) {
      if (forwards % chunks != 0) continue;
      PipelineShape candidate;
      candidate.num_stages = shape.num_stages;
      candidate.num_microbatches = forwards / chunks;
      candidate.schedule = kind;
      candidate.virtual_stages = chunks;
      if (ranks_follow(compute, context, candidate)) shape.shape() = candidate, found = true;
      if (fixed) break;
    }
    if (found) break;
  }
  if (!found)
    throw std::runtime_error(
        fmt::format("the ranks' forwards and backwards ({} forwards per iteration on each of {} "
                    "stages) follow none of the schedules the turnkey loop plans ({}) for any "
                    "number of microbatches and model chunks; give each rank its order with "
                    "default_pipe_schedule(pp_rank, pp_degree, num_microbatches, schedule)",
                    forwards, shape.num_stages, schedule_names()));
  // Clocks every rank supports, high to low, at or above minimum_power_state.
  std::set<int> common(context.ranks.front().power_state_range.begin(), context.ranks.front().power_state_range.end());
  for (const auto& r : context.ranks) {
    std::set<int> mine(r.power_state_range.begin(), r.power_state_range.end()), both;
    std::set_intersection(common.begin(), common.end(), mine.begin(), mine.end(), std::inserter(both, both.end()));
    common = both;
  }
  for (auto it = common.rbegin(); it != common.rend(); ++it)
    if (*it >= minimum_power_state) shape.clocks.push_back(*it);
  if (shape.clocks.empty())
    throw std::runtime_error(fmt::format("no clock common to all ranks is at least {} MHz", minimum_power_state));
  return shape;
}

void check_ranks(const SchedulerContext& context) {
  if (context.settings.mode != PowerMode::frequency)
    throw std::runtime_error("Perseus plans clocks; run the server in frequency mode");
  for (const auto& r : context.ranks)
    if (r.pipe_schedule.empty())
      throw std::runtime_error(
          fmt::format("rank {} did not send its pipe_schedule (Zeus's client?); Perseus measures "
                      "every instruction and needs perseus's client",
                      r.rank));
}

class PerseusScheduler final : public Scheduler {
 public:
  PerseusScheduler(const SchedulerContext& context, const PerseusConfig& config)
      : context_(context),
        profile_path_(config.profile_path.empty() ? context.job_dir / "profile.csv" : fs::path(config.profile_path)) {
    check_ranks(context);
    online::JobShape shape = job_shape(context, config.minimum_power_state);
    shape.gpus_per_stage = context.job.tp_degree;
    orders_ = shape.stage_orders();
    std::optional<Profile> reused;
    if (!config.profile_path.empty() && fs::exists(profile_path_)) reused = read_profile(profile_path_);
    online::ControllerHooks hooks;
    hooks.decided = [this](const online::Decision& d) { record(d); };
    hooks.profiled = [this](const Profile& p) { write_profile(p); };
    hooks.wake = context.wake;
    hooks.choosing = context.before_plan_choice;
    hooks.profile_source = profile_path_.string();
    if (context.settings.dump_data) hooks.record_dir = context.job_dir / "frontier";
    controller_ = std::make_unique<online::TurnkeyController>(config.controller, std::move(shape), std::move(reused),
                                                              std::move(hooks));
  }

  bool ready() const override { return controller_->ready(); }

  std::optional<JobPhase> phase() const override {
    switch (controller_->phase()) {
      case online::ControllerPhase::warmup:
        return JobPhase::warmup;
      case online::ControllerPhase::profiling:
        return JobPhase::profiling;
      case online::ControllerPhase::planning:
        return JobPhase::planning;
      case online::ControllerPhase::deployed:
        return JobPhase::deployed;
    }
    return JobPhase::running;
  }

  std::vector<PowerStateSchedule> next_schedule() override {
    budget_at_issue_ = {controller_->pace(), controller_->probes_held()};
    online::RoundClocks clocks = controller_->next_round();
    occurrences_ = controller_->wants_occurrences();
    if (!clocks) return top_clock_schedules(context_.ranks);
    std::vector<PowerStateSchedule> out;
    for (const auto& r : context_.ranks) {
      const auto& compute = clocks->at(static_cast<std::size_t>(r.dp_rank)).at(static_cast<std::size_t>(r.pp_rank));
      out.push_back({r.rank, expand_compute_clocks(r.pipe_schedule, compute, "Perseus")});
    }
    return out;
  }

  void observe(const std::vector<ProfilingResult>& results) override {
    controller_->observe(measure(results));
    note_history();
  }

  // The round as the loop sees it, not per rank: a restarted server replays exactly this.
  // A round paced for a power budget says so, so that a replay judges it as paced (not as a plan
  // that ran too slowly).
  json round_record(const std::vector<ProfilingResult>& results) const override {
    json record = server::to_json(measure(results));
    if (budget_at_issue_.first) record["budget_pace"] = *budget_at_issue_.first;
    if (budget_at_issue_.second) record["budget_holds_probes"] = true;
    return record;
  }
  void replay(const json& record) override {
    if (record.is_array()) return Scheduler::replay(record);  // per-rank results, as older stores kept them
    auto pace = record.value("budget_pace", json(nullptr));
    controller_->set_pace(pace.is_number() ? std::optional<double>(pace.get<double>()) : std::nullopt,
                          record.value("budget_holds_probes", false));
    controller_->observe(round_measurement_from_json(record));
    note_history();
  }

  online::RoundMeasurement measure(const std::vector<ProfilingResult>& results) const {
    return analyze_round(results, context_.ranks, context_.job.dp_degree, orders_,
                         controller_->shape().num_microbatches, occurrences_ || controller_->wants_occurrences());
  }

  SchedulerStatus status() const override {
    const auto& c = *controller_;
    SchedulerStatus out;
    out.profiling = {{"clocks_done", c.clocks_measured()},
                     {"clocks_total", c.clocks_planned()},
                     {"rounds", c.profiling_rounds()},
                     {"checks", c.profiling_checks()},
                     {"clocks_available", c.shape().clocks.size()},
                     {"profile", profile_path_.string()},
                     {"reused", c.reused_profile()}};
    auto interval = [](const online::Estimate& e) { return Interval{e.low, e.high}; };
    if (c.has_baseline())
      out.baseline = BaselineStatus{c.baseline_time(),
                                    c.baseline_energy(),
                                    interval(c.baseline_time_estimate()),
                                    interval(c.baseline_energy_estimate()),
                                    c.baseline_rounds(),
                                    c.baseline_rejected(),
                                    c.probes()};
    auto& online = out.online.emplace();
    json& details = online.details;
    // The schedule the ranks' orders follow, as the loop worked it out and plans it.
    details["schedule"] = {{"kind", to_string(c.shape().schedule)},
                           {"microbatches", c.shape().num_microbatches},
                           {"virtual_stages", schedule_virtual_stages(c.shape().schedule, c.shape().virtual_stages)}};
    details["p_block"] = c.p_block() ? json(*c.p_block()) : json(nullptr);
    const auto& config = c.config();
    details["target"] =
        c.has_baseline()
            ? json{{"iteration_time", c.target_time()},
                   {config.deadline ? "deadline" : "slowdown", config.deadline ? *config.deadline : config.slowdown},
                   {"tolerance", config.tolerance}}
            : json(nullptr);
    online.energy_saved = c.energy_saved();
    // Clock changes while deployed, those that had not taken effect by the end of their instruction
    // (the ranks read the clock back), and the latency plans are chosen for.
    details["clocks"] = {{"changes", c.clock_changes()},
                         {"late", c.clocks_late()},
                         {"latency", c.clock_latency()},
                         {"latency_source", c.config().clock_latency ? "told" : "measured"},
                         {"latency_samples", c.latency_samples()}};
    details["deployed_iterations"] = c.deployed_iterations();
    if (c.plans() && c.target_plan()) {
      const auto& p = *c.target_plan();
      const auto& plans = *c.plans();
      out.plan = PlanStatus{p.point,
                            p.label(),
                            p.time * c.scale(),
                            p.energy * context_.job.dp_degree * context_.job.tp_degree,
                            plans.record.points.size(),
                            plans.seconds,
                            plans.record.unit_time,
                            plans.cost_models,
                            c.step_ups(),
                            c.plan_reason()};
    }
    if (auto m = c.measured()) online.measured = MeasuredStatus{m->iteration_time, m->energy, m->rounds};
    // The saving and slowdown are over the last deployed rounds, whichever plans ran them: a new plan
    // (a straggler's, a step-up) does not blank them until it has run a round.
    out.saving = c.saving();
    out.slowdown = c.slowdown();
    if (out.saving) {
      auto ref = c.reference();
      online.reference = ReferenceStatus{ref.name, ref.iteration_time, ref.energy, ref.conditions};
    }
    json sigma = json::array();
    double largest = 0;
    for (const auto& s : c.variability()) sigma.push_back({s[0], s[1]}), largest = std::max({largest, s[0], s[1]});
    details["variability"] = {{"sigma", sigma}, {"max", largest}};
    const auto& times = c.last_pipeline_time();
    const auto& energies = c.last_pipeline_energy();
    for (std::size_t d = 0; d < times.size(); ++d) {
      PipelineStatus p{d, times[d], d < energies.size() ? energies[d] : 0.0, std::nullopt, std::nullopt};
      if (const ChosenPlan* plan = c.plan_of(d)) {
        p.plan = plan->label();
        p.predicted_time = plan->time;
      }
      online.pipelines.push_back(std::move(p));
    }
    if (const auto& s = c.straggler())
      out.straggler = StragglerStatus{s->slowdown,
                                      s->told          ? StragglerSource::api
                                      : s->in_baseline ? StragglerSource::baseline
                                                       : StragglerSource::detected,
                                      s->pipeline, s->compute_time * c.scale()};
    else if (const auto& d = c.detected_straggler(); d && c.phase() != online::ControllerPhase::deployed)
      out.straggler = StragglerStatus{d->slowdown, StragglerSource::detected, d->pipeline, std::nullopt};
    json recent = json::array();
    const auto& decisions = c.decisions();
    for (std::size_t i = decisions.size() > 20 ? decisions.size() - 20 : 0; i < decisions.size(); ++i)
      recent.push_back(to_json(decisions[i]));
    details["decisions"] = recent;
    json history = json::array();
    for (const auto& h : history_)
      history.push_back({{"round", h.round}, {"saving", h.saving}, {"slowdown", h.slowdown}});
    details["history"] = std::move(history);
    return out;
  }

  // In the job's units, as the status's plan: seconds and joules per iteration of the whole job
  // (the emulator's times scaled to the measured all-max, its energies to every pipeline and GPU).
  json frontier() const override {
    const auto& c = *controller_;
    if (!c.plans()) return nullptr;
    const auto& candidates = c.plans()->candidates;  // frontier points slowest first, then all-max
    const double gpus = context_.job.dp_degree * context_.job.tp_degree;
    auto point = [&](double time, double energy) {
      return json{{"time", time * c.scale()}, {"energy", energy * gpus}};
    };
    const std::size_t n = candidates.size() - 1;
    const std::size_t kept = std::min(n, kMaxFrontierPoints);
    json points = json::array();
    const auto& planned = c.plans()->record.points;   // the planner's quantized view of the same plans
    std::vector<std::pair<double, double>> emulated;  // of every point: what dominates is among them all
    emulated.reserve(n);
    for (std::size_t i = 0; i < n; ++i) emulated.emplace_back(candidates[i].time, candidates[i].energy);
    const auto dominated = dominated_points(emulated);
    for (std::size_t k = 0; k < kept; ++k) {  // evenly spaced, the first and last included
      const std::size_t i = kept == 1 ? 0 : k * (n - 1) / (kept - 1);
      const auto& p = candidates[i];
      points.push_back({p.time * c.scale(), p.energy * gpus, planned[i].time * c.scale(), planned[i].energy * gpus,
                        static_cast<bool>(dominated[i])});
    }
    json out = {{"points", std::move(points)},
                {"frontier_points", n},
                {"all_max", point(c.plans()->all_max().time, c.plans()->all_max().energy)},
                {"deployed", nullptr},
                {"baseline", nullptr},
                {"measured", nullptr}};
    if (const auto* p = c.target_plan()) {
      out["deployed"] = point(p->time, p->energy);
      out["deployed"]["label"] = p->label();
    }
    if (c.has_baseline()) out["baseline"] = {{"time", c.baseline_time()}, {"energy", c.baseline_energy()}};
    if (auto m = c.measured()) out["measured"] = {{"time", m->iteration_time}, {"energy", m->energy}};
    return out;
  }

  std::function<std::string()> timeline() const override {
    const auto* plans = controller_->plans();
    const auto* plan = controller_->target_plan();
    if (!plans || !plan || !plans->emulator) return {};
    std::size_t instructions = 0;
    for (const auto& stage : plan->frequencies) instructions += stage.size();
    std::string label = plan->label();
    if (instructions > kMaxTimelineInstructions)
      return [instructions, label]() -> std::string {
        throw RequestError(Refusal::not_found,
                           fmt::format("the plan ({}) runs {} forwards and backwards per pipeline: too many to "
                                       "draw (at most {})",
                                       label, instructions, kMaxTimelineInstructions));
      };
    return [emulator = plans->emulator, frequencies = plan->frequencies, label] {
      EmulationResult run = emulator->run(frequencies);
      TimelineOptions options;
      options.title = fmt::format("{}: {:.4f} s, {:.1f} J per iteration of one pipeline (emulated)", label,
                                  run.iteration_time, run.energy);
      return timeline_svg(run, options);
    };
  }

  std::vector<online::PaceOption> pace_options() const override { return controller_->pace_options(kPaceOptions); }
  std::optional<online::PaceOption> under_power_limit(double watts) const override {
    return controller_->under_power_limit(watts);
  }
  void set_pace(std::optional<double> iteration_time, bool hold_probes) override {
    controller_->set_pace(iteration_time, hold_probes);
  }

  void set_straggler(const std::optional<StragglerNotice>& notice) override {
    if (!notice) return controller_->set_straggler(std::nullopt);
    controller_->set_straggler(online::StragglerTold{notice->slowdown, notice->iteration_time, notice->dp_rank});
  }

 private:
  static json to_json(const online::Decision& d) {
    return {{"round", d.round}, {"event", to_string(d.event)}, {"detail", d.detail}};
  }

  // The status's `history`: the saving and slowdown it reported after each of the last deployed rounds.
  static constexpr std::size_t kHistoryRounds = 500;
  // Paces offered to a power budget: a step of about 0.4% of the frontier's time range each.
  static constexpr std::size_t kPaceOptions = 256;
  // A timeline's SVG takes ~400 bytes per box: this bounds one at ~3 MB.
  static constexpr std::size_t kMaxTimelineInstructions = 8192;
  struct HistoryPoint {
    int round = 0;
    double saving = 0, slowdown = 0;
  };
  void note_history() {
    const auto& c = *controller_;
    if (c.phase() != online::ControllerPhase::deployed) return;
    auto saving = c.saving();
    auto slowdown = c.slowdown();
    if (!saving || !slowdown) return;
    history_.push_back({c.round(), saving->value, slowdown->value});
    if (history_.size() > kHistoryRounds) history_.pop_front();
  }

  // Every decision goes to the log and the job's records.
  void record(const online::Decision& d) {
    spdlog::info("job {}: Perseus round {}: {}: {}", context_.job.job_id, d.round, to_string(d.event), d.detail);
    decisions_.push_back(to_json(d));
    if (!context_.settings.dump_data) return;
    try {
      fs::create_directories(context_.job_dir);
      write_file_atomic(context_.job_dir / "decisions.json", json(decisions_).dump(1) + "\n");
    } catch (const std::exception& e) {
      spdlog::error("job {}: could not record a decision: {}", context_.job.job_id, e.what());
    }
  }

  void write_profile(const Profile& profile) {
    try {
      fs::create_directories(profile_path_.parent_path().empty() ? fs::path(".") : profile_path_.parent_path());
      write_file_atomic(profile_path_, profile_csv(profile));
    } catch (const std::exception& e) {
      spdlog::error("job {}: could not write the profile: {}", context_.job.job_id, e.what());
    }
  }

  SchedulerContext context_;
  fs::path profile_path_;
  std::vector<std::vector<Instruction>> orders_;
  std::vector<json> decisions_;
  std::deque<HistoryPoint> history_;
  bool occurrences_ = false;  // the round running now is one the controller wants every duration of
  std::pair<std::optional<double>, bool> budget_at_issue_;  // the power budget's pace and probe hold of that round
  std::unique_ptr<online::TurnkeyController> controller_;   // last: its hooks point at the members above
};

}  // namespace

SchedulerFactory configure_perseus(const nlohmann::json& args) {
  SchedulerArgs checked("Perseus", args,
                        {"warmup_rounds",
                         "wait_for_plan",
                         "slowdown",
                         "deadline",
                         "tolerance",
                         "verify_rounds",
                         "max_step_ups",
                         "profile_path",
                         "minimum_power_state",
                         "unit_time",
                         "cost_model",
                         "coarse_step",
                         "stop_after",
                         "descent",
                         "fill_gap",
                         "interpolate",
                         "refine_passes",
                         "confirm_passes",
                         "confirm_error",
                         "check_every",
                         "clock_latency",
                         "straggler_threshold",
                         "straggler_rounds",
                         "probe_every",
                         "retry_after",
                         "max_retry_after",
                         "report_rounds",
                         "baseline_precision",
                         "max_baseline_rounds"});
  PerseusConfig config;
  online::ControllerConfig& c = config.controller;
  c.warmup_rounds = checked.integer("warmup_rounds").value_or(c.warmup_rounds);
  if (c.warmup_rounds < 1) checked.fail("warmup_rounds", "must be at least 1 (the all-max baseline is measured then)");
  c.wait_for_plan = checked.boolean("wait_for_plan").value_or(false);
  c.interpolate = checked.boolean("interpolate").value_or(c.interpolate);
  c.refine_passes = checked.integer("refine_passes").value_or(c.refine_passes);
  if (c.refine_passes < 0) checked.fail("refine_passes", "must be at least 0");
  c.confirm_passes = checked.integer("confirm_passes").value_or(c.confirm_passes);
  if (c.confirm_passes < 0) checked.fail("confirm_passes", "must be at least 0");
  c.confirm_error = checked.number("confirm_error").value_or(c.confirm_error);
  if (!(c.confirm_error >= 0)) checked.fail("confirm_error", "must be at least 0");
  c.check_every = checked.integer("check_every").value_or(c.check_every);
  if (c.check_every < 0) checked.fail("check_every", "must be at least 0 (0: no check rounds while profiling)");
  auto slowdown = checked.number("slowdown");
  c.deadline = checked.number("deadline");
  if (slowdown && c.deadline) checked.fail("deadline", "give slowdown or deadline, not both");
  c.slowdown = slowdown.value_or(1.0);
  if (!(c.slowdown >= 1 && c.slowdown <= 100)) checked.fail("slowdown", "must be between 1 and 100");
  if (c.deadline && !(*c.deadline > 0 && *c.deadline < 1e6))
    checked.fail("deadline", "must be a positive number of seconds");
  c.tolerance = checked.number("tolerance").value_or(c.tolerance);
  if (!(c.tolerance >= 0 && c.tolerance < 1)) checked.fail("tolerance", "must be in [0, 1)");
  c.verify_rounds = checked.integer("verify_rounds").value_or(c.verify_rounds);
  if (c.verify_rounds < 1) checked.fail("verify_rounds", "must be at least 1");
  c.baseline_precision = checked.number("baseline_precision").value_or(c.baseline_precision);
  if (!(c.baseline_precision > 0 && c.baseline_precision < 1)) checked.fail("baseline_precision", "must be in (0, 1)");
  c.max_baseline_rounds = checked.integer("max_baseline_rounds").value_or(c.max_baseline_rounds);
  if (c.max_baseline_rounds < 1 || c.max_baseline_rounds > 10000)
    checked.fail("max_baseline_rounds", "must be between 1 and 10000");
  c.probe_every = checked.integer("probe_every").value_or(c.probe_every);
  if (c.probe_every < 0) checked.fail("probe_every", "must be at least 0 (0: no probes)");
  c.retry_after = checked.integer("retry_after").value_or(c.retry_after);
  if (c.retry_after < 1) checked.fail("retry_after", "must be at least 1");
  c.max_retry_after = checked.integer("max_retry_after").value_or(c.max_retry_after);
  if (c.max_retry_after < 0) checked.fail("max_retry_after", "must be at least 0 (0: a step-up is never retried)");
  c.report_rounds = checked.integer("report_rounds").value_or(c.report_rounds);
  if (c.report_rounds < 1) checked.fail("report_rounds", "must be at least 1");
  c.max_step_ups = checked.integer("max_step_ups").value_or(c.max_step_ups);
  if (c.max_step_ups < 0) checked.fail("max_step_ups", "must be at least 0");
  config.profile_path = checked.string("profile_path").value_or("");
  if (!config.profile_path.empty() && fs::exists(config.profile_path)) {
    try {  // a bad profile stops the server at start, not a job later
      (void)read_profile(config.profile_path);
    } catch (const std::exception& e) {
      checked.fail("profile_path", e.what());
    }
  }
  config.minimum_power_state = checked.integer("minimum_power_state").value_or(0);
  c.clock_latency = checked.number("clock_latency");
  if (c.clock_latency && !(*c.clock_latency >= 0 && *c.clock_latency <= 10))
    checked.fail("clock_latency", "must be between 0 and 10 s");
  c.unit_time = checked.number("unit_time");
  if (c.unit_time && !(*c.unit_time >= 1e-6 && *c.unit_time <= 1))
    checked.fail("unit_time", "must be between 1e-6 and 1 s");
  if (auto model = checked.string("cost_model")) {
    auto kind = parse_cost_model_kind(*model);
    if (!kind) checked.fail("cost_model", "must be auto, exp or pwl");
    c.cost_model = *kind;
  }
  c.scan.coarse_step = checked.integer("coarse_step").value_or(c.scan.coarse_step);
  if (c.scan.coarse_step < 1) checked.fail("coarse_step", "must be at least 1 (1: every clock)");
  c.scan.stop_after = checked.integer("stop_after").value_or(c.scan.stop_after);
  if (c.scan.stop_after < 1) checked.fail("stop_after", "must be at least 1");
  c.scan.descent = checked.number("descent").value_or(c.scan.descent);
  if (!(c.scan.descent >= 0 && c.scan.descent < 1)) checked.fail("descent", "must be in [0, 1)");
  c.scan.fill_gap = checked.number("fill_gap").value_or(c.scan.fill_gap);
  if (!(c.scan.fill_gap > 0)) checked.fail("fill_gap", "must be positive");
  c.detector.threshold = checked.number("straggler_threshold").value_or(c.detector.threshold);
  if (!(c.detector.threshold > 0 && c.detector.threshold < 10))
    checked.fail("straggler_threshold", "must be in (0, 10)");
  c.detector.rounds = checked.integer("straggler_rounds").value_or(c.detector.rounds);
  if (c.detector.rounds < 1) checked.fail("straggler_rounds", "must be at least 1");
  return [config](const SchedulerContext& context) { return std::make_unique<PerseusScheduler>(context, config); };
}

}  // namespace perseus::server
