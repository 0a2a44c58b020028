// GET /metrics: the Prometheus text exposition format, built from the jobs' typed statuses, the
// power budget's and the HTTP front's counters (metrics.hpp).
#include "perseus/server/metrics.hpp"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <vector>

#include "perseus/server/job_phase.hpp"
#include "perseus/server/route_table.hpp"
#include "perseus/util/prometheus_text.hpp"

namespace perseus::server {
namespace {

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

using Labels = std::vector<std::pair<std::string, std::string>>;

std::string label_text(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (std::size_t i = 0; i < labels.size(); ++i)
    out += fmt::format("{}{}=\"{}\"", i ? "," : "", labels[i].first, prometheus_label_value(labels[i].second));
  return out + "}";
}

// Families in the order first added, each with its HELP and TYPE once and then its samples.
class Exposition {
 public:
  void add(const std::string& name, const char* type, const char* help, const Labels& labels, double value,
           const std::string& suffix = "") {
    auto it = index_.find(name);
    if (it == index_.end()) {
      it = index_.emplace(name, families_.size()).first;
      families_.push_back({name, type, help, {}});
    }
    families_[it->second].samples.push_back(fmt::format("{}{}{} {}", name, suffix, label_text(labels), number(value)));
  }
  std::string text() const {
    std::string out;
    for (const auto& f : families_) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
      for (const auto& s : f.samples) out += s + "\n";
    }
    return out;
  }

 private:
  struct Family {
    std::string name;
    const char* type;
    const char* help;
    std::vector<std::string> samples;
  };
  std::vector<Family> families_;
  std::map<std::string, std::size_t> index_;
};

void add_job(Exposition& out, const JobStatus& status) {
  const Labels job{{"job_id", status.job_id}};
  for (const JobPhase p : kAllJobPhases)
    out.add("perseus_job_phase", "gauge",
            "1 for the phase the job is in (registering, running, warmup, profiling, "
            "planning, deployed, done, failed), 0 for the others",
            {{"job_id", status.job_id}, {"phase", std::string(to_string(p))}}, status.phase == p ? 1 : 0);
  auto gauge = [&](const std::string& name, const char* help, std::optional<double> v) {
    if (v) out.add(name, "gauge", help, job, *v);
  };
  gauge("perseus_job_round", "Rounds the job has run", status.round);
  gauge("perseus_job_ranks_registered", "Ranks registered", status.registered);
  gauge("perseus_job_ranks_expected", "Ranks the job was registered with (its world size)", status.world_size);
  const SchedulerStatus none;
  const SchedulerStatus& own = status.own ? *status.own : none;
  const auto& baseline = own.baseline;
  gauge("perseus_job_baseline_iteration_seconds", "All-max baseline: time per iteration",
        baseline ? std::optional(baseline->iteration_time) : std::nullopt);
  gauge("perseus_job_baseline_energy_joules", "All-max baseline: energy per iteration, every GPU",
        baseline ? std::optional(baseline->energy) : std::nullopt);
  const auto measured = status.shown_measured();
  gauge("perseus_job_measured_iteration_seconds", "Time per iteration on the current plans (the last rounds)",
        measured ? std::optional(measured->iteration_time) : std::nullopt);
  gauge("perseus_job_measured_energy_joules", "Energy per iteration on the current plans (the last rounds), every GPU",
        measured ? std::optional(measured->energy) : std::nullopt);
  gauge("perseus_job_saving_ratio", "Energy saved against the reference (1 - energy / reference energy)",
        own.saving ? std::optional(own.saving->value) : std::nullopt);
  gauge("perseus_job_slowdown_ratio", "Time against the reference (time / reference time - 1)",
        own.slowdown ? std::optional(own.slowdown->value) : std::nullopt);
  // The intervals are shown by a scheduler that plans online.
  for (const auto& [ratio, name] : {std::pair{&own.saving, "perseus_job_saving_ratio_bound"},
                                    std::pair{&own.slowdown, "perseus_job_slowdown_ratio_bound"}}) {
    if (!own.online || !*ratio) continue;
    for (int i = 0; i < 2; ++i)
      out.add(name, "gauge", "The 95% interval of the ratio of the same name",
              {{"job_id", status.job_id}, {"bound", i ? "high" : "low"}}, i ? (*ratio)->high : (*ratio)->low);
  }
  if (own.online)
    out.add("perseus_job_energy_saved_joules_total", "counter",
            "Energy saved so far: per deployed round, (reference - measured energy per iteration) x its iterations",
            job, own.online->energy_saved);
  if (status.own)
    out.add("perseus_job_straggler_slowdown_ratio", "gauge", "The straggler's time over the baseline's (1: none)", job,
            own.straggler ? own.straggler->slowdown : 1.0);
  if (own.plan)
    out.add("perseus_job_step_ups_total", "counter", "Steps to a faster plan since the job began", job,
            own.plan->step_ups);
  const auto& budget = status.power_budget;
  gauge("perseus_job_power_share_watts", "The job's share of the cluster's power budget: what it is predicted to draw",
        budget ? std::optional(budget->share) : std::nullopt);
  gauge("perseus_job_power_measured_watts", "The job's power in its last round (energy per iteration / time)",
        budget ? budget->measured : std::nullopt);
  gauge("perseus_job_power_pace_seconds", "The iteration time the power budget paces the job to (absent: unpaced)",
        budget ? budget->pace : std::nullopt);
  gauge("perseus_job_power_limit_watts", "The GPU power limit the budget's backstop sets on the job's GPUs",
        budget ? budget->power_limit : std::nullopt);
}

// The cluster's power budget: the budget, what the jobs are predicted to draw and what they measured.
void add_budget(Exposition& out, const PowerBudgetStatus& budget) {
  auto gauge = [&](const std::string& name, const char* help, std::optional<double> v) {
    if (v) out.add(name, "gauge", help, {}, *v);
  };
  gauge("perseus_power_budget_watts", "The cluster's power budget (absent: none)", budget.budget);
  gauge("perseus_power_predicted_watts", "What the jobs are predicted to draw at their allocation", budget.predicted);
  gauge("perseus_power_measured_watts", "What the jobs drew, each in its last round", budget.measured);
  out.add("perseus_power_backstop_active", "gauge", "1 while GPU power limits hold the budget", {},
          budget.backstop.active ? 1 : 0);
  gauge("perseus_power_backstop_limit_watts", "The backstop's power limit per GPU", budget.backstop.power_limit);
}

}  // namespace

