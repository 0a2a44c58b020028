// `perseus emulate`: run one plan (a frontier point, a plan file or a baseline) on the modeled
// pipeline of a profile, or judge every point of a frontier.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "perseus/cli/arguments.hpp"
#include "perseus/cli/commands.hpp"
#include "perseus/cli/plan_source.hpp"
#include "perseus/emulate/judge.hpp"
#include "perseus/plot/svg.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/util/error.hpp"

namespace perseus::cli {

namespace {

struct EmulateArgs {
  PipelineArgs pipeline;
  PlanSourceArgs source;
  double noise = 0;
  int repeat = 1;
  std::uint64_t seed = 1;
  bool json = false;
  bool all_points = false;
  std::string out;
  std::string timeline;
  std::string color = "clock";
};

struct Spread {
  double mean = 0, stddev = 0, min = 0, max = 0;
};

Spread spread_of(const std::vector<double>& v) {
  Spread s;
  s.min = s.max = v.front();
  for (double x : v) {
    s.mean += x;
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
  }
  s.mean /= v.size();
  for (double x : v) s.stddev += (x - s.mean) * (x - s.mean);
  s.stddev = v.size() > 1 ? std::sqrt(s.stddev / (v.size() - 1)) : 0;
  return s;
}

nlohmann::json spread_json(const Spread& s) {
  return {{"mean", s.mean}, {"stddev", s.stddev}, {"min", s.min}, {"max", s.max}};
}

int run_judge(const EmulateArgs& args, const LoadedSource& source, const Emulator& emulator) {
  if (!source.record) throw Error("--all-points judges a --frontier", ErrorKind::bad_setting);
  const auto judged = judge_frontier(*source.record, emulator);
  const auto summary = summarize(judged);
  if (!args.out.empty()) write_file_atomic(args.out, judged_csv(judged));
  if (args.json) {
    std::printf("%s\n", nlohmann::json{{"points", summary.points},
                                       {"max_abs_energy_error", summary.max_abs_energy_error},
                                       {"mean_abs_energy_error", summary.mean_abs_energy_error},
                                       {"max_abs_time_error", summary.max_abs_time_error}}
                            .dump(1)
                            .c_str());
  } else {
    std::printf("%s",
                fmt::format("judged {} frontier points{}\n"
                            "  model vs emulated energy: max |error| {:.3e}, mean |error| {:.3e}\n"
                            "  model vs emulated time:   max |error| {:.3e}\n",
                            summary.points, emulator.config().quantum > 0 ? " (quantized times)" : "",
                            summary.max_abs_energy_error, summary.mean_abs_energy_error, summary.max_abs_time_error)
                    .c_str());
    if (!args.out.empty()) std::printf("  wrote %s\n", args.out.c_str());
  }
  return kExitOk;
}

int run_emulate(const EmulateArgs& args) {
  const auto source = load_source(args.source);
  const auto pipeline = resolve_pipeline(args.pipeline, source.record ? &*source.record : nullptr,
                                         source.plan_file ? &*source.plan_file : nullptr);
  const Emulator emulator(pipeline.profile, pipeline.config);
  if (args.all_points) return run_judge(args, source, emulator);
  if (!args.out.empty()) throw Error("--out is for --all-points; use --json for one plan", ErrorKind::bad_setting);

  const auto plan = resolve_plan(args.source, source, pipeline, emulator);
  const auto result = emulator.run(plan.frequencies);
  std::vector<double> times, energies;
  if (args.noise > 0) {
    for (int r = 0; r < args.repeat; ++r) {
      const auto noisy =
          emulator.run(plan.frequencies, EmulatorNoise{args.noise, args.seed + static_cast<std::uint64_t>(r)});
      times.push_back(noisy.iteration_time);
      energies.push_back(noisy.energy);
    }
  }
  if (!args.timeline.empty()) {
    TimelineOptions options;
    options.color = args.color == "power" ? TimelineColor::power : TimelineColor::clock;
    options.title = fmt::format("{}: {:.4f} s, {:.1f} J", plan.label, result.iteration_time, result.energy);
    write_file_atomic(args.timeline, timeline_svg(result, options));
  }

  if (args.json) {
    nlohmann::json out = {{"plan", plan.label}, {"iteration_time", result.iteration_time}, {"energy", result.energy}};
    if (plan.model_time) out["model_time"] = *plan.model_time;
    if (plan.model_energy) out["model_energy"] = *plan.model_energy;
    if (!plan.note.empty()) out["note"] = plan.note;
    nlohmann::json stages = nlohmann::json::array();
    for (const auto& s : result.stages) {
      stages.push_back({{"busy_time", s.busy_time},
                        {"idle_time", s.idle_time},
                        {"compute_energy", s.compute_energy},
                        {"idle_energy", s.idle_energy}});
    }
    out["stages"] = stages;
    if (!times.empty()) {
      out["noise"] = {{"sigma", args.noise},
                      {"repeat", args.repeat},
                      {"seed", args.seed},
                      {"iteration_time", spread_json(spread_of(times))},
                      {"energy", spread_json(spread_of(energies))}};
    }
    std::printf("%s\n", out.dump(1).c_str());
    return kExitOk;
  }
  std::string text = fmt::format("plan: {}\n", plan.label);
  if (!plan.note.empty()) text += fmt::format("  {}\n", plan.note);
  if (plan.model_time && plan.model_energy) {
    text += fmt::format("  planner's prediction: {:.6f} s, {:.2f} J\n", *plan.model_time, *plan.model_energy);
  }
  text += fmt::format("iteration time {:.6f} s, energy {:.2f} J{}\n", result.iteration_time, result.energy,
                      pipeline.config.quantum > 0 ? " (quantized times)" : "");
  text +=
      fmt::format("{:>6} {:>11} {:>11} {:>13} {:>11}\n", "stage", "busy (s)", "idle (s)", "compute (J)", "idle (J)");
  for (std::size_t s = 0; s < result.stages.size(); ++s) {
    const auto& st = result.stages[s];
    text += fmt::format("{:>6} {:>11.6f} {:>11.6f} {:>13.2f} {:>11.2f}\n", s, st.busy_time, st.idle_time,
                        st.compute_energy, st.idle_energy);
  }
  if (!times.empty()) {
    const auto t = spread_of(times), e = spread_of(energies);
    text += fmt::format(
        "noise sigma {} over {} runs (seed {}):\n"
        "  time   mean {:.6f} s, stddev {:.6f}, min {:.6f}, max {:.6f}\n"
        "  energy mean {:.2f} J, stddev {:.2f}, min {:.2f}, max {:.2f}\n",
        args.noise, args.repeat, args.seed, t.mean, t.stddev, t.min, t.max, e.mean, e.stddev, e.min, e.max);
  }
  if (!args.timeline.empty()) text += fmt::format("wrote {}\n", args.timeline);
  std::printf("%s", text.c_str());
  return kExitOk;
}

}  // namespace

Runner add_emulate_command(CLI::App& app) {
  auto args = std::make_shared<EmulateArgs>();
  auto* cmd = app.add_subcommand(
      "emulate", "Run a plan on the modeled pipeline of a profile: iteration time, energy, per-stage busy/idle");
  add_pipeline_options(cmd, args->pipeline, false);
  add_plan_source_options(cmd, args->source);
  cmd->add_option("--noise", args->noise, "Per-instruction log-normal noise sigma on time and energy (0: none)")
      ->check(between(0.0, 1.0));
  cmd->add_option("--repeat", args->repeat, "Noisy runs to report mean and spread over")
      ->capture_default_str()
      ->check(between(1, 1000000));
  cmd->add_option("--seed", args->seed, "Seed of the first noisy run (run r uses seed + r)")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_flag("--all-points", args->all_points, "Judge every --frontier point: model-predicted vs emulated energy");
  cmd->add_option("--out", args->out, "With --all-points: write the per-point CSV here");
  cmd->add_option("--timeline", args->timeline, "Also draw the run as an SVG timeline into this file");
  cmd->add_option("--color", args->color, "Timeline colour: clock or power")
      ->capture_default_str()
      ->check(one_of({"clock", "power"}));
  return [args] { return run_emulate(*args); };
}

}  // namespace perseus::cli
