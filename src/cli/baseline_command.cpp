// `perseus baseline`: plan with a competitor (all-max, EnvPipe, Zeus-style) and write the plan in
// the same formats as the planner's, so the emulator, the exporter and the server can use it.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "perseus/cli/arguments.hpp"
#include "perseus/cli/commands.hpp"
#include "perseus/cli/plan_source.hpp"
#include "perseus/plan/plan_files.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/util/error.hpp"

namespace perseus::cli {

namespace {

struct BaselineArgs {
  std::string name;
  PipelineArgs pipeline;
  BaselineOptions options;
  std::string out;
  bool quiet = false;
};

int run_baseline_command(const BaselineArgs& args) {
  const auto pipeline = resolve_pipeline(args.pipeline, nullptr, nullptr);
  const Emulator emulator(pipeline.profile, pipeline.config);
  const auto result = run_baseline(args.name, pipeline.profile, emulator, args.options);
  if (!args.out.empty()) {
    const auto ext = std::filesystem::path(args.out).extension();
    if (ext == ".json") {
      write_file_atomic(args.out, plan_to_json(result.plan));
    } else if (ext == ".py") {
      write_file_atomic(args.out, plan_to_python(result.plan, 0));
    } else {
      throw Error(fmt::format("--out '{}' must end in .json or .py", args.out), ErrorKind::bad_setting);
    }
  }
  if (!args.quiet) {
    std::printf("%s", fmt::format("{}: iteration time {:.6f} s, energy {:.2f} J (emulated)\n  {}\n", args.name,
                                  result.plan.time, result.plan.energy, result.note)
                          .c_str());
    if (args.out.empty()) std::printf("%s", plan_to_text(result.plan).c_str());
    else std::printf("  wrote %s\n", args.out.c_str());
  }
  return kExitOk;
}

}  // namespace

Runner add_baseline_command(CLI::App& app) {
  auto args = std::make_shared<BaselineArgs>();
  auto* cmd = app.add_subcommand("baseline", "Plan with a baseline (all-max, EnvPipe, Zeus-style) and write the plan");
  cmd->add_option("name", args->name, "Baseline")->required()->check(one_of(baseline_names()));
  add_pipeline_options(cmd, args->pipeline, true);
  add_zeus_options(cmd, args->options.zeus);
  cmd->add_option("--out", args->out, "Write the plan (.json or the artifact's .py format)");
  cmd->add_flag("--quiet,-q", args->quiet, "Print nothing");
  return [args] { return run_baseline_command(*args); };
}

}  // namespace perseus::cli
