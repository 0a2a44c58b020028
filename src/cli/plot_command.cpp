// `perseus plot timeline|frontier`: SVG pictures of one plan's pipeline and of frontiers with
// the baselines marked.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "perseus/cli/arguments.hpp"
#include "perseus/cli/commands.hpp"
#include "perseus/cli/plan_source.hpp"
#include "perseus/emulate/judge.hpp"
#include "perseus/plot/svg.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/util/error.hpp"

namespace perseus::cli {

namespace {

struct TimelineArgs {
  PipelineArgs pipeline;
  PlanSourceArgs source;
  std::string color = "clock";
  std::string out;
};

struct FrontierArgs {
  std::vector<std::string> dirs;
  std::vector<std::string> names;
  std::vector<std::string> baselines{"all-max", "envpipe-balanced", "zeus-global"};
  bool no_baselines = false;
  bool model = false;
  Selector mark;
  BaselineOptions options;
  std::string title;
  std::string out;
};

int run_timeline(const TimelineArgs& args) {
  const auto source = load_source(args.source);
  const auto pipeline = resolve_pipeline(args.pipeline, source.record ? &*source.record : nullptr,
                                         source.plan_file ? &*source.plan_file : nullptr);
  const Emulator emulator(pipeline.profile, pipeline.config);
  const auto plan = resolve_plan(args.source, source, pipeline, emulator);
  const auto run = emulator.run(plan.frequencies);
  TimelineOptions options;
  options.color = args.color == "power" ? TimelineColor::power : TimelineColor::clock;
  options.title = fmt::format("{}: {:.4f} s, {:.1f} J", plan.label, run.iteration_time, run.energy);
  write_file_atomic(args.out, timeline_svg(run, options));
  std::printf("wrote %s\n", args.out.c_str());
  return kExitOk;
}

int run_frontier_plot(const FrontierArgs& args) {
  if (!args.names.empty() && args.names.size() != args.dirs.size()) {
    throw Error("--names needs one name per frontier directory", ErrorKind::bad_setting);
  }
  std::vector<FrontierSeries> series;
  std::vector<PlotMarker> markers;
  for (std::size_t k = 0; k < args.dirs.size(); ++k) {
    const auto record = read_frontier_record(args.dirs[k]);
    FrontierSeries s;
    s.name = args.names.empty() ? std::filesystem::path(args.dirs[k]).filename().string() : args.names[k];
    if (s.name.empty()) s.name = args.dirs[k];
    const bool first = k == 0;
    const bool need_emulator = !args.model || (first && !args.no_baselines);
    std::optional<Pipeline> pipeline;
    std::optional<Emulator> emulator;
    if (need_emulator) {
      PipelineArgs none;
      pipeline = resolve_pipeline(none, &record, nullptr);
      emulator.emplace(pipeline->profile, pipeline->config);
    }
    if (args.model) {
      for (const auto& p : record.points) s.points.emplace_back(p.time, p.energy);
    } else {
      for (const auto& p : judge_frontier(record, *emulator)) s.points.emplace_back(p.emulated_time, p.emulated_energy);
    }
    if (first && has_selection(args.mark)) {
      const std::size_t i = select(record, args.mark);
      markers.push_back({fmt::format("chosen (point {})", i), s.points[i].first, s.points[i].second});
    }
    if (first && !args.no_baselines) {
      for (const auto& name : args.baselines) {
        const auto result = run_baseline(name, pipeline->profile, *emulator, args.options);
        markers.push_back({name, result.plan.time, result.plan.energy});
      }
    }
    series.push_back(std::move(s));
  }
  const std::string title = !args.title.empty() ? args.title
                            : args.model        ? "time-energy frontier (planner's model)"
                                                : "time-energy frontier (emulated on the profile)";
  write_file_atomic(args.out, frontier_svg(series, markers, title));
  std::printf("wrote %s\n", args.out.c_str());
  return kExitOk;
}

}  // namespace

Runner add_plot_command(CLI::App& app) {
  auto* plot = app.add_subcommand("plot", "Draw SVG pictures: a plan's pipeline timeline, or frontiers with baselines");
  plot->require_subcommand(1);

  auto timeline = std::make_shared<TimelineArgs>();
  auto* timeline_cmd = plot->add_subcommand("timeline", "One plan as a pipeline timeline (stages as rows)");
  add_pipeline_options(timeline_cmd, timeline->pipeline, false);
  add_plan_source_options(timeline_cmd, timeline->source);
  timeline_cmd->add_option("--color", timeline->color, "Colour boxes by clock or average power")
      ->capture_default_str()
      ->check(one_of({"clock", "power"}));
  timeline_cmd->add_option("--out", timeline->out, "SVG file to write")->required();

  auto frontier = std::make_shared<FrontierArgs>();
  auto* frontier_cmd =
      plot->add_subcommand("frontier", "Frontiers (time vs energy) with baselines and a chosen plan marked");
  frontier_cmd->add_option("dirs", frontier->dirs, "One or more optimize output directories")->required();
  frontier_cmd->add_option("--names", frontier->names, "Legend names, comma-separated, one per directory")
      ->delimiter(',');
  frontier_cmd
      ->add_option("--baselines", frontier->baselines, "Baselines to mark (planned on the first frontier's profile)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(one_of(baseline_names()));
  frontier_cmd->add_flag("--no-baselines", frontier->no_baselines, "Mark no baselines");
  frontier_cmd->add_flag("--model", frontier->model,
                         "Plot the planner's predicted energies instead of emulating each point");
  add_selector(frontier_cmd, frontier->mark);
  add_zeus_options(frontier_cmd, frontier->options.zeus);
  frontier_cmd->add_option("--title", frontier->title, "Chart title");
  frontier_cmd->add_option("--out", frontier->out, "SVG file to write")->required();

  return [timeline, timeline_cmd, frontier] {
    if (timeline_cmd->parsed()) return run_timeline(*timeline);
    return run_frontier_plot(*frontier);
  };
}

}  // namespace perseus::cli
