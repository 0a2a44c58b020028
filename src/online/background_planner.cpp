#include "perseus/online/background_planner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "perseus/baselines/all_max.hpp"
#include "perseus/emulate/deadline_fit.hpp"
#include "perseus/emulate/emulator.hpp"
#include "perseus/emulate/straggler.hpp"
#include "perseus/solver/phillips_dessouky.hpp"

namespace perseus::online {

std::vector<std::vector<int>> PlanningOutput::frequencies(std::size_t candidate) const {
  const PlanCandidate& c = candidates.at(candidate);
  return c.point ? plan_at(record, *c.point).frequencies : all_max_plan(*emulator).frequencies;
}

double automatic_unit_time(const Profile& profile, std::optional<double> previous) {
  std::map<std::pair<int, InstructionKind>, std::pair<int, double>> top;  // fastest clock's time
  for (const auto& row : profile.rows) {
    auto& t = top[{row.stage, row.kind}];
    if (row.frequency > t.first) t = {row.frequency, row.time};
  }
  double shortest = std::numeric_limits<double>::infinity();
  for (const auto& [key, t] : top) shortest = std::min(shortest, t.second);
  if (!std::isfinite(shortest) || shortest <= 0) return previous.value_or(1e-3);
  const double target = std::clamp(shortest / 50, 1e-6, 1.0);
  if (previous && *previous >= target / 1.25 && *previous <= target * 1.25) return *previous;
  // Two significant digits: d.d x 10^e, rounded down (the 1e-9 keeps 0.0011 from becoming 0.0010).
  const int exponent = static_cast<int>(std::floor(std::log10(target) + 1e-9)) - 1;
  const double power = std::pow(10.0, std::abs(exponent));  // exact: a whole power of ten
  const double digits = std::floor((exponent < 0 ? target * power : target / power) + 1e-9);
  return std::clamp(exponent < 0 ? digits / power : digits * power, 1e-6, 1.0);
}

namespace {

// One frontier of `input.profile` with `config`, each of its plans emulated on `emulator` (the
// profile's pipeline); the record is not written.
PlanningOutput plan_with(const PlanningInput& input, const PlanningConfig& config,
                         std::shared_ptr<const Emulator> shared, const std::atomic<bool>* stop) {
  SolverOptions options;
  options.stop = stop;
  options.threads = 1;  // it plans beside training (or other jobs): no second core of theirs spinning
  const PlannedFrontier planned = plan_frontier(input.profile, config, options);
  const PlanningProblem& problem = planned.problem;
  const Frontier& frontier = planned.frontier;
  if (frontier.interrupted) throw std::runtime_error("planning was stopped");
  PlanningOutput out;
  out.record = make_frontier_record(problem, frontier, {input.profile.source, to_string(config.cost_model)});
  for (int s = 0; s < problem.dag.num_model_stages(); ++s)
    for (auto kind : kAllInstructionKinds)
      if (const auto& model = problem.specs[PlanningProblem::spec_index(s, kind)].model)
        out.cost_models[fmt::format("stage {} {}", s, to_string(kind))] = model->name();

  out.emulator = shared;
  const Emulator& emulator = *shared;
  if (!out.record.points.empty()) {
    Plan plan = plan_at(out.record, 0);
    for (std::size_t i = 0; i < out.record.points.size(); ++i) {
      if (stop && stop->load()) throw std::runtime_error("planning was stopped");
      if (i > 0) advance_plan(out.record, plan, i);
      auto [time, energy] = emulator.time_and_energy(plan.frequencies);
      out.candidates.push_back({i, time, energy});
    }
  }
  const Plan top = all_max_plan(emulator);
  out.candidates.push_back({std::nullopt, top.time, top.energy});
  return out;
}

// What the plan chosen at `deadline` costs there.
double cost_at(const PlanningOutput& plans, double deadline) {
  return cost_until(plans, choose_plan(plans, deadline), deadline);
}

// Whether planning with `kind` can give another frontier: some (stage, kind) was modelled otherwise
// (one with a single clock is a constant under every model).
bool would_differ(const PlanningOutput& plans, CostModelKind kind) {
  return std::any_of(plans.cost_models.begin(), plans.cost_models.end(),
                     [&](const auto& entry) { return entry.second != to_string(kind) && entry.second != "constant"; });
}

}  // namespace

PlanningOutput plan_online(const PlanningInput& input, const std::atomic<bool>* stop) {
  const auto started = std::chrono::steady_clock::now();
  EmulatorConfig emulator_config;
  emulator_config.shape() = input.config.shape();
  emulator_config.p_block = input.config.p_block;
  const auto emulator = std::make_shared<const Emulator>(input.profile, emulator_config);
  PlanningOutput out = plan_with(input, input.config, emulator, stop);
  if (input.compare_with && input.target_deadline && would_differ(out, *input.compare_with)) {
    PlanningConfig other_config = input.config;
    other_config.cost_model = *input.compare_with;
    PlanningOutput other = plan_with(input, other_config, emulator, stop);
    const double deadline = input.target_deadline(out.all_max().time);
    const double cost = cost_at(out, deadline), other_cost = cost_at(other, deadline);
    // Within the margin the first model's frontier stays: the second is planned to find what the first misses.
    if (other_cost < cost * (1 - input.compare_margin)) {
      other.comparison = CostModelComparison{other_config.cost_model, input.config.cost_model, other_cost, cost,
                                             input.compare_margin,    out.cost_models};
      out = std::move(other);
    } else {
      out.comparison = CostModelComparison{input.config.cost_model, other_config.cost_model, cost, other_cost,
                                           input.compare_margin,    other.cost_models};
    }
  }
  if (!input.record_dir.empty()) write_frontier_record(out.record, input.record_dir);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

std::string ChosenPlan::label() const {
  std::string base = point ? fmt::format("frontier point {}", *point) : std::string("all-max");
  return fit_steps > 0 ? fmt::format("{} fitted with {} clock steps", base, fit_steps) : base;
}

namespace {

ChosenPlan from_candidate(const PlanningOutput& plans, std::size_t i) {
  const auto& c = plans.candidates[i];
  return {c.point, 0, plans.frequencies(i), c.time, c.energy};
}

}  // namespace

ChosenPlan all_max(const PlanningOutput& plans) { return from_candidate(plans, plans.candidates.size() - 1); }

ChosenPlan fastest_plan(const PlanningOutput& plans) {
  std::size_t best = plans.candidates.size() - 1;  // all-max
  for (std::size_t i = 0; i < plans.candidates.size(); ++i)
    if (plans.candidates[i].time < plans.candidates[best].time) best = i;
  return from_candidate(plans, best);
}

double cost_until(const PlanningOutput& plans, const ChosenPlan& plan, double deadline) {
  return plan.energy + plans.record.num_stages * std::max(0.0, deadline - plan.time) * plans.record.p_block;
}

ChosenPlan choose_plan(const PlanningOutput& plans, double deadline) {
  std::vector<PlanCost> pool;
  for (const auto& c : plans.candidates) pool.push_back({c.time, c.energy});
  int pooled = cheapest_by_deadline(pool, deadline, plans.record.num_stages, plans.record.p_block);
  std::optional<ChosenPlan> best;
  if (pooled >= 0) best = from_candidate(plans, static_cast<std::size_t>(pooled));
  auto total = [&](const ChosenPlan& p) { return cost_until(plans, p, deadline); };
  if (!plans.record.points.empty() && plans.emulator) {
    std::size_t pick = cheapest_within(plans.record, deadline).value_or(plans.record.points.size() - 1);
    if (auto fit = fit_to_deadline(*plans.emulator, plan_at(plans.record, pick).frequencies, deadline)) {
      ChosenPlan fitted{pick, fit->steps, std::move(fit->frequencies), fit->time, fit->energy};
      if (!best || total(fitted) < total(*best)) best = std::move(fitted);
    }
  }
  return best ? std::move(*best) : fastest_plan(plans);
}

// The task's destructor joins the thread after the solver was told to stop.
BackgroundPlanner::~BackgroundPlanner() { stop_.store(true); }

void BackgroundPlanner::start(PlanningInput input, std::function<void()> done) {
  task_.start([this, input = std::move(input)] { return plan_online(input, &stop_); },
              [this, done = std::move(done)] {
                if (!stop_.load()) done();
              });
}

bool BackgroundPlanner::ready() const { return task_.ready(); }

PlanningOutput BackgroundPlanner::take() { return task_.take(); }

}  // namespace perseus::online
