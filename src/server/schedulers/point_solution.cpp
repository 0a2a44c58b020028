// Runs given plans: `warmup_iters` rounds at the top clock, then each plan for one round.
// solution_path is a plan file (.json or the artifact's .py), a frontier directory (plans.json;
// pick a point with index, time or slowdown, else the fastest), or a folder of plan files run in
// sorted order (reverse: the other way round). A single plan then keeps running (deployment); a
// folder ends with [profiling-done] after its last plan, as the artifact does. stop_when_done
// overrides both. A rank of Zeus's client gets the plan with each clock's instruction named.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "perseus/pipeline/schedule.hpp"
#include "perseus/plan/frontier_record.hpp"
#include "perseus/plan/plan_files.hpp"
#include "perseus/util/error.hpp"
#include "scheduler_args.hpp"
#include "schedulers.hpp"

namespace perseus::server {
namespace {

namespace fs = std::filesystem;

struct LoadedPlan {
  std::string label;
  std::vector<std::vector<int>> frequencies;  // per stage
  // The schedule the plan was made for, when its file says (JSON plans and frontiers).
  std::optional<ScheduleKind> schedule;
  std::vector<int> extra_forwards;
  std::optional<int> num_microbatches;
  std::vector<std::vector<std::string>> instructions = {};  // per stage, when the file names them (Zeus's format)
  int virtual_stages = 1;                                   // model chunks per stage (interleaved)
};

struct PointConfig {
  std::vector<LoadedPlan> plans;
  int warmup_rounds = 2;
  bool stop_when_done = false;
};

LoadedPlan from_file(const fs::path& path) {
  PlanFile file = read_plan_file(path);
  return {path.filename().string(), file.frequencies,  file.schedule,      file.extra_forwards,
          file.num_microbatches,    file.instructions, file.virtual_stages};
}

// The forward/backward order of one stage of a plan: named by the file, from the schedule it was
// made for, or else 1F1B with half the clocks as microbatches (the artifact's and lowtime's plans).
std::vector<std::string> plan_order(const LoadedPlan& plan, int stage, int stages, const std::string& who) {
  const auto& clocks = plan.frequencies[static_cast<std::size_t>(stage)];
  if (!plan.instructions.empty()) return plan.instructions[static_cast<std::size_t>(stage)];
  ScheduleKind kind = plan.schedule.value_or(ScheduleKind::one_f_one_b);
  int extra = plan.extra_forwards.empty() ? 0 : plan.extra_forwards[static_cast<std::size_t>(stage)];
  int microbatches = plan.num_microbatches.value_or(static_cast<int>(clocks.size() / 2));
  if (!plan.num_microbatches && clocks.size() % 2 != 0)
    throw std::runtime_error(
        fmt::format("{}: {} clocks is not a forward and a backward per microbatch", who, clocks.size()));
  std::vector<std::string> names;
  for (const auto& inst : stage_schedule(kind, stage, stages, microbatches, extra, plan.virtual_stages))
    names.emplace_back(to_string(inst.kind));
  if (names.size() != clocks.size())
    throw std::runtime_error(
        fmt::format("{}: {} clocks for {} forwards and backwards", who, clocks.size(), names.size()));
  return names;
}

class PointSolution final : public Scheduler {
 public:
  PointSolution(const SchedulerContext& context, const PointConfig& config) : context_(context), config_(config) {
    require_pure_pipeline(context, "PointSolution");
    for (const auto& plan : config_.plans) schedules_.push_back(check_and_expand(plan));
    // Zeus's client asks for one schedule and keeps it: it gets the plan at once, as from Zeus's server.
    for (const auto& r : context_.ranks)
      if (r.pipe_schedule.empty()) config_.warmup_rounds = 0;
  }

  std::vector<PowerStateSchedule> next_schedule() override {
    if (round_ < config_.warmup_rounds) return top_clock_schedules(context_.ranks);
    std::size_t index = static_cast<std::size_t>(round_ - config_.warmup_rounds);
    if (index >= schedules_.size()) {
      if (config_.stop_when_done) throw SchedulerDone(fmt::format("PointSolution ran all {} plans", schedules_.size()));
      index = schedules_.size() - 1;
    }
    return schedules_[index];
  }

  void observe(const std::vector<ProfilingResult>&) override { ++round_; }
  bool observes_results() const override { return false; }

 private:
  std::vector<PowerStateSchedule> check_and_expand(const LoadedPlan& plan) const {
    const int stages = context_.job.pp_degree;
    if (static_cast<int>(plan.frequencies.size()) != stages)
      throw std::runtime_error(fmt::format("PointSolution: plan {} has {} stages but the job has {}", plan.label,
                                           plan.frequencies.size(), stages));
    if (plan.num_microbatches && *plan.num_microbatches != context_.job.num_microbatches)
      throw std::runtime_error(fmt::format("PointSolution: plan {} was made for {} microbatches but the job runs {}",
                                           plan.label, *plan.num_microbatches, context_.job.num_microbatches));
    std::vector<PowerStateSchedule> out;
    for (const auto& r : context_.ranks) {
      const auto& clocks = plan.frequencies[static_cast<std::size_t>(r.pp_rank)];
      std::string who = fmt::format("PointSolution: plan {}, stage {}", plan.label, r.pp_rank);
      for (std::size_t slot = 0; slot < clocks.size(); ++slot)
        if (std::find(r.power_state_range.begin(), r.power_state_range.end(), clocks[slot]) ==
            r.power_state_range.end())
          throw std::runtime_error(fmt::format("{}: slot {} asks for {} MHz, which rank {}'s GPU does not support", who,
                                               slot, clocks[slot], r.rank));
      if (r.pipe_schedule.empty()) {  // Zeus's client: the plan names the order
        out.push_back({r.rank, clocks, plan_order(plan, r.pp_rank, context_.job.pp_degree, who)});
        continue;
      }
      if (plan.schedule || !plan.instructions.empty()) check_order(plan, r, who);
      out.push_back({r.rank, expand_compute_clocks(r.pipe_schedule, clocks, who)});
    }
    return out;
  }

