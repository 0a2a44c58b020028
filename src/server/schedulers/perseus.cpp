// The turnkey scheduler (DESIGN §5): one server run measures the all-max baseline, profiles every
// (stage, kind) online (clocks top down, coarse to fine, early stop, several stages and kinds per
// round), measures the blocking power, plans on a worker thread, deploys the cheapest plan that
// meets the target, verifies it against the measured baseline and steps to faster plans when it is
// measurably slower, and slows the other pipelines down to a straggler's pace (detected from the
// measured instruction durations, or told through POST /straggler) until it recovers.
// Tensor-parallel ranks of a stage share a plan; each data-parallel pipeline runs its own.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "perseus/emulate/straggler.hpp"
#include "perseus/online/background_planner.hpp"
#include "perseus/online/clock_scan.hpp"
#include "perseus/online/straggler_detector.hpp"
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
  int warmup_rounds = 2;
  bool wait_for_plan = false;  // hold the ranks at the barrier while planning (else: train at the top clock)
  bool interpolate = true;     // plan with the clocks between measured ones too (interpolated)
  int refine_passes = 0;       // measure the interpolated clocks a plan runs, then plan again (more rounds)
  double slowdown = 1.0;
  std::optional<double> deadline;
  double tolerance = 0.005;
  int verify_rounds = 3;
  int max_step_ups = 8;
  std::string profile_path;
  int minimum_power_state = 0;
  std::optional<double> unit_time;
  CostModelKind cost_model = CostModelKind::automatic;
  online::ScanOptions scan;
  online::DetectorOptions detector;
};

enum class Phase { warmup, profiling, planning, deployed };

const char* to_string(Phase phase) {
  switch (phase) {
    case Phase::warmup: return "warmup";
    case Phase::profiling: return "profiling";
    case Phase::planning: return "planning";
    case Phase::deployed: return "deployed";
  }
  return "?";
}

// Which known schedule a rank's forwards and backwards follow.
std::optional<ScheduleKind> schedule_of(const RankInfo& rank, int stages, int microbatches) {
  std::vector<std::string> compute;
  for (const auto& name : rank.pipe_schedule)
    if (is_compute_instruction(name)) compute.push_back(name);
  for (auto kind : {ScheduleKind::one_f_one_b, ScheduleKind::gpipe}) {
    std::vector<std::string> expected;
    for (const auto& inst : stage_schedule(kind, rank.pp_rank, stages, microbatches)) expected.emplace_back(to_string(inst.kind));
    if (expected == compute) return kind;
  }
  return std::nullopt;
}

int count_forwards(const RankInfo& rank) {
  return static_cast<int>(std::count(rank.pipe_schedule.begin(), rank.pipe_schedule.end(), "forward"));
}

