#include "perseus/solver/planning.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <thread>

#include "perseus/pipeline/schedule_profile.hpp"
#include "perseus/solver/exact_times.hpp"
#include "perseus/util/error.hpp"

namespace perseus {

namespace {

// The cost model of every (stage, kind), fitted on up to one thread per core: the fits are
// independent, so the models are the same as one after the other. The first failure in spec order
// is the one reported, as without threads.
bool same_fit_input(const std::vector<ExecutionOption>& a, const std::vector<ExecutionOption>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.quant_time == y.quant_time && x.effective_energy == y.effective_energy;
  });
}

void fit_cost_models(PlanningProblem& problem, const PlanningConfig& config, const std::vector<std::string>& whats) {
  // Stages that repeat the same layers have the same options: each distinct set is fitted once
  // and its model shared (a fit depends on nothing else).
  std::vector<std::size_t> distinct;
  std::vector<std::size_t> fitted_by(problem.specs.size());
  for (std::size_t i = 0; i < problem.specs.size(); ++i) {
    fitted_by[i] = i;
    if (problem.specs[i].options.options().empty()) continue;  // a kind the schedule does not run
    const auto same = std::find_if(distinct.begin(), distinct.end(), [&](std::size_t j) {
      return same_fit_input(problem.specs[i].options.options(), problem.specs[j].options.options());
    });
    fitted_by[i] = same == distinct.end() ? i : *same;
    if (same == distinct.end()) distinct.push_back(i);
  }
  const std::size_t n = distinct.size();
  std::vector<std::exception_ptr> errors(n);
  auto fit = [&](std::size_t k) {
    const std::size_t i = distinct[k];
    try {
      auto choice = choose_cost_model(config.cost_model, problem.specs[i].options, config.unit_time, whats[i]);
      problem.specs[i].model = std::move(choice.model);
      problem.specs[i].fallback = std::move(choice.fallback);
    } catch (...) {
      errors[k] = std::current_exception();
    }
  };
  const std::size_t workers = std::min<std::size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> threads;
  for (std::size_t w = 1; w < workers; ++w)
    threads.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < n;) fit(i);
    });
  for (std::size_t i; (i = next.fetch_add(1)) < n;) fit(i);
  for (auto& t : threads) t.join();
  for (const auto& error : errors)
    if (error) std::rethrow_exception(error);
  for (std::size_t i = 0; i < problem.specs.size(); ++i) {
    problem.specs[i].model = problem.specs[fitted_by[i]].model;
    problem.specs[i].fallback = problem.specs[fitted_by[i]].fallback;
  }
}

}  // namespace

