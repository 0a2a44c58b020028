#include "perseus/server/power_budget.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include "perseus/online/power_allocation.hpp"
#include "perseus/server/wire.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus::server {

using nlohmann::json;

namespace {

constexpr std::size_t kHistory = 2000;    // samples kept for GET /power_budget
constexpr std::size_t kRecentRounds = 5;  // another scheduler's job counts at the most of these
constexpr double kComplied = 1.01;        // within 1% of the budget: complied

double seconds_between(PowerBudget::Clock::time_point a, PowerBudget::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

BudgetRequest budget_request_from_json(const json& body) {
  auto bad = [](const std::string& field, const std::string& why) {
    throw RequestError(Refusal::invalid_request, fmt::format("field '{}': {}", field, why));
  };
  if (!body.is_object()) throw RequestError(Refusal::invalid_request, "body: expected an object {watts, seconds}");
  for (const auto& [key, value] : body.items())
    if (key != "watts" && key != "seconds") bad(safe_text(key), "unknown (the fields are watts and seconds)");
  BudgetRequest out;
  auto watts = body.find("watts");
  if (watts == body.end()) bad("watts", "missing (a number of watts, or null for no budget)");
  if (!watts->is_null()) {
    if (!watts->is_number() || !std::isfinite(watts->get<double>()) || watts->get<double>() <= 0 ||
        watts->get<double>() > 1e9)
      bad("watts", fmt::format("expected watts between 0 (excluded) and 1e9, or null, got {}", describe_json(*watts)));
    out.watts = watts->get<double>();
  }
  auto seconds = body.find("seconds");
  if (seconds == body.end() || seconds->is_null()) {
    if (out.watts) bad("seconds", "missing (how many seconds the cluster has to comply; 0: at once)");
    return out;
  }
  if (!seconds->is_number() || !(seconds->get<double>() >= 0 && seconds->get<double>() <= kMaxSettingSeconds))
    bad("seconds",
        fmt::format("expected seconds between 0 and {:g}, got {}", kMaxSettingSeconds, describe_json(*seconds)));
  out.comply_s = seconds->get<double>();
  return out;
}

struct PowerBudget::Job {
  std::string id;
  Scheduler* scheduler = nullptr;
  double weight = 1;
  int gpus = 1;
  double min_limit = 0, max_limit = 0;  // W per GPU, 0: unknown (the strictest of its ranks')
  JobPhase phase = JobPhase::registering;
  std::optional<double> last_power;  // the last round's, W
  double all_max = 0;                // the most it drew before its plans (the top clock), W
  std::deque<double> recent;         // its last rounds' power, W
  double round_s = 0;
  double correction = 1;                    // measured over predicted power on its allocation
  std::vector<online::PaceOption> options;  // as last offered (empty: not pace-able now)
  std::size_t chosen = 0;                   // index into options
  std::optional<double> pace;               // told to its scheduler
  bool hold_probes = false;
  bool told = false;  // its scheduler was told pace and hold_probes (a restarted one may hold a replayed pace)
  int rounds_since_change = 0;                 // rounds finished since its pace or power limit last changed
  int rounds_since_budget = 0;                 // rounds finished since the budget last changed
  Clock::time_point last_started, last_ended;  // its last round's (about: from the round before's end)
  bool flexible() const { return !options.empty(); }
  double option_power(std::size_t k) const {
    return options[k].iteration_time > 0 ? options[k].energy / options[k].iteration_time : 0;
  }
};

PowerBudget::PowerBudget(std::optional<double> watts, Clock::time_point now)
    : watts_(watts), set_at_(now), comply_by_(now), started_(now) {
  if (watts_) source_ = "flag";
}

PowerBudget::~PowerBudget() = default;

void PowerBudget::set(const BudgetRequest& request, Clock::time_point now) {
  const std::optional<double> before = watts_;
  const double measured = measured_total();
  watts_ = request.watts;
  comply_s_ = request.comply_s;
  set_at_ = now;
  comply_by_ = now + clamped_duration(request.comply_s);
  source_ = watts_ ? "api" : "none";
  history_.clear();
  samples_ = samples_after_deadline_ = 0;
  sum_measured_ = worst_after_deadline_ = 0;
  last_over_rounds_.reset();
  last_over_s_ = 0;
  over_now_ = false;
  cap_gain_ = 1;
  for (auto& [id, job] : jobs_) job.rounds_since_budget = 0;
  // Lower than the cluster draws, sooner than the jobs' plans can follow (two rounds of the
  // slowest-round job): power limits hold the budget until they have.
  double slowest_rounds = 0;
  for (const auto& [id, job] : jobs_) slowest_rounds = std::max(slowest_rounds, 2 * job.round_s);
  transition_ = watts_ && measured > *watts_ && request.comply_s < slowest_rounds;
  spdlog::info("power budget: {} (was {}), to be met within {} s{}",
               watts_ ? fmt::format("{:.6g} W", *watts_) : std::string("none"),
               before ? fmt::format("{:.6g} W", *before) : std::string("none"), request.comply_s,
               transition_ ? fmt::format("; sooner than the jobs' two rounds ({:.3g} s): GPU power limits until then",
                                         slowest_rounds)
                           : "");
  solve(now, "the budget changed");
}

void PowerBudget::join(const std::string& id, Scheduler& scheduler, const JobInfo& info,
                       const std::vector<RankInfo>& ranks, Clock::time_point now) {
  Job job;
  job.id = id;
  job.scheduler = &scheduler;
  job.weight = info.weight;
  job.gpus = std::max(1, info.world_size);
  job.last_started = job.last_ended = now;
  for (const auto& r : ranks) {
    if (r.min_power_w) job.min_limit = std::max(job.min_limit, *r.min_power_w);
    if (r.max_power_w) job.max_limit = job.max_limit > 0 ? std::min(job.max_limit, *r.max_power_w) : *r.max_power_w;
  }
  jobs_[id] = std::move(job);
  solve(now, fmt::format("job {} arrived", id));
}

void PowerBudget::leave(const std::string& id, Clock::time_point now) {
  if (jobs_.erase(id) == 0) return;
  solve(now, fmt::format("job {} left", id));
}

void PowerBudget::plans_changed(const std::string& id, Clock::time_point now) {
  if (jobs_.count(id) != 0) solve(now, fmt::format("job {}'s plans changed", id));
}

std::optional<double> PowerBudget::power_limit(const std::string& id) const {
  auto it = jobs_.find(id);
  if (!backstop_ || it == jobs_.end()) return std::nullopt;
  return std::max(backstop_->watts, it->second.min_limit);  // never below what its GPUs support
}

void PowerBudget::refresh_options(Job& job) const {
  job.options = job.scheduler ? job.scheduler->pace_options() : std::vector<online::PaceOption>{};
  // A pace option needs a time and an energy to count.
  std::erase_if(job.options, [](const online::PaceOption& o) {
    return !(o.iteration_time > 0 && std::isfinite(o.iteration_time) && o.energy >= 0 && std::isfinite(o.energy));
  });
  if (job.chosen >= job.options.size()) job.chosen = 0;
}

double PowerBudget::estimate(const Job& job) const {
  if (before_plans(job.phase) && job.all_max > 0) return job.all_max;
  if (!job.recent.empty()) return *std::max_element(job.recent.begin(), job.recent.end());
  // Not measured yet: its GPUs at the most any GPU of the cluster drew, or at their power limit.
  double per_gpu = 0;
  for (const auto& [id, other] : jobs_) {
    per_gpu = std::max(per_gpu, other.all_max / other.gpus);
    for (double p : other.recent) per_gpu = std::max(per_gpu, p / other.gpus);
  }
  if (per_gpu <= 0) per_gpu = job.max_limit;
  return per_gpu * job.gpus;
}

double PowerBudget::job_power(const Job& job) const {
  return job.flexible() ? job.option_power(job.chosen) * job.correction : estimate(job);
}

double PowerBudget::measured_total() const {
  double sum = 0;
  for (const auto& [id, job] : jobs_) sum += job.last_power ? *job.last_power : estimate(job);
  return sum;
}

void PowerBudget::apply(Job& job, std::optional<double> pace, bool hold_probes) {
  const bool same = job.told && pace.has_value() == job.pace.has_value() &&
                    (!pace || std::abs(*pace - *job.pace) <= 1e-9 * std::max(1.0, *pace)) &&
                    hold_probes == job.hold_probes;
  if (same) return;
  if (pace != job.pace) job.rounds_since_change = 0;
  job.pace = pace;
  job.hold_probes = hold_probes;
  job.told = true;
  if (job.scheduler) job.scheduler->set_pace(pace, hold_probes);
}

void PowerBudget::solve(Clock::time_point now, const std::string& why) {
  for (auto& [id, job] : jobs_) refresh_options(job);
  if (!watts_) {
    for (auto& [id, job] : jobs_) job.chosen = 0, apply(job, std::nullopt, false);
    reachable_ = true, fairness_relaxed_ = false, transition_ = false;
    predicted_ = 0;
    for (const auto& [id, job] : jobs_) predicted_ += job_power(job);
    return update_backstop(now);
  }
  const double budget = *watts_;
  double fixed = 0;
  int gpus = 0;
  std::vector<Job*> paced;
  for (auto& [id, job] : jobs_) {
    gpus += job.gpus;
    if (job.flexible()) paced.push_back(&job);
    else fixed += estimate(job);
  }
  // Each pace-able job's points; and the ones no slower than a uniform power limit would make it.
  const double uniform = gpus > 0 ? budget / gpus : budget;
  std::vector<std::vector<online::PowerOption>> all, fair;
  std::vector<std::vector<std::size_t>> fair_index;
  for (Job* job : paced) {
    std::vector<online::PowerOption> points;
    const double unpaced = job->options.front().iteration_time;
    for (std::size_t k = 0; k < job->options.size(); ++k)
      points.push_back(
          {job->option_power(k) * job->correction, job->weight * job->gpus * unpaced / job->options[k].iteration_time});
    double floor = std::numeric_limits<double>::infinity();
    if (auto limited = job->scheduler->under_power_limit(uniform))
      floor = std::max(limited->iteration_time, unpaced) * (1 + 1e-9);
    std::vector<online::PowerOption> kept;
    std::vector<std::size_t> index;
    for (std::size_t k = 0; k < points.size(); ++k)
      if (job->options[k].iteration_time <= floor) kept.push_back(points[k]), index.push_back(k);
    all.push_back(std::move(points));
    fair.push_back(std::move(kept));
    fair_index.push_back(std::move(index));
  }
  const double target = budget * (1 - kMargin) - fixed;
  online::PowerAllocation allocation = online::allocate_power(fair, target);
  fairness_relaxed_ = false;
  if (allocation.within_budget) {
    for (std::size_t i = 0; i < paced.size(); ++i) allocation.choice[i] = fair_index[i][allocation.choice[i]];
  } else {
    allocation = online::allocate_power(all, target);  // the budget first: some job slower than a limit makes it
    fairness_relaxed_ = allocation.within_budget && !paced.empty();
  }
  reachable_ = allocation.within_budget;
  for (std::size_t i = 0; i < paced.size(); ++i) paced[i]->chosen = allocation.choice[i];
  predicted_ = fixed;
  for (Job* job : paced) predicted_ += job_power(*job);
  // An all-max probe round of a job must fit in what the others leave; a job never measured at
  // all-max is held.
  for (auto& [id, job] : jobs_) {
    if (!job.flexible()) continue;
    const bool hold = job.all_max <= 0 || predicted_ - job_power(job) + job.all_max > budget;
    apply(job, job.chosen == 0 ? std::nullopt : std::optional(job.options[job.chosen].iteration_time), hold);
  }
  spdlog::debug("power budget: {}: predicted {:.6g} W of {:.6g} W{}", why, predicted_, budget,
                reachable_ ? "" : " (out of reach of the plans)");
  update_backstop(now);
}

// The largest per-GPU limit under which the jobs are predicted to draw at most `target` watts:
// a job's GPUs draw at most the limit each (never below their minimum limit).
double PowerBudget::cap_for(double target) const {
  auto draw = [&](double limit) {
    double sum = 0;
    for (const auto& [id, job] : jobs_) {
      const double now = std::max(job_power(job), job.last_power.value_or(0));  // what it may still draw
      sum += std::min(now, std::max(limit, job.min_limit) * job.gpus);
    }
    return sum;
  };
  double low = 1, high = 1;
  for (const auto& [id, job] : jobs_)
    high = std::max(high, std::max(job_power(job), job.last_power.value_or(0)) / job.gpus);
  if (draw(high) <= target) return high;
  if (draw(low) > target) return low;  // not even at the lowest limits
  for (int i = 0; i < 60; ++i) {
    const double mid = (low + high) / 2;
    (draw(mid) <= target ? low : high) = mid;
  }
  return low;
}

bool PowerBudget::settled() const {
  return std::all_of(jobs_.begin(), jobs_.end(), [](const auto& j) { return j.second.rounds_since_change >= 2; });
}

void PowerBudget::update_backstop(Clock::time_point now) {
  if (transition_ &&
      std::all_of(jobs_.begin(), jobs_.end(), [](const auto& j) { return j.second.rounds_since_budget >= 2; }))
    transition_ = false;
  std::string reason;
  if (watts_ && !reachable_)
    reason = fmt::format(
        "the jobs' plans cannot reach the budget: at their slowest useful paces they are predicted "
        "to draw {:.6g} W",
        predicted_);
  else if (watts_ && transition_)
    reason =
        fmt::format("the budget must hold within {:.3g} s, sooner than the jobs' plans follow (two rounds)", comply_s_);
  if (reason.empty()) {
    if (backstop_) {
      spdlog::info("power budget: GPU power limits lifted ({} W per GPU for {:.1f} s)", backstop_->watts,
                   seconds_between(backstop_->since, now));
      for (auto& [id, job] : jobs_) job.rounds_since_change = 0;
    }
    backstop_.reset();
    cap_gain_ = 1;
    return;
  }
  const double watts = std::max(1.0, cap_for(*watts_ * (1 - kMargin)) * cap_gain_);
  if (!backstop_) {
    spdlog::warn("power budget: GPU power limits of {:.4g} W per GPU: {}", watts, reason);
    backstop_ = Backstop{watts, reason, now};
    for (auto& [id, job] : jobs_) job.rounds_since_change = 0;
    return;
  }
  if (std::abs(backstop_->watts - watts) > 1e-6 * watts)
    for (auto& [id, job] : jobs_) job.rounds_since_change = 0;
  backstop_->watts = watts;
  backstop_->reason = reason;
}

void PowerBudget::round(const std::string& id, const RoundPower& r, Clock::time_point now) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  Job& job = it->second;
  const bool phase_changed = r.phase != job.phase;
  job.phase = r.phase;
  job.last_started = job.last_ended;  // the round that ended now began when the one before ended
  job.last_ended = now;
  job.round_s = r.round_seconds;
  ++job.rounds_since_change;
  ++job.rounds_since_budget;
  const bool measured = r.iteration_time > 0 && r.energy >= 0 && std::isfinite(r.energy);
  const double power = measured ? r.energy / r.iteration_time : 0;
  if (measured) {
    job.last_power = power;
    job.recent.push_back(power);
    if (job.recent.size() > kRecentRounds) job.recent.pop_front();
    if (before_plans(r.phase) && !backstop_) job.all_max = std::max(job.all_max, power);
  }
  // The closed loop: a round that ran the allocation from its start (the second after a change),
  // without a power limit that held it lower, corrects the job's prediction.
  const bool was_flexible = job.flexible();
  const std::size_t chosen = job.chosen;
  const double model = was_flexible ? job.option_power(chosen) : 0;
  if (measured && was_flexible && model > 0 && job.rounds_since_change >= 2 && !backstop_) {
    const double ratio = power / model;
    if (ratio > 0.5 && ratio < 2) job.correction = 0.6 * job.correction + 0.4 * ratio;
  }
  // The sample: the cluster's power as every job last measured it.
  const double total = measured_total();
  if (watts_) {
    int fewest = std::numeric_limits<int>::max();
    bool after_deadline = true;  // every job's last round started after it (one not measured yet counts as it will)
    for (const auto& [other_id, other] : jobs_) {
      fewest = std::min(fewest, other.rounds_since_budget);
      after_deadline = after_deadline && (!other.last_power || other.last_started >= comply_by_);
    }
    Sample s{
        seconds_between(set_at_, now), total, predicted_, backstop_.has_value(), id, r.iteration_time, power, fewest};
    history_.push_back(s);
    if (history_.size() > kHistory) history_.pop_front();
    ++samples_;
    sum_measured_ += total;
    if (after_deadline) ++samples_after_deadline_, worst_after_deadline_ = std::max(worst_after_deadline_, total);
    over_now_ = total > *watts_ * kComplied;
    if (over_now_) last_over_rounds_ = fewest, last_over_s_ = s.t;
    // The backstop's integral term: once every job ran under the limit, the limit follows what it measured.
    if (backstop_ && settled() && total > 0)
      cap_gain_ = std::clamp(cap_gain_ * std::clamp(*watts_ * (1 - kMargin) / total, 0.9, 1.1), 0.25, 4.0);
  }
  // Re-solve on what changed: the job's phase, its plans (what it offers), or a prediction the
  // measurements moved away from the budget.
  const std::vector<online::PaceOption> before = job.options;
  refresh_options(job);
  bool offer_changed = before.empty() != job.options.empty();
  if (!offer_changed && !before.empty()) {
    const auto& a = before.front();
    const auto& b = job.options.front();
    offer_changed = std::abs(a.iteration_time - b.iteration_time) > 2e-3 * a.iteration_time ||
                    std::abs(a.energy - b.energy) > 1e-2 * a.energy;
  }
  std::string why;
  if (phase_changed) why = fmt::format("job {} is {} now", id, to_string(r.phase));
  else if (offer_changed) why = fmt::format("job {}'s plans changed", id);
  else if (watts_) {
    double predicted = 0;
    for (const auto& [other_id, other] : jobs_) predicted += job_power(other);
    const bool paced = std::any_of(jobs_.begin(), jobs_.end(), [](const auto& j) { return j.second.pace.has_value(); });
    if (predicted > *watts_ * (1 - kMargin / 2))
      why = fmt::format("predicted {:.6g} W after correcting by the measurements, over the aim", predicted);
    else if ((paced || backstop_) && predicted < *watts_ * (1 - 3 * kMargin))
      why = fmt::format("predicted {:.6g} W after correcting by the measurements, room to speed up", predicted);
  }
  if (!why.empty()) solve(now, why);
  else update_backstop(now);
}

std::optional<JobBudgetStatus> PowerBudget::job_status(const std::string& id) const {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  const Job& job = it->second;
  JobBudgetStatus out;
  out.weight = job.weight;
  out.gpus = job.gpus;
  out.share = job_power(job);
  out.measured = job.last_power;
  out.counted_as = job.flexible() ? "plans" : job.last_power ? "measured" : "estimate";
  out.pace = job.pace;
  out.correction = job.correction;
  out.power_limit = power_limit(id);
  out.probes_held = job.hold_probes;
  out.rounds_since_change = job.rounds_since_change;
  if (job.flexible()) {
    const double unpaced = job.options.front().iteration_time;
    out.unpaced_time = unpaced;
    out.throughput = unpaced / job.options[job.chosen].iteration_time;
  }
  return out;
}

PowerBudgetStatus PowerBudget::status(Clock::time_point now) const {
  PowerBudgetStatus out;
  for (const auto& [id, job] : jobs_) out.jobs.push_back({id, job.phase, *job_status(id)});
  for (const auto& s : history_)
    out.history.push_back({{"t", s.t},
                           {"measured", s.measured},
                           {"predicted", s.predicted},
                           {"backstop", s.backstop},
                           {"job_id", s.job},
                           {"iteration_time", s.iteration_time},
                           {"power", s.power},
                           {"rounds", s.rounds}});
  double all_max = 0;
  bool all_max_known = !jobs_.empty();
  for (const auto& [id, job] : jobs_) {
    all_max += job.all_max;
    all_max_known = all_max_known && job.all_max > 0;
  }
  out.budget = watts_;
  out.source = source_;
  out.seconds = comply_s_;
  out.set_seconds_ago = seconds_between(set_at_, now);
  out.deadline_passed = now >= comply_by_;
  out.predicted = predicted_;
  if (!jobs_.empty()) out.measured = measured_total();
  if (all_max_known) out.all_max = all_max;
  out.within_reach = reachable_;
  out.fairness_relaxed = fairness_relaxed_;
  out.backstop.active = backstop_.has_value();
  if (backstop_) {
    out.backstop.power_limit = backstop_->watts;
    out.backstop.reason = backstop_->reason;
    out.backstop.seconds = seconds_between(backstop_->since, now);
  }
  out.since_set = {{"samples", samples_},
                   {"mean_measured", samples_ > 0 ? json(sum_measured_ / double(samples_)) : json(nullptr)},
                   {"sum_measured", sum_measured_},
                   {"samples_after_deadline", samples_after_deadline_},
                   {"worst_after_deadline", samples_after_deadline_ > 0 ? json(worst_after_deadline_) : json(nullptr)},
                   // Within 1% of the budget since every job ran this many rounds (null: over it now).
                   {"complied_after_rounds",
                    samples_ == 0 || over_now_ ? json(nullptr) : json(last_over_rounds_ ? *last_over_rounds_ + 1 : 0)},
                   {"complied_after_s", samples_ == 0 || over_now_ ? json(nullptr) : json(last_over_s_)}};
  return out;
}

std::optional<BudgetRequest> stored_budget(const std::filesystem::path& file, std::optional<double> flag) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  try {
    json stored = json::parse(in);
    const json stored_flag = stored.value("flag", json(nullptr));
    const bool same_flag = flag ? stored_flag.is_number() && stored_flag.get<double>() == *flag : stored_flag.is_null();
    if (!same_flag) return std::nullopt;  // the operator changed --power-budget since: the flag wins
    json body = {{"watts", stored.value("watts", json(nullptr))}, {"seconds", stored.value("seconds", 0.0)}};
    return budget_request_from_json(body);
  } catch (const std::exception& e) {
    spdlog::warn("power budget: {} cannot be read ({}); starting from the power_budget setting", file.string(),
                 e.what());
    return std::nullopt;
  }
}

void store_budget(const std::filesystem::path& file, std::optional<double> flag, const BudgetRequest& request) {
  json content = {
      {"flag", optional_number(flag)}, {"watts", optional_number(request.watts)}, {"seconds", request.comply_s}};
  std::filesystem::create_directories(file.parent_path().empty() ? std::filesystem::path(".") : file.parent_path());
  write_file_atomic(file, content.dump() + "\n");
}

}  // namespace perseus::server