class PerseusScheduler final : public Scheduler {
 public:
  PerseusScheduler(const SchedulerContext& context, PerseusConfig config)
      : context_(context), config_(std::move(config)), detector_(config_.detector) {
    const auto& job = context.job;
    if (context.settings.mode != "frequency")
      throw std::runtime_error("Perseus plans clocks; run the server with --mode frequency");
    for (const auto& r : context.ranks)
      if (r.pipe_schedule.empty())
        throw std::runtime_error(fmt::format("rank {} did not send its pipe_schedule (Zeus's client?); Perseus measures "
                                             "every instruction and needs perseus's client", r.rank));
    stages_ = job.pp_degree;
    microbatches_ = count_forwards(context.ranks.front());
    std::optional<ScheduleKind> kind;
    for (const auto& r : context.ranks) {
      if (count_forwards(r) != microbatches_)
        throw std::runtime_error(fmt::format("rank {} runs {} forwards per iteration, rank 0 runs {}", r.rank,
                                             count_forwards(r), microbatches_));
      auto mine = schedule_of(r, stages_, microbatches_);
      if (!mine || (kind && *mine != *kind))
        throw std::runtime_error(fmt::format("rank {}'s forwards and backwards follow neither 1F1B nor GPipe for stage "
                                             "{} of {} with {} microbatches; the turnkey loop plans those schedules "
                                             "(for Megatron-LM's interleaved one, plan with perseus optimize --schedule "
                                             "interleaved and serve the frontier with PointSolution)",
                                             r.rank, r.pp_rank, stages_, microbatches_));
      kind = mine;
    }
    schedule_ = *kind;
    for (int s = 0; s < stages_; ++s) orders_.push_back(stage_schedule(schedule_, s, stages_, microbatches_));
    // Clocks every rank supports, high to low, at or above minimum_power_state.
    std::set<int> common(context.ranks.front().power_state_range.begin(), context.ranks.front().power_state_range.end());
    for (const auto& r : context.ranks) {
      std::set<int> mine(r.power_state_range.begin(), r.power_state_range.end()), both;
      std::set_intersection(common.begin(), common.end(), mine.begin(), mine.end(), std::inserter(both, both.end()));
      common = both;
    }
    for (auto it = common.rbegin(); it != common.rend(); ++it)
      if (*it >= config_.minimum_power_state) clocks_.push_back(*it);
    if (clocks_.empty())
      throw std::runtime_error(fmt::format("no clock common to all ranks is at least {} MHz", config_.minimum_power_state));
    for (int s = 0; s < stages_; ++s)
      for (int k = 0; k < 2; ++k) scans_.emplace_back(clocks_, config_.scan);
    profile_path_ = config_.profile_path.empty() ? context.job_dir / "profile.csv" : fs::path(config_.profile_path);
    reuse_profile_ = !config_.profile_path.empty() && fs::exists(profile_path_);
  }

  bool ready() const override { return !(config_.wait_for_plan && phase_ == Phase::planning && !planner_.ready()); }

  std::vector<PowerStateSchedule> next_schedule() override {
    if (phase_ == Phase::planning && planner_.ready()) plan_ready();
    switch (phase_) {
      case Phase::profiling: return profiling_schedules();
      case Phase::deployed: return plan_schedules();
      default: return top_clock_schedules(context_.ranks);
    }
  }

  void observe(const std::vector<ProfilingResult>& results) override { observe(measure(results)); }

  // The round as the loop sees it, not per rank: a restarted server replays exactly this.
  json round_record(const std::vector<ProfilingResult>& results) const override { return to_json(measure(results)); }
  void replay(const json& record) override {
    if (record.is_array()) return Scheduler::replay(record);  // per-rank results, as older stores kept them
    observe(round_measurement_from_json(record));
  }

  RoundMeasurement measure(const std::vector<ProfilingResult>& results) const {
    return analyze_round(results, context_.ranks, context_.job.dp_degree, orders_, microbatches_);
  }

  void observe(const RoundMeasurement& m) {
    int round = round_++;
    last_pipeline_time_ = m.pipeline_time;
    last_pipeline_energy_ = m.pipeline_energy;
    switch (phase_) {
      case Phase::warmup: return observe_warmup(round, m);
      case Phase::profiling: return observe_profiling(m);
      // Top-clock rounds while planning are not added to the baseline: after a server restart the
      // replayed rounds of this phase may have been deployed ones.
      case Phase::planning: return;
      case Phase::deployed: return observe_deployed(m);
    }
  }