PlanningProblem make_planning_problem(const Profile& profile, const PlanningConfig& config) {
  if (config.num_stages < 1) throw SettingError("num_stages", "num_stages must be at least 1");
  if (config.num_microbatches < 1) throw SettingError("num_microbatches", "num_microbatches must be at least 1");
  if (!(config.unit_time > 0) || !std::isfinite(config.unit_time)) {
    throw SettingError("unit_time", "unit_time must be a positive number of seconds");
  }
  if (!(config.p_block >= 0) || !std::isfinite(config.p_block)) {
    throw SettingError("p2p_power", "p2p_power must be a non-negative number of watts");
  }
  if (!(config.noise_factor > 0 && config.noise_factor <= 1)) {
    throw SettingError("noise_factor", "noise_factor must be in (0, 1]");
  }
  // Bounds on what one run may make the planner allocate and compute: a plan has two
  // instructions per (stage, microbatch), and path lengths are summed in 32-bit time units.
  constexpr long long kMaxInstructions = 2'000'000, kMaxUnitsPerInstruction = 10'000'000;
  if (config.virtual_stages < 1 || config.virtual_stages > 1024)
    throw SettingError("virtual_stages", "virtual_stages must be in [1, 1024]");
  const int virtual_stages = schedule_virtual_stages(config.schedule, config.virtual_stages);
  const long long instructions =
      (splits_backward(config.schedule) ? 3LL : 2LL) * config.num_stages * config.num_microbatches * virtual_stages;
  if (instructions > kMaxInstructions)
    throw SettingError(
        {"num_stages", "num_microbatches", "virtual_stages"},
        fmt::format("num_stages {} x num_microbatches {}{} is {} instructions; the planner handles at most {}",
                    config.num_stages, config.num_microbatches,
                    config.virtual_stages > 1 ? fmt::format(" x virtual_stages {}", config.virtual_stages) : "",
                    instructions, kMaxInstructions));
  config.check();
  PlanningProblem problem;
  const int model_stages = config.num_stages * virtual_stages;
  problem.dag = build_pipeline_dag(config.schedule, config.num_stages, config.num_microbatches, config.extra_forwards,
                                   config.virtual_stages);
  const Profile rows = profile_for_schedule(profile, config.schedule, config.num_stages, model_stages);
  std::vector<bool> used(kNumInstructionKinds * static_cast<std::size_t>(model_stages), false);
  for (const auto& inst : problem.dag.instructions)
    used[PlanningProblem::spec_index(model_stage(inst, config.num_stages), inst.kind)] = true;

  problem.unit_time = config.unit_time;
  problem.p_block = config.p_block;
  const OptionsConfig options_config{config.unit_time, config.p_block, config.noise_factor};
  problem.specs.resize(kNumInstructionKinds * static_cast<std::size_t>(model_stages));
  std::vector<std::string> whats;  // per spec, for error messages
  for (int stage = 0; stage < model_stages; ++stage) {
    for (auto kind : kAllInstructionKinds) {
      if (!used[PlanningProblem::spec_index(stage, kind)]) {
        whats.emplace_back();
        continue;
      }
      auto& spec = problem.specs[PlanningProblem::spec_index(stage, kind)];
      const auto stage_rows = rows.rows_for(stage, kind);
      spec.options = build_options(stage_rows, options_config);
      if (config.cost_model != CostModelKind::exponential)
        spec.options = without_costlier_slower(faster_within_quanta(spec.options, stage_rows, options_config));
      const std::string what = fmt::format("{}: stage {} {}", profile.source, stage, to_string(kind));
      const auto& slowest = spec.options.options().front();  // sorted by quant_time, descending
      const long long span = slowest.quant_time - spec.options.options().back().quant_time;
      if (span > kMaxUnitsPerInstruction || instructions * slowest.quant_time > 2147483647LL)
        throw SettingError(
            "unit_time",
            fmt::format("{} at {} MHz takes {} s, {} units of unit_time {} s: {}; use a larger unit_time", what,
                        slowest.frequency, slowest.real_time, slowest.quant_time, config.unit_time,
                        span > kMaxUnitsPerInstruction
                            ? fmt::format("its clocks span {} units, so a frontier could have that many points "
                                          "(at most {})",
                                          span, kMaxUnitsPerInstruction)
                            : fmt::format("{} instructions could take {} units, beyond 2^31-1", instructions,
                                          instructions * slowest.quant_time)));
      whats.push_back(what);
    }
  }
  fit_cost_models(problem, config, whats);
  return problem;
}

namespace {

// The iteration time with every instruction at `duration_of(instruction)`.
template <typename DurationOf>
int longest_path(const PipelineDag& dag, DurationOf duration_of) {
  const int n = dag.num_nodes(), instructions = static_cast<int>(dag.instructions.size());
  std::vector<std::vector<int>> predecessors(n);
  for (const auto& [u, v] : dag.edges) predecessors[v].push_back(u);
  std::vector<long long> finish(n, 0);
  for (int v : dag.topological_order()) {
    long long start = 0;
    for (int u : predecessors[v]) start = std::max(start, finish[u]);
    finish[v] = start + (v < instructions ? duration_of(v) : 0);
  }
  return static_cast<int>(finish[dag.sink]);
}

// A frontier without points gets the plan it started from as its only point.
bool keep_the_start(const PlanningProblem& problem, Frontier& frontier) {
  if (!frontier.points.empty() || frontier.interrupted) return false;
  FrontierPoint start;
  start.quant_time = frontier.start_quant_time;
  start.effective_cost = frontier.start_effective_cost;
  ExactTimes exact(problem, frontier.start_durations);
  start.exact_time = exact.time();
  start.exact_energy = exact.energy();
  start.changes_begin = frontier.changes.size();
  frontier.points.push_back(start);
  return true;
}

// Where the frontier's fastest point runs slower (exactly) than every instruction at its fastest
// clock, one more point: that plan with the cheapest clock step on its exact critical path taken,
// one at a time, until it runs as fast (it does at the latest when every instruction on that path
// is at its fastest clock, whose path then is no longer than the all-fastest plan's). Quantized
// time cannot tell them apart: floors leave each instruction up to a unit of slack that is not
// there.
void fit_the_fastest_point(const PlanningProblem& problem, Frontier& frontier) {
  if (frontier.points.empty()) return;
  const int instructions = static_cast<int>(problem.dag.instructions.size());
  std::vector<int> fastest(instructions);
  for (int i = 0; i < instructions; ++i) fastest[i] = problem.spec_of(i).options.min_quant();
  const double target = ExactTimes(problem, fastest).time();
  std::vector<int> durations = frontier.durations_at(frontier.points.size() - 1);
  ExactTimes times(problem, durations);
  if (!(times.time() > target)) return;
  std::vector<char> raised(instructions, 0);
  while (times.time() > target) {
    int best = -1;
    const ExecutionOption* best_option = nullptr;
    double best_price = 0;  // joules per second saved
    for (int i : times.critical_path()) {
      const auto& options = problem.spec_of(i).options.options();  // slowest first
      const auto at =
          std::find_if(options.begin(), options.end(), [&](const auto& o) { return &o == &times.option(i); });
      if (at + 1 >= options.end()) continue;  // at its fastest clock
      const double price = ((at + 1)->energy - at->energy) / (at->real_time - (at + 1)->real_time);
      if (best < 0 || price < best_price) {
        best = i;
        best_option = &*(at + 1);
        best_price = price;
      }
    }
    if (best < 0) break;  // (never: see above)
    times.set_duration(best, best_option->quant_time);
    raised[best] = 1;
  }
  FrontierPoint point;
  point.changes_begin = frontier.changes.size();
  for (int i = 0; i < instructions; ++i) {
    durations[i] = times.duration(i);
    if (raised[i]) frontier.changes.push_back({i, durations[i]});
  }
  point.quant_time = longest_path(problem.dag, [&](int i) { return durations[i]; });
  for (int i = 0; i < instructions; ++i) point.effective_cost += (*problem.spec_of(i).model)(durations[i]);
  point.cost_change = point.effective_cost - frontier.points.back().effective_cost;
  point.exact_time = times.time();
  point.exact_energy = times.energy();
  frontier.points.push_back(point);
  frontier.fastest_fitted = true;
}

}  // namespace

