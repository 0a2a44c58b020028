// The pieces every scheduler shares: expanding per-stage forward/backward clocks to a rank's
// whole pipe schedule, and the 3D-parallel wrapper.
#include "perseus/server/scheduler.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <map>

#include "schedulers/schedulers.hpp"

namespace perseus::server {

nlohmann::json Scheduler::round_record(const std::vector<ProfilingResult>& results) const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : results) out.push_back(to_json(r));
  return out;
}

void Scheduler::replay(const nlohmann::json& record) {
  std::vector<ProfilingResult> results;
  for (const auto& r : record) results.push_back(profiling_result_from_text(r.dump()));
  observe(results);
}

void Scheduler::set_straggler(const std::optional<StragglerNotice>&) {
  throw RequestError(Refusal::conflict, "this job's scheduler does not follow stragglers (the Perseus scheduler does)");
}

std::vector<int> expand_compute_clocks(const std::vector<std::string>& pipe_schedule,
                                       const std::vector<int>& compute_clocks, const std::string& who) {
  auto computes = std::count_if(pipe_schedule.begin(), pipe_schedule.end(), is_compute_instruction);
  if (static_cast<std::size_t>(computes) != compute_clocks.size())
    throw std::runtime_error(
        fmt::format("{}: the plan has {} forward/backward clocks but the pipe schedule has {} "
                    "forwards and backwards",
                    who, compute_clocks.size(), computes));
  std::vector<int> out;
  out.reserve(pipe_schedule.size());
  if (compute_clocks.empty()) return std::vector<int>(pipe_schedule.size(), 0);
  std::size_t next = 0;
  int current = compute_clocks.front();
  for (const auto& name : pipe_schedule) {
    if (is_compute_instruction(name)) current = compute_clocks[next++];
    out.push_back(current);
  }
  return out;
}

void require_pure_pipeline(const SchedulerContext& context, const char* scheduler) {
  if (context.job.world_size != context.job.pp_degree)
    throw std::runtime_error(
        fmt::format("{} schedules pure pipeline parallelism, but this job has dp {} and tp {}; "
                    "use {}3D",
                    scheduler, context.job.dp_degree, context.job.tp_degree, scheduler));
}

std::vector<PowerStateSchedule> top_clock_schedules(const std::vector<RankInfo>& ranks) {
  std::vector<PowerStateSchedule> out;
  for (const auto& r : ranks)
    out.push_back({r.rank, std::vector<int>(r.pipe_schedule.size(), r.power_state_range.front())});
  return out;
}

RoundMeans measure_round(const std::vector<ProfilingResult>& results, double warmup_step_ratio, const char* scheduler) {
  RoundMeans m;
  for (const auto& r : results) {
    const std::size_t n = std::min(r.iter_time.size(), r.iter_energy.size());
    const std::size_t skip = std::max<std::size_t>(static_cast<std::size_t>(double(n) * warmup_step_ratio), 1);
    if (n <= skip)
      throw std::runtime_error(
          fmt::format("rank {} reported {} iterations: {} drops the first {} of each round "
                      "(report more per round)",
                      r.rank, n, scheduler, skip));
    double time = 0, energy = 0, power = 0;
    for (std::size_t i = skip; i < n; ++i) {
      time += r.iter_time[i];
      energy += r.iter_energy[i];
      power += r.iter_time[i] > 0 ? r.iter_energy[i] / r.iter_time[i] : 0;
    }
    const double k = double(n - skip);
    m.time = std::max(m.time, time / k);
    m.energy += energy / k;
    m.power += power / k;
  }
  return m;
}

namespace {

class FixedSchedules final : public Scheduler {
 public:
  explicit FixedSchedules(std::vector<PowerStateSchedule> schedules) : schedules_(std::move(schedules)) {}
  std::vector<PowerStateSchedule> next_schedule() override { return schedules_; }
  void observe(const std::vector<ProfilingResult>&) override {}
  bool observes_results() const override { return false; }

 private:
  std::vector<PowerStateSchedule> schedules_;
};

}  // namespace

std::unique_ptr<Scheduler> fixed_schedules(std::vector<PowerStateSchedule> schedules) {
  return std::make_unique<FixedSchedules>(std::move(schedules));
}

namespace {

template <typename Fold>
std::vector<double> fold_lists(const std::vector<const std::vector<double>*>& lists, Fold fold) {
  std::size_t n = lists.empty() ? 0 : lists.front()->size();
  for (const auto* l : lists) n = std::min(n, l->size());
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = (*lists.front())[i];
    for (std::size_t k = 1; k < lists.size(); ++k) out[i] = fold(out[i], (*lists[k])[i]);
  }
  return out;
}