  json status() const override {
    json out;
    out["phase"] = to_string(phase_);
    std::size_t done = 0, total = 0;
    for (const auto& scan : scans_) done += scan.measured().size(), total += scan.planned();
    out["profiling"] = {{"clocks_done", reuse_profile_ ? 0 : done},
                        {"clocks_total", reuse_profile_ ? 0 : total},
                        {"rounds", profiling_rounds_},
                        {"clocks_available", clocks_.size()},
                        {"profile", profile_path_.string()},
                        {"reused", reuse_profile_}};
    out["baseline"] = baseline_rounds_ > 0 ? json{{"iteration_time", baseline_time_}, {"energy", baseline_energy_}}
                                           : json(nullptr);
    out["p_block"] = p_block_ ? json(*p_block_) : json(nullptr);
    out["target"] = baseline_rounds_ > 0 ? json{{"iteration_time", target_time()},
                                                {config_.deadline ? "deadline" : "slowdown",
                                                 config_.deadline ? *config_.deadline : config_.slowdown},
                                                {"tolerance", config_.tolerance}}
                                         : json(nullptr);
    out["plan"] = nullptr;
    out["measured"] = nullptr;
    out["saving"] = nullptr;
    out["slowdown"] = nullptr;
    out["straggler"] = nullptr;
    if (plans_ && target_plan_) {
      const auto& c = *target_plan_;
      out["plan"] = {{"index", c.point ? json(*c.point) : json(nullptr)},
                     {"label", c.label()},
                     {"predicted_time", c.time * scale_},
                     {"predicted_energy", c.energy * context_.job.dp_degree * context_.job.tp_degree},
                     {"frontier_points", plans_->record.points.size()},
                     {"planning_seconds", plans_->seconds},
                     {"unit_time", plans_->record.unit_time},
                     {"cost_models", plans_->cost_models},
                     {"step_ups", step_ups_}};
    }
    if (!measured_.empty()) {
      double t = 0, e = 0;
      for (const auto& [time, energy] : measured_) t += time, e += energy;
      t /= double(measured_.size()), e /= double(measured_.size());
      out["measured"] = {{"iteration_time", t}, {"energy", e}, {"rounds", measured_.size()}};
      out["saving"] = 1 - e / baseline_energy_;
      out["slowdown"] = t / baseline_time_ - 1;
    }
    json pipelines = json::array();
    for (std::size_t d = 0; d < last_pipeline_time_.size(); ++d) {
      json p = {{"dp_rank", d}, {"iteration_time", last_pipeline_time_[d]}, {"energy", last_pipeline_energy_[d]}};
      if (const ChosenPlan* plan = plan_of(d)) {
        p["plan"] = plan->label();
        p["predicted_time"] = plan->time;
      }
      pipelines.push_back(std::move(p));
    }
    out["pipelines"] = pipelines;
    if (straggler_)
      out["straggler"] = {{"slowdown", straggler_->slowdown},
                          {"source", straggler_->from_api ? "api" : "detected"},
                          {"dp_rank", straggler_->pipeline ? json(*straggler_->pipeline) : json(nullptr)},
                          {"iteration_time", straggler_->compute_time * scale_}};
    json recent = json::array();
    for (std::size_t i = decisions_.size() > 20 ? decisions_.size() - 20 : 0; i < decisions_.size(); ++i)
      recent.push_back(decisions_[i]);
    out["decisions"] = recent;
    return out;
  }

  void set_straggler(const std::optional<StragglerNotice>& notice) override {
    if (!notice) {
      if (api_straggler_) decide("straggler cleared", "the API cleared the straggler");
      api_straggler_.reset();
    } else {
      api_straggler_ = *notice;
      decide("straggler told", notice->slowdown ? fmt::format("the API says iterations take {}x the all-max time",
                                                              *notice->slowdown)
                                                : fmt::format("the API says iterations take {} s", *notice->iteration_time));
    }
    // The plans change now; the ranks get them with the next round's schedules.
    if (phase_ == Phase::deployed) assign_plans(notice ? "straggler (api)" : "straggler cleared (api)");
  }

 private:
  struct ActiveStraggler {
    std::optional<int> pipeline;  // the slow pipeline, when known
    double slowdown = 1;
    double compute_time = 0;  // its compute-bound iteration time: what the others slow down to
    bool from_api = false;
  };

  double target_time() const { return config_.deadline ? *config_.deadline : config_.slowdown * baseline_time_; }
  // The target in the emulator's time (the measured all-max time is the emulated all-max time there,
  // exactly: a measurement a few nanoseconds short must not rule out every plan).
  double target_deadline() const { return target_deadline_for(*plans_); }
  double target_deadline_for(const online::PlanningOutput& plans) const {
    double scale = plans.all_max().time > 0 ? baseline_time_ / plans.all_max().time : 1;
    return config_.deadline ? *config_.deadline / scale : config_.slowdown * plans.all_max().time;
  }