std::string_view route_of(std::string_view path) {
  const RouteSpec* spec = route_spec(path);
  if (!spec) return "other";
  return spec->route == Route::page ? "page" : spec->name;
}

void HttpMetrics::request_done(std::string_view route, int status, double seconds) {
  std::lock_guard lock(mutex_);
  ++counts_.requests[{std::string(route), status}];
  auto& latency = counts_.latency[std::string(route)];
  std::size_t bucket = 0;
  while (bucket < kLatencyBuckets.size() && seconds > kLatencyBuckets[bucket]) ++bucket;
  if (bucket < kLatencyBuckets.size()) ++latency.buckets[bucket];
  ++latency.count;
  latency.sum += seconds;
}

HttpMetrics::Snapshot HttpMetrics::snapshot() const {
  std::lock_guard lock(mutex_);
  Snapshot out = counts_;
  out.open_connections = open_connections_.load();
  return out;
}

std::string render_metrics(const std::vector<JobStatus>& jobs, const HttpMetrics::Snapshot& http,
                           const StoreCounters& store, const std::string& version,
                           const std::optional<PowerBudgetStatus>& budget) {
  Exposition out;
  out.add("perseus_build_info", "gauge", "The server's version", {{"version", version}}, 1);
  std::map<std::string, int> by_phase;
  for (const JobPhase p : kAllJobPhases) by_phase[std::string(to_string(p))] = 0;
  for (const auto& status : jobs) {
    ++by_phase[std::string(to_string(status.phase))];
    add_job(out, status);
  }
  for (const auto& [phase, n] : by_phase)
    out.add("perseus_jobs", "gauge", "Jobs held, by phase", {{"phase", phase}}, n);
  if (budget) add_budget(out, *budget);
  for (const auto& [key, n] : http.requests)
    out.add("perseus_http_requests_total", "counter", "HTTP requests answered, by route and status",
            {{"route", key.first}, {"code", std::to_string(key.second)}}, static_cast<double>(n));
  for (const auto& [route, h] : http.latency) {
    std::uint64_t cumulative = 0;
    for (std::size_t b = 0; b < kLatencyBuckets.size(); ++b) {
      cumulative += h.buckets[b];
      out.add("perseus_http_request_duration_seconds", "histogram",
              "Time from a request's arrival to its reply (a schedule request includes its wait at the barrier)",
              {{"route", route}, {"le", number(kLatencyBuckets[b])}}, static_cast<double>(cumulative), "_bucket");
    }
    out.add("perseus_http_request_duration_seconds", "histogram", "", {{"route", route}, {"le", "+Inf"}},
            static_cast<double>(h.count), "_bucket");
    out.add("perseus_http_request_duration_seconds", "histogram", "", {{"route", route}}, h.sum, "_sum");
    out.add("perseus_http_request_duration_seconds", "histogram", "", {{"route", route}}, static_cast<double>(h.count),
            "_count");
  }
  out.add("perseus_http_connections_open", "gauge", "HTTP connections open now", {},
          static_cast<double>(http.open_connections));
  out.add("perseus_store_writes_total", "counter", "Disk writes done (job store and record files)", {},
          static_cast<double>(store.writes));
  out.add("perseus_store_write_failures_total", "counter", "Disk write attempts that failed (each is retried)", {},
          static_cast<double>(store.failures));
  out.add("perseus_store_writes_dropped_total", "counter", "Disk writes dropped because the write queue was full", {},
          static_cast<double>(store.dropped));
  return out.text();
}

}  // namespace perseus::server
