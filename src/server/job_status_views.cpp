// What the job manager shows of its jobs: GET /jobs, GET /jobs/{id}, their frontier and
// timeline, the power budget's status and GET /metrics.
#include "perseus/server/job_manager.hpp"

#include <fmt/format.h>

#include "job_manager_job.hpp"
#include "perseus/server/metrics.hpp"

namespace perseus::server {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

JobStatus JobManager::status_of(const Job& job, bool full) const {
  JobStatus out;
  out.job_id = job.info.job_id;
  out.scheduler = settings_.scheduler;
  out.dialect = job.info.dialect;
  out.phase = job.phase == Phase::registering ? JobPhase::registering
              : job.phase != Phase::ended     ? JobPhase::running
              : job.outcome.is_done()         ? JobPhase::done
                                              : JobPhase::failed;
  // A scheduler's own phases (warmup, profiling, ...) while the job runs.
  if (job.phase != Phase::ended && job.scheduler)
    if (auto own_phase = job.scheduler->phase()) out.phase = *own_phase;
  out.round = job.round;
  out.world_size = job.info.world_size;
  out.registered = job.registered;
  if (job.phase == Phase::ended) out.own = job.scheduler_status;
  else if (job.scheduler) out.own = job.scheduler->status();
  if (!full) return out;
  out.job = public_json(job.info);
  out.waiting_at_barrier = job.phase == Phase::asking ? job.asked : 0;
  out.reported = job.phase == Phase::running ? job.reported : 0;
  out.typical_round_s = job.typical_round_s;
  if (job.phase == Phase::ended) out.end_detail = to_detail(job.outcome);
  out.measured = job.measured;
  out.pipelines = job.pipelines;
  out.power_budget = budget_->job_status(job.info.job_id);
  return out;
}

json JobManager::jobs_summary() const {
  json out = json::array();
  for (const auto& [id, job] : jobs_) out.push_back(summary_json(status_of(*job, false)));
  return out;
}

json JobManager::job_status(const std::string& job_id) const { return to_json(status_of(find(job_id), true)); }

std::string JobManager::metrics_text() const {
  std::vector<JobStatus> statuses;
  for (const auto& [id, job] : jobs_) statuses.push_back(status_of(*job, true));
  StoreCounters store;
  if (writer_) store = {writer_->written(), writer_->failures(), writer_->dropped()};
  if (committer_) {
    store.writes += committer_->committed();
    store.failures += committer_->failures();
    store.dropped += committer_->dropped();
  }
  return render_metrics(statuses, http_metrics_->snapshot(), store, PERSEUS_VERSION,
                        budget_->status(SteadyClock::now()));
}

void JobManager::set_power_budget(const BudgetRequest& request) { budget_->set(request, SteadyClock::now()); }

json JobManager::power_budget_status() const { return to_json(budget_->status(SteadyClock::now())); }

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