  // Every decision goes to the log and the job's records.
  void decide(const std::string& event, const std::string& detail) {
    json entry = {{"round", round_}, {"event", event}, {"detail", detail}};
    spdlog::info("job {}: Perseus round {}: {}: {}", context_.job.job_id, round_, event, detail);
    decisions_.push_back(entry);
    if (!context_.settings.dump_data) return;
    try {
      fs::create_directories(context_.job_dir);
      write_file_atomic(context_.job_dir / "decisions.json", json(decisions_).dump(1) + "\n");
    } catch (const std::exception& e) {
      spdlog::error("job {}: could not record a decision: {}", context_.job.job_id, e.what());
    }
  }

  std::size_t scan_index(int stage, InstructionKind kind) const {
    return static_cast<std::size_t>(stage) * 2 + (kind == InstructionKind::forward ? 0 : 1);
  }

  void add_baseline(const RoundMeasurement& m) {
    baseline_time_ = (baseline_time_ * baseline_rounds_ + m.iteration_time) / (baseline_rounds_ + 1);
    baseline_energy_ = (baseline_energy_ * baseline_rounds_ + m.energy) / (baseline_rounds_ + 1);
    ++baseline_rounds_;
    if (m.blocking_power) {
      idle_power_sum_ += *m.blocking_power;
      ++idle_power_rounds_;
      p_block_ = idle_power_sum_ / idle_power_rounds_;
    }
  }

  void observe_warmup(int round, const RoundMeasurement& m) {
    // The first warm-up round carries start-up effects; the others are the baseline.
    if (round > 0 || config_.warmup_rounds <= 1) add_baseline(m);
    if (round + 1 < std::max(config_.warmup_rounds, 1)) return;
    if (baseline_rounds_ == 0) add_baseline(m);
    decide("baseline", fmt::format("all-max: {:.6g} s and {:.6g} J per iteration; blocking power {}", baseline_time_,
                                   baseline_energy_, p_block_ ? fmt::format("{:.4g} W", *p_block_) : "unknown"));
    if (reuse_profile_) {
      decide("profile reused", fmt::format("planning from {} (profile_path exists)", profile_path_.string()));
      return start_planning(read_profile(profile_path_));
    }
    // The top clock of every scan was just measured.
    for (int s = 0; s < stages_; ++s)
      for (auto kind : {InstructionKind::forward, InstructionKind::backward}) {
        auto it = m.instructions.find({s, kind});
        auto& scan = scans_[scan_index(s, kind)];
        if (it != m.instructions.end() && scan.next() == clocks_.front())
          scan.record(clocks_.front(), {it->second.first, it->second.second});
      }
    phase_ = Phase::profiling;
    decide("profiling", fmt::format("{} clocks from {} to {} MHz, coarse step {}, per stage and kind",
                                    clocks_.size(), clocks_.front(), clocks_.back(), config_.scan.coarse_step));
    if (profiling_done()) finish_profiling();
  }

  bool profiling_done() const {
    return std::all_of(scans_.begin(), scans_.end(), [](const auto& s) { return s.done(); });
  }

  std::vector<PowerStateSchedule> profiling_schedules() {
    issued_.clear();
    std::vector<int> forward(static_cast<std::size_t>(stages_)), backward(forward);
    for (int s = 0; s < stages_; ++s) {
      auto f = scans_[scan_index(s, InstructionKind::forward)].next();
      auto b = scans_[scan_index(s, InstructionKind::backward)].next();
      forward[static_cast<std::size_t>(s)] = f.value_or(clocks_.front());
      backward[static_cast<std::size_t>(s)] = b.value_or(clocks_.front());
      issued_.push_back({f, b});
    }
    std::vector<PowerStateSchedule> out;
    for (const auto& r : context_.ranks) {
      std::vector<int> compute;
      for (const auto& inst : orders_[static_cast<std::size_t>(r.pp_rank)])
        compute.push_back(inst.kind == InstructionKind::forward ? forward[static_cast<std::size_t>(r.pp_rank)]
                                                                : backward[static_cast<std::size_t>(r.pp_rank)]);
      out.push_back({r.rank, expand_compute_clocks(r.pipe_schedule, compute, "Perseus")});
    }
    return out;
  }