template <typename Fold>
Breakdown fold_breakdowns(const std::vector<const Breakdown*>& all, Fold fold) {
  Breakdown out;
  for (const auto& [key, first] : *all.front()) {
    std::vector<const std::vector<std::vector<double>>*> per_rank;
    for (const auto* b : all) {
      auto it = b->find(key);
      if (it == b->end()) throw std::runtime_error(fmt::format("a rank reported no '{}' breakdown", key));
      per_rank.push_back(&it->second);
    }
    std::size_t iterations = first.size();
    for (const auto* r : per_rank) iterations = std::min(iterations, r->size());
    auto& rows = out[key];
    for (std::size_t i = 0; i < iterations; ++i) {
      std::vector<const std::vector<double>*> lists;
      for (const auto* r : per_rank) lists.push_back(&(*r)[i]);
      rows.push_back(fold_lists(lists, fold));
    }
  }
  return out;
}

class ThreeDParallel final : public Scheduler {
 public:
  ThreeDParallel(const SchedulerContext& context, const SchedulerFactory& inner) : ranks_(context.ranks) {
    for (const auto& r : context.ranks) stage_of_.push_back(r.pp_rank);
    SchedulerContext staged = context;
    staged.job.dp_degree = 1;
    staged.job.tp_degree = 1;
    staged.job.world_size = context.job.pp_degree;
    staged.ranks.clear();
    for (const auto& r : context.ranks) {
      if (r.dp_rank == 0 && r.tp_rank == 0) {
        RankInfo stage = r;
        stage.rank = r.pp_rank;
        staged.ranks.push_back(stage);
      }
    }
    std::sort(staged.ranks.begin(), staged.ranks.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
    inner_ = inner(staged);
  }

  std::vector<PowerStateSchedule> next_schedule() override {
    auto staged = inner_->next_schedule();
    std::map<int, const PowerStateSchedule*> by_stage;
    for (const auto& s : staged) by_stage[s.rank] = &s;
    std::vector<PowerStateSchedule> out;
    for (const auto& r : ranks_) {
      auto it = by_stage.find(r.pp_rank);
      if (it == by_stage.end()) throw std::runtime_error(fmt::format("no schedule for stage {}", r.pp_rank));
      out.push_back({r.rank, it->second->power_states, it->second->instructions});
    }
    return out;
  }

  bool observes_results() const override { return inner_->observes_results(); }

  void observe(const std::vector<ProfilingResult>& results) override {
    inner_->observe(fold_stages(results, stage_of_));
  }
  // The inner scheduler sees one folded result per stage: its own record of those is exact.
  nlohmann::json round_record(const std::vector<ProfilingResult>& results) const override {
    return inner_->round_record(fold_stages(results, stage_of_));
  }
  void replay(const nlohmann::json& record) override { inner_->replay(record); }

 private:
  std::vector<RankInfo> ranks_;
  std::vector<int> stage_of_;  // by rank
  std::unique_ptr<Scheduler> inner_;
};

}  // namespace

std::vector<ProfilingResult> fold_stages(const std::vector<ProfilingResult>& results,
                                         const std::vector<int>& stage_of) {
  std::map<int, std::vector<const ProfilingResult*>> by_stage;
  for (const auto& result : results) {
    if (result.rank < 0 || static_cast<std::size_t>(result.rank) >= stage_of.size())
      throw std::runtime_error(fmt::format("a result names rank {}, which the job does not have", result.rank));
    by_stage[stage_of[static_cast<std::size_t>(result.rank)]].push_back(&result);
  }
  std::vector<ProfilingResult> folded;
  for (auto& [stage, group] : by_stage) {
    ProfilingResult f;
    f.rank = stage;
    std::vector<const std::vector<double>*> times, energies;
    std::vector<const Breakdown*> time_b, energy_b;
    for (const auto* g : group) {
      times.push_back(&g->iter_time);
      energies.push_back(&g->iter_energy);
      time_b.push_back(&g->time_breakdown);
      energy_b.push_back(&g->energy_breakdown);
      f.clock_changes += g->clock_changes;
      f.clocks_late += g->clocks_late;
    }
    auto max = [](double a, double b) { return std::max(a, b); };
    auto sum = [](double a, double b) { return a + b; };
    f.iter_time = fold_lists(times, max);
    f.iter_energy = fold_lists(energies, sum);
    f.time_breakdown = fold_breakdowns(time_b, max);
    f.energy_breakdown = fold_breakdowns(energy_b, sum);
    folded.push_back(std::move(f));
  }
  return folded;
}

SchedulerFactory make_3d_parallel(SchedulerFactory inner) {
  return [inner](const SchedulerContext& context) -> std::unique_ptr<Scheduler> {
    return std::make_unique<ThreeDParallel>(context, inner);
  };
}

}  // namespace perseus::server
