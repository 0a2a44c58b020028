// Plans chosen under noise, judged offline: for each measured profile, noise sigma and seed, the
// variability is estimated from noisy all-max rounds (as the turnkey loop's baseline measures
// them), the plan is chosen under that noise for zero slowdown (choose_within_allowance(plans, 1, ...):
// all-max's expected time and the allowance, widened where the noise costs much of the saving, as
// the turnkey loop chooses; --wide-allowance 1 --wide-max-allowance 0.0015 never widen), and then the plan and an
// all-max twin run with fresh noise (other seeds than the chooser's; the twin shares them) on D pipelines that meet at
// the gradient synchronisation.
// Prints the true slowdown and saving, and the saving as a share of the ideal (the noise-free
// choice's noise-free saving), next to what the noise-free choice does under the same noise.
//
//   build/bench/perseus_bench_noise_choice [--shared ../shared] [--sigmas 0,0.01,0.02,0.03]
//       [--seeds 3] [--iterations 500] [--pipelines 2] [--microbatches 12] [--profiles gpt3-175b+a100_sxm_bf16.csv,...]
//       [--allowance 1.0] [--max-allowance 0.0015] [--wide-allowance 2.0] [--wide-max-allowance 0.003]
//       [--samples 64] [--starts 6] [--schedule 1f1b]
//       [--profile /abs/path.csv --stages S --p-block W]  (instead of the published profiles)
//       [--chooser-profile /abs/path.csv]  (the plan chosen on this profile, e.g. the turnkey loop's own
//                                           measured one, then judged on --profile)
#include <fmt/format.h>

#include <ctime>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "perseus/profile/blocking_power.hpp"
#include "perseus/online/background_planner.hpp"
#include "perseus/online/noise_aware_choice.hpp"
#include "perseus/pipeline/schedule.hpp"
#include "perseus/profile/profile.hpp"

using namespace perseus;
using namespace perseus::online;

namespace {

struct Case {
  std::string profile;
  double p_block;
};

struct Args {
  std::string shared = PERSEUS_SHARED_DIR;
  std::vector<double> sigmas{0, 0.01, 0.02, 0.03};
  int seeds = 3;
  int iterations = 500;
  int pipelines = 2;
  int microbatches = 12;
  int stages = 8;
  std::string chooser_profile;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int baseline_rounds = 3;    // all-max rounds the variability is estimated from
  int round_iterations = 10;  // iterations per round
  NoiseAwareOptions options;  // --samples, --starts, --allowance, --max-allowance
  std::vector<Case> cases{{"gpt3-175b+a100_sxm_bf16.csv", kA100BlockingPowerW},
                          {"bloom+a100_sxm_bf16.csv", kA100BlockingPowerW},
                          {"gpt3-175b+a40_bf16.csv", kA40BlockingPowerW},
                          {"bloom+a40_bf16.csv", kA40BlockingPowerW}};
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--shared") a.shared = value;
    else if (key == "--sigmas") {
      a.sigmas.clear();
      for (const auto& s : split(value)) a.sigmas.push_back(std::stod(s));
    } else if (key == "--seeds") a.seeds = std::stoi(value);
    else if (key == "--iterations") a.iterations = std::stoi(value);
    else if (key == "--pipelines") a.pipelines = std::stoi(value);
    else if (key == "--microbatches") a.microbatches = std::stoi(value);
    else if (key == "--allowance") a.options.allowance = std::stod(value);
    else if (key == "--max-allowance") a.options.max_allowance = std::stod(value);
    else if (key == "--wide-allowance") a.options.wide_allowance = std::stod(value);
    else if (key == "--wide-max-allowance") a.options.wide_max_allowance = std::stod(value);
    else if (key == "--samples") a.options.samples = std::stoi(value);
    else if (key == "--starts") a.options.repair_starts = std::stoi(value);
    else if (key == "--schedule") {
      const auto kind = parse_schedule_kind(value);
      if (!kind || takes_virtual_stages(*kind) || *kind == ScheduleKind::zbv || *kind == ScheduleKind::dualpipev) {
        std::fprintf(stderr, "--schedule: 1f1b, gpipe or zb-h1 (the profiles have 8 stages of one chunk)\n");
        std::exit(2);
      }
      a.schedule = *kind;
    } else if (key == "--profile") {  // a profile of one's own (with --stages and --p-block)
      a.cases = {{value, a.cases.empty() ? 0.0 : a.cases.front().p_block}};
    } else if (key == "--chooser-profile") {
      a.chooser_profile = value;
    } else if (key == "--p-block") {
      for (auto& c : a.cases) c.p_block = std::stod(value);
    } else if (key == "--stages") {
      a.stages = std::stoi(value);
    } else if (key == "--profiles") {
      std::vector<Case> kept;
      for (const auto& name : split(value))
        for (const auto& c : a.cases)
          if (c.profile == name) kept.push_back(c);
      a.cases = kept;
    } else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      std::exit(2);
    }
  }
  return a;
}

// Seeds for (purpose, seed, round, pipeline, iteration): distinct streams from a few integers.
std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  return (a + 0x9e3779b97f4a7c15ULL) * 0xbf58476d1ce4e5b9ULL ^ (b + 1) * 0x94d049bb133111ebULL;
}