  void observe_profiling(const RoundMeasurement& m) {
    ++profiling_rounds_;
    for (int s = 0; s < stages_ && static_cast<std::size_t>(s) < issued_.size(); ++s)
      for (auto kind : {InstructionKind::forward, InstructionKind::backward}) {
        auto clock = kind == InstructionKind::forward ? issued_[static_cast<std::size_t>(s)].first
                                                      : issued_[static_cast<std::size_t>(s)].second;
        auto it = m.instructions.find({s, kind});
        if (clock && it != m.instructions.end())
          scans_[scan_index(s, kind)].record(*clock, {it->second.first, it->second.second});
      }
    issued_.clear();
    if (profiling_done()) finish_profiling();
  }

  void finish_profiling() {
    Profile profile;
    profile.source = profile_path_.string();
    std::size_t measured = 0;
    for (int s = 0; s < stages_; ++s)
      for (auto kind : {InstructionKind::forward, InstructionKind::backward}) {
        const auto& scan = scans_[scan_index(s, kind)];
        measured += scan.measured().size();
        auto rows = config_.interpolate ? scan.interpolated() : scan.measured();
        for (auto it = rows.rbegin(); it != rows.rend(); ++it)
          profile.rows.push_back({s, kind, it->first, it->second.time, it->second.energy, 0});
      }
    decide("profiled", fmt::format("{} rounds, {} clocks measured over {} (stage, kind) (one round per clock would "
                                   "take {} rounds)", profiling_rounds_, measured, scans_.size(), clocks_.size()));
    try {
      fs::create_directories(profile_path_.parent_path().empty() ? fs::path(".") : profile_path_.parent_path());
      write_file_atomic(profile_path_, profile_csv(profile));
    } catch (const std::exception& e) {
      spdlog::error("job {}: could not write the profile: {}", context_.job.job_id, e.what());
    }
    start_planning(std::move(profile));
  }

  void start_planning(Profile profile) {
    online::PlanningInput input;
    input.config.num_stages = stages_;
    input.config.num_microbatches = microbatches_;
    input.config.schedule = schedule_;
    input.config.p_block = p_block_.value_or(0);
    input.config.cost_model = config_.cost_model;
    input.config.unit_time = config_.unit_time.value_or(online::automatic_unit_time(profile));
    input.profile = std::move(profile);
    if (context_.settings.dump_data) input.record_dir = context_.job_dir / "frontier";
    phase_ = Phase::planning;
    decide("planning", fmt::format("on a worker thread: unit time {} s, blocking power {:.4g} W, cost model {}",
                                   input.config.unit_time, input.config.p_block, to_string(config_.cost_model)));
    planner_.start(std::move(input), context_.wake);
  }

