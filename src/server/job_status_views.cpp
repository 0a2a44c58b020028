// What the job manager shows of its jobs: GET /jobs, GET /jobs/{id}, their frontier and
// timeline, the power budget's status and GET /metrics.
#include "perseus/server/job_manager.hpp"

#include <fmt/format.h>

#include "job_manager_job.hpp"
#include "perseus/server/metrics.hpp"

namespace perseus::server {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

json JobManager::scheduler_status(const Job& job) const {
  if (job.phase == Phase::ended) return job.scheduler_status;
  return job.scheduler ? job.scheduler->status() : json(nullptr);
}

json JobManager::summary(const Job& job, const json& own) const {
  JobPhase phase = job.phase == Phase::registering ? JobPhase::registering
                   : job.phase != Phase::ended     ? JobPhase::running
                   : job.outcome.is_done()         ? JobPhase::done
                                                   : JobPhase::failed;
  // A scheduler's own phases (warmup, profiling, ...) while the job runs.
  if (job.phase != Phase::ended && job.scheduler)
    if (auto own_phase = job.scheduler->phase()) phase = *own_phase;
  // What a list of jobs shows of each: the scheduler's saving and slowdown (null where it has none).
  auto own_field = [&own](const char* key) { return own.is_object() && own.contains(key) ? own[key] : json(nullptr); };
  return {{"job_id", job.info.job_id},
          {"scheduler", settings_.scheduler},
          {"dialect", job.info.dialect == Dialect::zeus ? "zeus" : "perseus"},
          {"phase", std::string(to_string(phase))},
          {"round", job.round},
          {"world_size", job.info.world_size},
          {"registered", job.registered},
          {"saving", own_field("saving")},
          {"slowdown", own_field("slowdown")}};
}

json JobManager::jobs_summary() const {
  json out = json::array();
  for (const auto& [id, job] : jobs_) out.push_back(summary(*job, scheduler_status(*job)));
  return out;
}

json JobManager::job_status(const std::string& job_id) const {
  const Job& job = find(job_id);
  const json own = scheduler_status(job);
  json out = summary(job, own);
  out["job"] = public_json(job.info);
  out["waiting_at_barrier"] = job.phase == Phase::asking ? job.asked : 0;
  out["reported"] = job.phase == Phase::running ? job.reported : 0;
  out["typical_round_s"] = job.typical_round_s;
  out["end_detail"] = job.phase == Phase::ended ? json(to_detail(job.outcome)) : json(nullptr);
  out["measured"] = job.measured;
  out["pipelines"] = job.pipelines;
  out["power_budget"] = budget_->job_status(job_id);
  if (own.is_object())
    for (const auto& [key, value] : own.items())
      if (key != "phase") out[key] = value;  // the summary's phase says done/failed once ended
  return out;
}

std::string JobManager::metrics_text() const {
  json statuses = json::array();
  for (const auto& [id, job] : jobs_) statuses.push_back(job_status(id));
  StoreCounters store;
  if (writer_) store = {writer_->written(), writer_->failures(), writer_->dropped()};
  if (committer_) {
    store.writes += committer_->committed();
    store.failures += committer_->failures();
    store.dropped += committer_->dropped();
  }
  return render_metrics(statuses, http_metrics_->snapshot(), store, PERSEUS_VERSION, power_budget_status());
}

void JobManager::set_power_budget(const BudgetRequest& request) { budget_->set(request, SteadyClock::now()); }

json JobManager::power_budget_status() const { return budget_->status(SteadyClock::now()); }

json JobManager::heartbeat_reply(const std::string& job_id) const {
  auto limit = budget_->power_limit(job_id);
  return limit ? json{{"power_limit", *limit}} : json(nullptr);
}

json JobManager::job_frontier(const std::string& job_id) const {
  const Job& job = find(job_id);
  json out = job.phase == Phase::ended ? job.frontier_at_end
             : job.scheduler           ? job.scheduler->frontier()
                                       : json(nullptr);
  if (out.is_null())
    throw RequestError(Refusal::not_found, fmt::format("job '{}' has no frontier (yet): only the Perseus scheduler "
                                                       "plans one, once it has profiled the job",
                                                       job_id));
  return out;
}

std::string JobManager::job_timeline_svg(const std::string& job_id) const {
  const Job& job = find(job_id);
  auto draw = job.phase == Phase::ended ? job.timeline_at_end
              : job.scheduler           ? job.scheduler->timeline()
                                        : std::function<std::string()>();
  if (!draw) throw RequestError(Refusal::not_found, fmt::format("job '{}' has no deployed plan to draw (yet)", job_id));
  return draw();
}

}  // namespace perseus::server