// Variability from noisy all-max rounds: each (stage, kind, pipeline, round) one sample set.
Variability measure(const Emulator& emulator, const PlanningOutput& plans, const Args& args, double sigma,
                    std::uint64_t seed) {
  const int S = emulator.config().num_stages;
  VariabilityEstimator estimator(S);
  const auto truth = Variability::uniform(S, sigma);
  const auto top = plans.frequencies(plans.candidates.size() - 1);
  for (int r = 0; r < args.baseline_rounds; ++r)
    for (int d = 0; d < args.pipelines; ++d) {
      std::vector<std::vector<double>> sets(static_cast<std::size_t>(S) * 2);
      for (int it = 0; it < args.round_iterations; ++it) {
        const auto run = emulator.run(top, emulator_noise(truth, mix(seed, mix(r, mix(d, it)))));
        for (int s = 0; s < S; ++s)
          for (const auto& unit : run.instructions[static_cast<std::size_t>(s)])
            sets[static_cast<std::size_t>(s) * kVariabilityClasses + variability_index(unit.instruction.kind)]
                .push_back(unit.duration);
      }
      for (int s = 0; s < S; ++s) {
        estimator.add(s, InstructionKind::forward, sets[static_cast<std::size_t>(s) * 2]);
        estimator.add(s, InstructionKind::backward, sets[static_cast<std::size_t>(s) * 2 + 1]);
      }
    }
  return estimator.estimate();
}

struct Truth {
  double time = 0, energy = 0;
};

// Mean iteration time and energy of the cluster (D pipelines, the slowest sets the pace).
Truth run_cluster(const Emulator& emulator, const std::vector<std::vector<int>>& plan, const Args& args, double sigma,
                  std::uint64_t seed) {
  const int S = emulator.config().num_stages;
  const double p_block = emulator.config().p_block;
  const auto noise = Variability::uniform(S, sigma);
  Truth t;
  for (int it = 0; it < args.iterations; ++it) {
    double slowest = 0, energy = 0;
    std::vector<EmulationResult> runs;
    for (int d = 0; d < args.pipelines; ++d) {
      runs.push_back(emulator.run(plan, emulator_noise(noise, mix(seed, mix(it, d)))));
      slowest = std::max(slowest, runs.back().iteration_time);
    }
    for (const auto& r : runs) energy += r.energy + S * (slowest - r.iteration_time) * p_block;
    t.time += slowest / args.iterations;
    t.energy += energy / args.iterations;
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  std::printf("%-28s %5s %4s %6s %7s %6s %8s %8s %7s %8s %8s %7s %6s %8s  %s\n", "profile", "sigma", "seed", "points",
              "sigma^", "allow", "slowdown", "saving", "share", "nf-slow", "nf-save", "nf-shr", "ideal", "cpu",
              "choice");
  for (const auto& c : args.cases) {
    const auto path = std::filesystem::path(c.profile).is_absolute()
                          ? std::filesystem::path(c.profile)
                          : std::filesystem::path(args.shared) / "data/sosp24/stage_profile" / c.profile;
    PlanningInput input;
    input.profile = read_profile(path);
    input.config.num_stages = args.stages;
    input.config.num_microbatches = args.microbatches;
    input.config.schedule = args.schedule;
    input.config.p_block = c.p_block;
    input.config.unit_time = automatic_unit_time(input.profile);
    const PlanningOutput plans = plan_online(input);
    const Emulator& emulator = *plans.emulator;
    const auto top = all_max(plans);
    const auto ideal_plan = choose_plan(plans, top.time);
    const double ideal = 1 - ideal_plan.energy / top.energy;
    std::optional<PlanningOutput> cplans;
    if (!args.chooser_profile.empty()) {
      PlanningInput ci = input;
      ci.profile = read_profile(args.chooser_profile);
      cplans = plan_online(ci);
    }
    const PlanningOutput& chooser = cplans ? *cplans : plans;
    for (double sigma : args.sigmas) {
      for (int seed = 1; seed <= args.seeds; ++seed) {
        const auto v = measure(emulator, plans, args, sigma, mix(7, seed));
        NoiseAwareOptions options = args.options;
        options.pipelines = args.pipelines;
        options.seed = mix(11, seed);
        const std::clock_t started = std::clock();  // CPU time: the machine may be shared
        const auto allowed_choice = choose_within_allowance(chooser, 1.0, v, options);
        const double allowed = allowed_choice.deadline / expected_all_max_time(chooser, v, options) - 1;
        const auto& chosen = allowed_choice.plan;
        const double seconds = static_cast<double>(std::clock() - started) / CLOCKS_PER_SEC;
        const std::uint64_t truth_seed = mix(13, seed);  // neither the chooser's nor the estimate's draws
        const auto base = run_cluster(emulator, top.frequencies, args, sigma, truth_seed);
        const auto ours = run_cluster(emulator, chosen.frequencies, args, sigma, truth_seed);
        const auto nf = run_cluster(emulator, ideal_plan.frequencies, args, sigma, truth_seed);
        const double saving = 1 - ours.energy / base.energy, nf_saving = 1 - nf.energy / base.energy;
        std::printf(
            "%-28s %5.3f %4d %6zu %7.4f %5.2f%% %7.2f%% %7.2f%% %6.0f%% %7.2f%% %7.2f%% %6.0f%% %5.2f%% %7.3fs  %s\n",
            c.profile.c_str(), sigma, seed, plans.record.points.size(), v.max(), 100 * allowed,
            100 * (ours.time / base.time - 1), 100 * saving, 100 * saving / ideal, 100 * (nf.time / base.time - 1),
            100 * nf_saving, 100 * nf_saving / ideal, 100 * ideal, seconds, chosen.label().c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