  void plan_ready() {
    try {
      plans_ = planner_.take();
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("Perseus could not plan: {}", e.what()));
    }
    if (refine_passes_ < config_.refine_passes && !reuse_profile_ && config_.interpolate) {
      // Fill in where the front needs it: measure the clocks the target plan runs that were only
      // interpolated, then plan again.
      ChosenPlan wanted = online::choose_plan(*plans_, target_deadline_for(*plans_));
      std::size_t asked = 0;
      for (int s = 0; s < stages_; ++s) {
        const auto& order = orders_[static_cast<std::size_t>(s)];
        for (std::size_t slot = 0; slot < order.size(); ++slot)
          if (scans_[scan_index(s, order[slot].kind)].request(wanted.frequencies[static_cast<std::size_t>(s)][slot])) ++asked;
      }
      if (asked > 0) {
        ++refine_passes_;
        decide("refining", fmt::format("the plan runs {} clocks that were interpolated; measuring them (pass {} of at "
                                       "most {})", asked, refine_passes_, config_.refine_passes));
        plans_.reset();
        phase_ = Phase::profiling;
        return;
      }
    }
    deploy_plan();
  }

  void deploy_plan() {
    // Measured iteration time over emulated all-max time: what the model leaves out (the gradient
    // synchronisation, launch gaps), so that predictions compare with measurements.
    scale_ = plans_->all_max().time > 0 ? baseline_time_ / plans_->all_max().time : 1;
    std::vector<std::string> pwl;
    for (const auto& [where, model] : plans_->cost_models)
      if (model == "pwl") pwl.push_back(where);
    decide("planned", fmt::format("{} frontier points in {:.2f} s; cost model {}", plans_->record.points.size(),
                                  plans_->seconds,
                                  pwl.empty() ? "exponential everywhere"
                                              : fmt::format("piecewise-linear for {} (the exponential fit failed), "
                                                            "exponential elsewhere", fmt::join(pwl, ", "))));
    target_plan_ = online::choose_plan(*plans_, target_deadline());
    if (config_.deadline && *config_.deadline < baseline_time_)
      decide("deadline below all-max", fmt::format("the deadline {} s is below the measured all-max time {:.6g} s: "
                                                   "running the fastest plan", *config_.deadline, baseline_time_));
    phase_ = Phase::deployed;
    assign_plans("deployed");
  }

  // The plan pipeline d runs; null before deployment.
  const ChosenPlan* plan_of(std::size_t d) const {
    if (!target_plan_ || d >= slowed_.size()) return nullptr;
    return slowed_[d] && slowed_plan_ ? &*slowed_plan_ : &*target_plan_;
  }

  std::string describe(const ChosenPlan& plan) const {
    return fmt::format("{} (predicted {:.6g} s, {:.6g} J per pipeline)", plan.label(), plan.time * scale_, plan.energy);
  }

  // Every pipeline's plan from the target and the straggler (API first, then detection).
  void assign_plans(const std::string& why) {
    std::optional<ActiveStraggler> next;
    if (api_straggler_) {
      ActiveStraggler s;
      s.from_api = true;
      s.pipeline = api_straggler_->dp_rank;
      double iteration = api_straggler_->slowdown ? *api_straggler_->slowdown * baseline_time_ : *api_straggler_->iteration_time;
      s.slowdown = iteration / baseline_time_;
      s.compute_time = iteration / scale_;
      next = s;
    } else if (detector_.current()) {
      ActiveStraggler s;
      s.pipeline = detector_.current()->pipeline;
      s.slowdown = detector_.current()->slowdown;
      s.compute_time = last_pipeline_time_.at(static_cast<std::size_t>(*s.pipeline));
      next = s;
    }
    std::vector<bool> slowed(static_cast<std::size_t>(context_.job.dp_degree), false);
    std::optional<ChosenPlan> slowed_plan;
    // The others finish by the straggler's time, but never later than the target asks.
    if (next && next->compute_time > target_plan_->time) {
      slowed_plan = online::choose_plan(*plans_, next->compute_time);
      for (std::size_t d = 0; d < slowed.size(); ++d)
        if (!next->pipeline || static_cast<int>(d) != *next->pipeline) slowed[d] = true;
    }
    bool changed = !deployed_once_ || slowed != slowed_ ||
                   (slowed_plan.has_value() != slowed_plan_.has_value()) ||
                   (slowed_plan && slowed_plan->frequencies != slowed_plan_->frequencies);
    straggler_ = next;
    slowed_ = slowed;
    slowed_plan_ = std::move(slowed_plan);
    deployed_once_ = true;
    if (!changed) return;
    measured_.clear();
    rounds_on_plan_ = 0;
    std::string who;
    for (std::size_t d = 0; d < slowed_.size(); ++d)
      who += fmt::format("{}pipeline {}: {}", d == 0 ? "" : "; ", d, describe(*plan_of(d)));
    decide(why, who);
  }

  std::vector<PowerStateSchedule> plan_schedules() {
    std::vector<PowerStateSchedule> out;
    for (const auto& r : context_.ranks) {
      const ChosenPlan& plan = *plan_of(static_cast<std::size_t>(r.dp_rank));
      out.push_back({r.rank, expand_compute_clocks(r.pipe_schedule, plan.frequencies[static_cast<std::size_t>(r.pp_rank)],
                                                   "Perseus")});
    }
    return out;
  }

  void observe_deployed(const RoundMeasurement& m) {
    ++rounds_on_plan_;
    measured_.push_back({m.iteration_time, m.energy});
    if (measured_.size() > 5) measured_.pop_front();

    // Straggler detection: each pipeline's measured compute-bound time against its plan's prediction.
    std::vector<double> ratios;
    for (std::size_t d = 0; d < m.pipeline_time.size(); ++d) {
      double predicted = plan_of(d)->time;
      ratios.push_back(predicted > 0 && m.pipeline_time[d] > 0 ? m.pipeline_time[d] / predicted : 1.0);
    }
    bool before = detector_.current().has_value();
    if (detector_.observe(ratios) && !api_straggler_) {
      const auto& now = detector_.current();
      if (now) {
        decide(before ? "straggler changed" : "straggler detected",
               fmt::format("pipeline {} runs {:.3f}x slower than the others ({:.6g} s compute-bound)", now->pipeline,
                           now->slowdown, m.pipeline_time[static_cast<std::size_t>(now->pipeline)]));
      } else {
        decide("straggler recovered", "every pipeline is back within the threshold");
      }
      return assign_plans(now ? "slowed to the straggler" : "back to the target plan");
    }

    // Closed loop: the target plan must not be measurably slower than asked. Judged on the iteration
    // time training sees, but not while a pipeline looks like a straggler that detection has not
    // confirmed yet (that slowness is the straggler's, not the plan's).
    if (straggler_ || detector_.suspects() || rounds_on_plan_ < config_.verify_rounds) return;
    // The median round, so that one disturbed round (a straggler starting mid-round) does not count.
    std::vector<double> times;
    for (const auto& [time, energy] : measured_) times.push_back(time);
    std::sort(times.begin(), times.end());
    double measured_time = times.size() % 2 == 1 ? times[times.size() / 2]
                                                 : (times[times.size() / 2 - 1] + times[times.size() / 2]) / 2;
    double target = target_time();
    if (measured_time <= target * (1 + config_.tolerance)) return;
    const bool all_max = !target_plan_->point && target_plan_->fit_steps == 0;
    if (all_max) return;  // what the baseline measured: nothing to step to
    ChosenPlan before_plan = *target_plan_;
    if (step_ups_ >= config_.max_step_ups || target_plan_->time <= online::fastest_plan(*plans_).time) {
      // The model has nothing faster (noise stretches plans with many near-critical paths more than
      // all-max, say): the baseline's own plan, all-max, is what meets the target.
      target_plan_ = online::all_max(*plans_);
    } else {
      // Correct the prediction by what was measured and take the cheapest plan that then meets the
      // target, at least a little faster than this one.
      double correction = measured_time / (target_plan_->time * scale_);
      double deadline = std::min(target / (scale_ * correction), target_plan_->time * (1 - config_.tolerance / 2));
      target_plan_ = online::choose_plan(*plans_, deadline);
    }
    ++step_ups_;
    decide("stepped up", fmt::format("measured {:.6g} s is above the target {:.6g} s by more than {:.2g}%: from {} to {}",
                                     measured_time, target, 100 * config_.tolerance, describe(before_plan),
                                     describe(*target_plan_)));
    deployed_once_ = false;
    assign_plans("faster plan");
  }

  SchedulerContext context_;
  PerseusConfig config_;
  int stages_ = 0, microbatches_ = 0;
  ScheduleKind schedule_ = ScheduleKind::one_f_one_b;
  std::vector<std::vector<Instruction>> orders_;
  std::vector<int> clocks_;
  std::vector<online::ClockScan> scans_;  // per (stage, kind)
  std::vector<std::pair<std::optional<int>, std::optional<int>>> issued_;  // this round's (forward, backward) per stage
  fs::path profile_path_;
  bool reuse_profile_ = false;
  Phase phase_ = Phase::warmup;
  int round_ = 0;
  int profiling_rounds_ = 0;
  double baseline_time_ = 0, baseline_energy_ = 0;
  int baseline_rounds_ = 0;
  double idle_power_sum_ = 0;
  int idle_power_rounds_ = 0;
  std::optional<double> p_block_;
  online::BackgroundPlanner planner_;
  std::optional<online::PlanningOutput> plans_;
  double scale_ = 1;
  std::optional<online::ChosenPlan> target_plan_, slowed_plan_;
  std::vector<bool> slowed_;  // per data-parallel pipeline: runs slowed_plan_ (for a straggler)
  bool deployed_once_ = false;
  int step_ups_ = 0;
  int refine_passes_ = 0;
  int rounds_on_plan_ = 0;
  std::deque<std::pair<double, double>> measured_;  // (time, energy) of the rounds on the current plans
  std::vector<double> last_pipeline_time_, last_pipeline_energy_;
  online::StragglerDetector detector_;
  std::optional<StragglerNotice> api_straggler_;
  std::optional<ActiveStraggler> straggler_;
  std::vector<json> decisions_;
};

}  // namespace

