// Full-frontier planning time and peak memory for the measured profiles of the reference data set
// (GPT-3 175B and Bloom, A100 and A40, 8 stages) at 12, 24, 48 and 96 microbatches.
// Run: build/bench/perseus_bench_frontier [--benchmark_filter=a40.*96]
// Each case reports wall time, the number of frontier points and the process's peak RSS so far.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <filesystem>

#include "perseus/profile/blocking_power.hpp"
#include "perseus/solver/planning.hpp"

using namespace perseus;

namespace {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

void plan_frontier(benchmark::State& state, std::string profile_name, bool a40, int microbatches) {
  const auto path = std::filesystem::path(PERSEUS_SHARED_DIR) / "data/sosp24/stage_profile" / profile_name;
  if (!std::filesystem::exists(path)) {
    state.SkipWithError("profile not found beside the project");
    return;
  }
  PlanningConfig config;
  config.num_stages = 8;
  config.num_microbatches = microbatches;
  config.unit_time = a40 ? 0.0001 : 0.001;
  config.p_block = a40 ? kA40BlockingPowerW : kA100BlockingPowerW;
  const Profile profile = read_profile(path);
  std::size_t points = 0;
  for (auto _ : state) {
    // Fitting the cost models is part of planning, so it is inside the timed region.
    const auto problem = make_planning_problem(profile, config);
    const auto frontier = solve_frontier(problem);
    points = frontier.points.size();
    benchmark::DoNotOptimize(points);
  }
  state.counters["points"] = static_cast<double>(points);
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}

// Options and cost-model fits (the 54-start exponential grid search of the reference per distinct
// (stage, instruction) option set) for 12 microbatches: planning's set-up before the solver.
void fit_cost_models(benchmark::State& state, std::string profile_name, bool a40) {
  const auto path = std::filesystem::path(PERSEUS_SHARED_DIR) / "data/sosp24/stage_profile" / profile_name;
  if (!std::filesystem::exists(path)) {
    state.SkipWithError("profile not found beside the project");
    return;
  }
  PlanningConfig config;
  config.num_stages = 8;
  config.num_microbatches = 12;
  config.unit_time = a40 ? 0.0001 : 0.001;
  config.p_block = a40 ? kA40BlockingPowerW : kA100BlockingPowerW;
  const Profile profile = read_profile(path);
  for (auto _ : state) {
    auto problem = make_planning_problem(profile, config);
    benchmark::DoNotOptimize(problem);
  }
}

const bool registered = [] {
  const std::pair<const char*, bool> profiles[] = {{"gpt3-175b+a100_sxm_bf16.csv", false},
                                                   {"bloom+a100_sxm_bf16.csv", false},
                                                   {"gpt3-175b+a40_bf16.csv", true},
                                                   {"bloom+a40_bf16.csv", true}};
  for (const auto& [name, a40] : profiles) {
    const std::string fit_label = "fit/" + std::string(name).substr(0, std::string(name).size() - 4);
    benchmark::RegisterBenchmark(fit_label.c_str(), fit_cost_models, std::string(name), a40)
        ->Unit(benchmark::kMillisecond);
  }
  for (const auto& [name, a40] : profiles) {
    for (int microbatches : {12, 24, 48, 96}) {
      const std::string label =
          std::string(name).substr(0, std::string(name).size() - 4) + "/mb" + std::to_string(microbatches);
      benchmark::RegisterBenchmark(label.c_str(), plan_frontier, std::string(name), a40, microbatches)
          ->Unit(benchmark::kMillisecond)
          ->Iterations(1)
          ->UseRealTime();
    }
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
