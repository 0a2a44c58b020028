// The JSON of GET /jobs, GET /jobs/{id} and GET /power_budget, from the typed statuses
// (job_status.hpp): the one place their keys are written.
#include "perseus/server/job_status.hpp"

namespace perseus::server {
namespace {

using nlohmann::json;

template <typename T>
json optional_json(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json interval(double low, double high) { return json::array({low, high}); }
json interval(const Interval& i) { return interval(i.low, i.high); }

json to_json(const BaselineStatus& b) {
  return {{"iteration_time", b.iteration_time},
          {"energy", b.energy},
          {"iteration_time_ci", interval(b.iteration_time_ci)},
          {"energy_ci", interval(b.energy_ci)},
          {"rounds", b.rounds},
          {"rejected", b.rejected},
          {"probes", b.probes}};
}

json to_json(const PlanStatus& p) {
  return {{"index", optional_json(p.index)},
          {"label", p.label},
          {"predicted_time", p.predicted_time},
          {"predicted_energy", p.predicted_energy},
          {"frontier_points", p.frontier_points},
          {"planning_seconds", p.planning_seconds},
          {"unit_time", p.unit_time},
          {"cost_models", p.cost_models},
          {"step_ups", p.step_ups},
          {"reason", p.reason}};
}

const char* to_string(StragglerSource source) {
  switch (source) {
    case StragglerSource::api:
      return "api";
    case StragglerSource::baseline:
      return "baseline";
    case StragglerSource::detected:
      return "detected";
  }
  return "detected";
}

json to_json(const StragglerStatus& s) {
  return {{"slowdown", s.slowdown},
          {"source", to_string(s.source)},
          {"dp_rank", optional_json(s.dp_rank)},
          {"iteration_time", optional_json(s.iteration_time)}};
}

json to_json(const std::vector<PipelineStatus>& pipelines) {
  json out = json::array();
  for (const auto& p : pipelines) {
    json j = {{"dp_rank", p.dp_rank}, {"iteration_time", p.iteration_time}, {"energy", p.energy}};
    if (p.plan) j["plan"] = *p.plan;
    if (p.predicted_time) j["predicted_time"] = *p.predicted_time;
    out.push_back(std::move(j));
  }
  return out;
}

json value_of(const std::optional<online::Estimate>& e) { return e ? json(e->value) : json(nullptr); }
json interval_of(const std::optional<online::Estimate>& e) { return e ? interval(e->low, e->high) : json(nullptr); }

}  // namespace

json to_json(const SchedulerStatus& s) {
  json out = json::object();
  out["profiling"] = s.profiling;
  out["plan"] = s.plan ? to_json(*s.plan) : json(nullptr);
  out["baseline"] = s.baseline ? to_json(*s.baseline) : json(nullptr);
  out["saving"] = value_of(s.saving);
  out["slowdown"] = value_of(s.slowdown);
  out["straggler"] = s.straggler ? to_json(*s.straggler) : json(nullptr);
  if (!s.online) return out;
  const auto& o = *s.online;
  for (const auto& [key, value] : o.details.items()) out[key] = value;
  out["saving_ci"] = interval_of(s.saving);
  out["slowdown_ci"] = interval_of(s.slowdown);
  out["measured"] = o.measured ? json{{"iteration_time", o.measured->iteration_time},
                                      {"energy", o.measured->energy},
                                      {"rounds", o.measured->rounds}}
                               : json(nullptr);
  out["reference"] = o.reference ? json{{"name", o.reference->name},
                                        {"iteration_time", o.reference->iteration_time},
                                        {"energy", o.reference->energy},
                                        {"conditions", o.reference->conditions}}
                                 : json(nullptr);
  out["energy_saved"] = o.energy_saved;
  out["pipelines"] = to_json(o.pipelines);
  return out;
}

json to_json(const JobBudgetStatus& b) {
  return {{"weight", b.weight},
          {"gpus", b.gpus},
          {"share", b.share},
          {"measured", optional_json(b.measured)},
          {"counted_as", b.counted_as},
          {"pace", optional_json(b.pace)},
          {"unpaced_time", optional_json(b.unpaced_time)},
          {"throughput", optional_json(b.throughput)},
          {"correction", b.correction},
          {"power_limit", optional_json(b.power_limit)},
          {"probes_held", b.probes_held},
          {"rounds_since_change", b.rounds_since_change}};
}

json summary_json(const JobStatus& s) {
  return {{"job_id", s.job_id},
          {"scheduler", s.scheduler},
          {"dialect", s.dialect == Dialect::zeus ? "zeus" : "perseus"},
          {"phase", std::string(to_string(s.phase))},
          {"round", s.round},
          {"world_size", s.world_size},
          {"registered", s.registered},
          {"saving", s.own ? value_of(s.own->saving) : json(nullptr)},
          {"slowdown", s.own ? value_of(s.own->slowdown) : json(nullptr)}};
}

json to_json(const JobStatus& s) {
  json out = summary_json(s);
  out["job"] = s.job;
  out["waiting_at_barrier"] = s.waiting_at_barrier;
  out["reported"] = s.reported;
  out["typical_round_s"] = s.typical_round_s;
  out["end_detail"] = optional_json(s.end_detail);
  out["measured"] = s.measured ? json{{"round", s.measured->round},
                                      {"iteration_time", s.measured->iteration_time},
                                      {"energy", s.measured->energy}}
                               : json(nullptr);
  out["pipelines"] = to_json(s.pipelines);
  out["power_budget"] = s.power_budget ? to_json(*s.power_budget) : json(nullptr);
  if (s.own) {
    const json own = to_json(*s.own);
    for (const auto& [key, value] : own.items())
      if (key != "phase") out[key] = value;  // the summary's phase says done/failed once ended
  }
  return out;
}

std::optional<JobStatus::Measured> JobStatus::shown_measured() const {
  if (own && own->online) {
    const auto& m = own->online->measured;
    if (!m) return std::nullopt;
    return Measured{m->iteration_time, m->energy};
  }
  if (!measured) return std::nullopt;
  return Measured{measured->iteration_time, measured->energy};
}

json to_json(const PowerBudgetStatus& s) {
  json jobs = json::array();
  for (const auto& j : s.jobs) {
    json one = to_json(j.budget);
    one["job_id"] = j.job_id;
    one["phase"] = to_string(j.phase);
    jobs.push_back(std::move(one));
  }
  return {{"budget", optional_json(s.budget)},
          {"source", s.source},
          {"seconds", s.seconds},
          {"set_seconds_ago", s.set_seconds_ago},
          {"deadline_passed", s.deadline_passed},
          {"predicted", s.predicted},
          {"measured", optional_json(s.measured)},
          {"all_max", optional_json(s.all_max)},
          {"within_reach", s.within_reach},
          {"fairness_relaxed", s.fairness_relaxed},
          {"backstop",
           {{"active", s.backstop.active},
            {"power_limit", optional_json(s.backstop.power_limit)},
            {"reason", optional_json(s.backstop.reason)},
            {"seconds", optional_json(s.backstop.seconds)}}},
          {"since_set", s.since_set},
          {"jobs", std::move(jobs)},
          {"history", s.history}};
}

}  // namespace perseus::server