SchedulerFactory configure_perseus(const nlohmann::json& args) {
  SchedulerArgs checked("Perseus", args,
                        {"warmup_rounds", "wait_for_plan", "slowdown", "deadline", "tolerance", "verify_rounds", "max_step_ups",
                         "profile_path", "minimum_power_state", "unit_time", "cost_model", "coarse_step", "stop_after",
                         "descent", "fill_gap", "interpolate", "refine_passes", "straggler_threshold", "straggler_rounds"});
  PerseusConfig c;
  c.warmup_rounds = checked.integer("warmup_rounds").value_or(c.warmup_rounds);
  if (c.warmup_rounds < 1) checked.fail("warmup_rounds", "must be at least 1 (the all-max baseline is measured then)");
  c.wait_for_plan = checked.boolean("wait_for_plan").value_or(false);
  c.interpolate = checked.boolean("interpolate").value_or(c.interpolate);
  c.refine_passes = checked.integer("refine_passes").value_or(c.refine_passes);
  if (c.refine_passes < 0) checked.fail("refine_passes", "must be at least 0");
  auto slowdown = checked.number("slowdown");
  c.deadline = checked.number("deadline");
  if (slowdown && c.deadline) checked.fail("deadline", "give slowdown or deadline, not both");
  c.slowdown = slowdown.value_or(1.0);
  if (!(c.slowdown >= 1 && c.slowdown <= 100)) checked.fail("slowdown", "must be between 1 and 100");
  if (c.deadline && !(*c.deadline > 0 && *c.deadline < 1e6)) checked.fail("deadline", "must be a positive number of seconds");
  c.tolerance = checked.number("tolerance").value_or(c.tolerance);
  if (!(c.tolerance >= 0 && c.tolerance < 1)) checked.fail("tolerance", "must be in [0, 1)");
  c.verify_rounds = checked.integer("verify_rounds").value_or(c.verify_rounds);
  if (c.verify_rounds < 1) checked.fail("verify_rounds", "must be at least 1");
  c.max_step_ups = checked.integer("max_step_ups").value_or(c.max_step_ups);
  if (c.max_step_ups < 0) checked.fail("max_step_ups", "must be at least 0");
  c.profile_path = checked.string("profile_path").value_or("");
  if (!c.profile_path.empty() && fs::exists(c.profile_path)) {
    try {  // a bad profile stops the server at start, not a job later
      (void)read_profile(c.profile_path);
    } catch (const std::exception& e) {
      checked.fail("profile_path", e.what());
    }
  }
  c.minimum_power_state = checked.integer("minimum_power_state").value_or(0);
  c.unit_time = checked.number("unit_time");
  if (c.unit_time && !(*c.unit_time >= 1e-6 && *c.unit_time <= 1)) checked.fail("unit_time", "must be between 1e-6 and 1 s");
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
  if (!(c.detector.threshold > 0 && c.detector.threshold < 10)) checked.fail("straggler_threshold", "must be in (0, 10)");
  c.detector.rounds = checked.integer("straggler_rounds").value_or(c.detector.rounds);
  if (c.detector.rounds < 1) checked.fail("straggler_rounds", "must be at least 1");
  return [c](const SchedulerContext& context) { return std::make_unique<PerseusScheduler>(context, c); };
}

}  // namespace perseus::server
