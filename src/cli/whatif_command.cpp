// `perseus whatif`: the large-scale straggler emulation. Plans the frontier (or reads one),
// runs every frontier plan and every baseline through the emulator, and reports each method's
// cluster energy and saving against all-max for a list of straggler slowdowns.
#include <fmt/format.h>

#include <cstdio>

#include "perseus/cli/arguments.hpp"
#include "perseus/cli/commands.hpp"
#include "perseus/cli/plan_source.hpp"
#include "perseus/emulate/deadline_fit.hpp"
#include "perseus/emulate/judge.hpp"
#include "perseus/emulate/straggler.hpp"
#include "perseus/solver/planning.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/util/error.hpp"

namespace perseus::cli {

namespace {

struct WhatIfArgs {
  PipelineArgs pipeline;
  std::string frontier_dir;
  std::string cost_model = "auto";
  int global_batch = 1536;
  int pipelines = 0;
  std::vector<double> slowdowns{1.0, 1.05, 1.1, 1.2, 1.5};
  std::vector<std::string> baselines{"envpipe-balanced", "envpipe-greedy", "zeus-global", "zeus-stage"};
  BaselineOptions options;
  std::string convention = "perseus";
  std::string out;
  bool quiet = false;
};

FrontierRecord planned_record(const Pipeline& pipeline, const std::string& cost_model, const std::string& profile) {
  PlanningConfig config;
  config.shape() = pipeline.config.shape();
  config.unit_time = pipeline.unit_time;
  config.p_block = pipeline.config.p_block;
  config.cost_model = *parse_cost_model_kind(cost_model);  // CLI checked the name
  const auto planned = plan_frontier(pipeline.profile, config);
  return make_frontier_record(planned.problem, planned.frontier, {profile, cost_model});
}

int run_whatif(const WhatIfArgs& args) {
  std::optional<FrontierRecord> record;
  if (!args.frontier_dir.empty()) record = read_frontier_record(args.frontier_dir);
  const auto pipeline = resolve_pipeline(args.pipeline, record ? &*record : nullptr, nullptr);
  const int M = pipeline.config.num_microbatches;
  int pipelines = args.pipelines;
  if (pipelines == 0) {
    if (args.global_batch % M != 0) {
      throw Error(
          fmt::format("--global-batch {} is not a multiple of {} microbatches; give --pipelines", args.global_batch, M),
          ErrorKind::bad_setting);
    }
    pipelines = args.global_batch / M;
  }
  if (!record) record = planned_record(pipeline, args.cost_model, pipeline.profile.source);
  const Emulator emulator(pipeline.profile, pipeline.config);

  const auto all_max = run_baseline("all-max", pipeline.profile, emulator, args.options);
  std::vector<std::pair<std::string, PlanCost>> fixed;
  std::vector<std::string> notes;
  for (const auto& name : args.baselines) {
    if (name == "all-max") continue;
    const auto result = run_baseline(name, pipeline.profile, emulator, args.options);
    fixed.emplace_back(name, PlanCost{result.plan.time, result.plan.energy});
    notes.push_back(
        fmt::format("{}: {:.4f} s, {:.1f} J ({})", name, result.plan.time, result.plan.energy, result.note));
  }
  const bool paper = args.convention == "paper";
  std::vector<PlanCost> frontier;
  if (paper) {  // the planner's predictions, as the evaluation notebook reports them
    for (const auto& p : record->points) frontier.push_back({p.time, p.energy});
  } else {
    for (const auto& p : judge_frontier(*record, emulator)) frontier.push_back({p.emulated_time, p.emulated_energy});
  }

  // The planner's own pick for each deadline (by its model's time), fitted to the deadline on
  // real times: what `perseus serve` would deploy.
  std::vector<std::vector<PlanCost>> fitted;
  for (double factor : args.slowdowns) {
    fitted.emplace_back();
    if (record->points.empty() || paper) continue;
    const double deadline = factor * all_max.plan.time;
    const auto pick = cheapest_within(*record, deadline).value_or(record->points.size() - 1);
    if (const auto fit = fit_to_deadline(emulator, plan_at(*record, pick).frequencies, deadline)) {
      fitted.back().push_back({fit->time, fit->energy});
    }
  }
  StragglerConfig config{pipeline.config.num_stages, pipeline.config.p_block, pipelines, args.slowdowns};
  if (paper) {
    config.convention = StragglerConvention::paper;
    if (!record->points.empty()) config.reference_time = record->points.back().time;
  }
  const auto rows = straggler_whatif({all_max.plan.time, all_max.plan.energy}, fixed, frontier, config, fitted);
  if (!args.out.empty()) write_file_atomic(args.out, straggler_csv(rows));
  if (!args.quiet) {
    std::string text = fmt::format(
        "{}: {} stages, {} microbatches, {} pipelines, P_block {} W, {} frontier points{}\n"
        "all-max: {:.4f} s, {:.1f} J per pipeline\n",
        pipeline.profile.source, pipeline.config.num_stages, M, pipelines, pipeline.config.p_block, frontier.size(),
        paper ? fmt::format(" (paper's convention: T = the planner's fastest, {:.4f} s)", config.reference_time) : "",
        all_max.plan.time, all_max.plan.energy);
    for (const auto& n : notes) text += n + "\n";
    text += "\n" + straggler_table(rows);
    if (!args.out.empty()) text += fmt::format("wrote {}\n", args.out);
    std::printf("%s", text.c_str());
  }
  return kExitOk;
}

}  // namespace

Runner add_whatif_command(CLI::App& app) {
  auto args = std::make_shared<WhatIfArgs>();
  auto* cmd = app.add_subcommand(
      "whatif", "Straggler what-if: energy of all-max, baselines and perseus over D data-parallel pipelines");
  add_pipeline_options(cmd, args->pipeline, false);
  cmd->add_option("--frontier", args->frontier_dir, "Use this optimize output instead of planning in-process");
  cmd->add_option("--cost-model", args->cost_model,
                  "Cost model when planning in-process: auto, exp or pwl (as optimize)")
      ->capture_default_str()
      ->check(one_of({"auto", "exp", "pwl"}));
  cmd->add_option("--global-batch", args->global_batch,
                  "Microbatches per global batch; D = global batch / microbatches")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--pipelines", args->pipelines, "Data-parallel pipelines D (overrides --global-batch)")
      ->check(positive());
  cmd->add_option("--slowdowns", args->slowdowns, "Straggler slowdowns T'/T, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(between(1.0, 1e6));
  cmd->add_option("--baselines", args->baselines, "Baselines to compare, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(one_of(baseline_names()));
  add_zeus_options(cmd, args->options.zeus);
  cmd->add_option("--convention", args->convention,
                  "perseus: T is all-max's emulated time, the straggler runs all-max stretched, perseus's pick counts "
                  "the blocking until T', energies emulated; paper: the Perseus evaluation notebook's (T is the "
                  "planner's fastest time, each method's straggler runs its own plan stretched, the pick ignores the "
                  "blocking, frontier energies are the planner's predictions)")
      ->capture_default_str()
      ->check(one_of({"perseus", "paper"}));
  cmd->add_option("--out", args->out, "Write the rows as CSV");
  cmd->add_flag("--quiet,-q", args->quiet, "Print nothing");
  return [args] { return run_whatif(*args); };
}

}  // namespace perseus::cli