  // The rank's forwards and backwards must come in the order the plan was made for.
  void check_order(const LoadedPlan& plan, const RankInfo& rank, const std::string& who) const {
    LoadedPlan sized = plan;
    if (!sized.num_microbatches) sized.num_microbatches = context_.job.num_microbatches;
    auto expected = plan_order(sized, rank.pp_rank, context_.job.pp_degree, who);
    std::size_t k = 0;
    for (std::size_t i = 0; i < rank.pipe_schedule.size(); ++i) {
      const auto& name = rank.pipe_schedule[i];
      if (!is_compute_instruction(name)) continue;
      if (k >= expected.size()) break;  // the count check reports this
      if (name != expected[k])
        throw std::runtime_error(
            fmt::format("{}: pipe_schedule[{}] is {} but the plan{} has a {} there", who, i, name,
                        plan.schedule ? fmt::format(" ({} schedule)", to_string(*plan.schedule)) : "", expected[k]));
      ++k;
    }
  }

  SchedulerContext context_;
  PointConfig config_;
  std::vector<std::vector<PowerStateSchedule>> schedules_;
  int round_ = 0;
};

}  // namespace

SchedulerFactory configure_point_solution(const nlohmann::json& args) {
  SchedulerArgs checked("PointSolution", args,
                        {"solution_path", "warmup_iters", "index", "time", "slowdown", "stop_when_done", "reverse"});
  auto path_arg = checked.string("solution_path");
  if (!path_arg) checked.fail("solution_path", "is required: a plan file, a frontier directory or a folder of plans");
  fs::path path(*path_arg);
  PointConfig config;
  config.warmup_rounds = checked.integer("warmup_iters").value_or(2);
  if (config.warmup_rounds < 0) checked.fail("warmup_iters", "must be at least 0");
  auto index = checked.integer("index");
  auto time = checked.number("time");
  auto slowdown = checked.number("slowdown");
  bool frontier = fs::is_directory(path) && fs::exists(path / "plans.json");
  if ((index || time || slowdown) && !frontier)
    checked.fail(index  ? "index"
                 : time ? "time"
                        : "slowdown",
                 "needs solution_path to be a frontier directory (with plans.json)");
  if (int(bool(index)) + int(bool(time)) + int(bool(slowdown)) > 1)
    checked.fail("index", "give at most one of index, time, slowdown");
  bool folder = false;
  try {  // plan files are read now, so that a bad one stops the server at start (a usage error, exit 64)
    if (frontier) {
      FrontierRecord record = read_frontier_record(path);
      if (record.points.empty()) checked.fail("solution_path", fmt::format("{} has no frontier points", path.string()));
      std::size_t chosen = fastest_point(record);  // by emulated time, where the record has it
      if (index) {
        if (*index < 0 || static_cast<std::size_t>(*index) >= record.points.size())
          checked.fail("index", fmt::format("is out of range: the frontier has {} points", record.points.size()));
        chosen = static_cast<std::size_t>(*index);
      } else if (time || slowdown) {
        const double fastest = record.points[chosen].shown_time();
        double deadline = time ? *time : fastest * *slowdown;
        auto found = cheapest_within(record, deadline);
        if (!found)
          checked.fail(time ? "time" : "slowdown",
                       fmt::format("no plan finishes within {} s: the fastest takes {} s", deadline, fastest));
        chosen = *found;
      }
      Plan plan = plan_at(record, chosen);
      config.plans.push_back({fmt::format("{} point {}", path.string(), chosen),
                              plan.frequencies,
                              plan.schedule,
                              plan.extra_forwards,
                              plan.num_microbatches,
                              {},
                              plan.virtual_stages});
    } else if (fs::is_directory(path)) {
      folder = true;
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(path)) {
        auto ext = entry.path().extension();
        if (entry.is_regular_file() && (ext == ".py" || ext == ".json")) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
      if (checked.boolean("reverse").value_or(false)) std::reverse(files.begin(), files.end());  // the artifact's
      if (files.empty())
        checked.fail("solution_path", fmt::format("{} holds no .py or .json plan files", path.string()));
      for (const auto& f : files) config.plans.push_back(from_file(f));
    } else if (fs::exists(path)) {
      config.plans.push_back(from_file(path));
    } else {
      std::string hint = path.string().find('%') != std::string::npos
                             ? " ('%05d' in Zeus's docs stands for a plan's number, e.g. freqs_pipeline_00042.py)"
                             : "";
      checked.fail("solution_path", fmt::format("{} does not exist{}", path.string(), hint));
    }
  } catch (const InputError& e) {
    checked.fail("solution_path", e.what());
  }
  config.stop_when_done = checked.boolean("stop_when_done").value_or(folder);
  return [config](const SchedulerContext& context) { return std::make_unique<PointSolution>(context, config); };
}

}  // namespace perseus::server