std::string describe_spec(int spec) {
  return fmt::format("stage {} {}", spec / kNumInstructionKinds,
                     to_string(kAllInstructionKinds[spec % kNumInstructionKinds]));
}

std::vector<int> PlannedFrontier::stopping_specs() const {
  std::vector<int> specs;
  auto exponential = [&](int spec) { return problem.specs[spec].model && problem.specs[spec].model->name() == "exp"; };
  for (int instruction : frontier.stop_cut) {
    const auto& inst = problem.dag.instructions[instruction];
    const int spec = PlanningProblem::spec_index(model_stage(inst, problem.dag.num_stages), inst.kind);
    if (exponential(spec)) specs.push_back(spec);
  }
  // No cut to tell (no flow met the bounds): the exponential models that fit their options
  // badly, else every exponential one.
  for (const bool misfits_only : {true, false}) {
    if (!specs.empty()) break;
    for (int spec = 0; spec < static_cast<int>(problem.specs.size()); ++spec) {
      if (!exponential(spec)) continue;
      const auto& model = dynamic_cast<const ExponentialModel&>(*problem.specs[spec].model);
      if (!misfits_only || !exponential_misfit(model, problem.specs[spec].options).empty()) specs.push_back(spec);
    }
  }
  std::sort(specs.begin(), specs.end());
  specs.erase(std::unique(specs.begin(), specs.end()), specs.end());
  return specs;
}

PlannedFrontier plan_frontier(const Profile& profile, const PlanningConfig& config, SolverOptions options) {
  PlannedFrontier planned;
  planned.problem = make_planning_problem(profile, config);
  options.reference_stops = config.cost_model == CostModelKind::exponential;
  const auto& problem = planned.problem;
  planned.fastest_quant_time = longest_path(problem.dag, [&](int i) { return problem.spec_of(i).options.min_quant(); });
  for (;;) {
    planned.frontier = solve_frontier(planned.problem, options);
    planned.only_the_start = keep_the_start(planned.problem, planned.frontier);
    if (config.cost_model != CostModelKind::automatic || !planned.stopped_early()) break;
    const auto specs = planned.stopping_specs();
    if (specs.empty()) break;  // every model is the hull already: nothing left to change
    for (int spec : specs) {
      auto& s = planned.problem.specs[spec];
      s.model = std::make_shared<PiecewiseLinearModel>(s.options.options());
      s.fallback = fmt::format("the exponential model stopped the solver at {} unit times ({})",
                               planned.frontier.points.back().quant_time, planned.frontier.stop_text());
    }
  }
  if (config.cost_model != CostModelKind::exponential && !planned.frontier.interrupted)
    fit_the_fastest_point(planned.problem, planned.frontier);
  return planned;
}

}  // namespace perseus
