// `perseus plans`: pick, show, export and read back plans from an optimize output directory.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "perseus/cli/arguments.hpp"
#include "perseus/cli/commands.hpp"
#include "perseus/cli/plan_source.hpp"
#include "perseus/plan/plan_files.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/util/error.hpp"

namespace perseus::cli {

namespace {

// Times and energies with 10 significant digits: the emulated ones within 1e-9.
void print_plan(const Plan& plan, const FrontierRecord& record) {
  const std::string planner = fmt::format("{:.10g} s quantized, {:.10g} J", plan.time, plan.energy);
  std::printf("%s\n",
              (plan.emulated_time && plan.emulated_energy
                   ? fmt::format("plan {} of {}: iteration time {:.10g} s, energy {:.10g} J on the profile (the "
                                 "planner's: {})",
                                 *plan.index, record.points.size(), *plan.emulated_time, *plan.emulated_energy, planner)
                   : fmt::format("plan {} of {}: the planner's {} (the frontier was written without emulated times)",
                                 *plan.index, record.points.size(), planner))
                  .c_str());
  std::printf("%s", plan_to_text(plan).c_str());
}

struct ShowArgs {
  std::string dir;
  Selector selector;
  bool json = false;
};

struct ExportArgs {
  std::string dir, out, format = "both";
  Selector selector;
  std::size_t every = 0;
};

struct ReadArgs {
  std::string file;
};

int run_show(const ShowArgs& args) {
  const auto record = read_frontier_record(args.dir);
  const Plan plan = plan_at(record, select(record, args.selector));
  if (args.json) std::printf("%s", plan_to_json(plan).c_str());
  else print_plan(plan, record);
  return kExitOk;
}

int run_export(const ExportArgs& args) {
  const auto record = read_frontier_record(args.dir);
  if (record.points.empty()) throw Error("the frontier has no points", ErrorKind::bad_input);
  std::vector<std::size_t> indices;
  if (args.every > 0) {
    if (has_selection(args.selector))
      throw Error("--every cannot be combined with --index/--time/--slowdown", ErrorKind::bad_setting);
    // Points are one unit time apart, so every N-th point is an equal-time sample; keep the fastest.
    for (std::size_t i = 0; i < record.points.size(); i += args.every) indices.push_back(i);
    if (indices.back() != record.points.size() - 1) indices.push_back(record.points.size() - 1);
  } else {
    indices.push_back(select(record, args.selector));
  }
  std::error_code ec;
  std::filesystem::create_directories(args.out, ec);
  if (ec || !std::filesystem::is_directory(args.out)) {
    throw Error(fmt::format("cannot create output directory '{}'", args.out), ErrorKind::cannot_write);
  }
  const bool json = args.format == "json" || args.format == "both",
             python = args.format == "py" || args.format == "both";
  const bool zeus = args.format == "zeus";
  Plan plan = plan_at(record, indices.front());
  for (std::size_t index : indices) {
    advance_plan(record, plan, index);
    const auto base = std::filesystem::path(args.out) / fmt::format("freqs_pipeline_{:05d}", index);
    if (json) write_file_atomic(base.string() + ".json", plan_to_json(plan));
    if (python) write_file_atomic(base.string() + ".py", plan_to_python(plan, index));
    if (zeus) write_file_atomic(base.string() + ".py", plan_to_zeus(plan, index));
  }
  std::fprintf(stderr, "perseus: exported %zu plan(s) to %s\n", indices.size(), args.out.c_str());
  return kExitOk;
}

int run_read(const ReadArgs& args) {
  const PlanFile plan = read_plan_file(args.file);
  nlohmann::json out = {
      {"format", plan.instructions.empty()
                     ? (std::filesystem::path(args.file).extension() == ".json" ? "json" : "perseus-py")
                     : "zeus"},
      {"frequencies", plan.frequencies}};
  if (!plan.instructions.empty()) out["instructions"] = plan.instructions;
  if (plan.cost_change) out["cost_change"] = *plan.cost_change;
  if (plan.total_cost) out["total_cost"] = *plan.total_cost;
  if (plan.refined_cost) out["refined_cost"] = *plan.refined_cost;
  if (plan.time) out["time"] = *plan.time;
  if (plan.energy) out["energy"] = *plan.energy;
  std::printf("%s\n", out.dump(1).c_str());
  return kExitOk;
}

}  // namespace

Runner add_plans_command(CLI::App& app) {
  auto* plans = app.add_subcommand("plans", "Show, export and read frequency plans");
  plans->require_subcommand(1);

  auto show = std::make_shared<ShowArgs>();
  auto* show_cmd =
      plans->add_subcommand("show", "Print one plan of an optimize output directory (default: the fastest)");
  show_cmd->add_option("dir", show->dir, "Directory written by perseus optimize")->required();
  add_selector(show_cmd, show->selector);
  show_cmd->add_flag("--json", show->json, "Print the plan as JSON");

  auto exp = std::make_shared<ExportArgs>();
  auto* export_cmd =
      plans->add_subcommand("export", "Write plans as JSON, the artifact's or Zeus's freqs_pipeline_%05d.py files");
  export_cmd->add_option("dir", exp->dir, "Directory written by perseus optimize")->required();
  export_cmd->add_option("--out", exp->out, "Directory to write the plan files into")->required();
  export_cmd
      ->add_option("--format", exp->format,
                   "json, py (the Perseus artifact's), both, or zeus (Zeus's (instruction, clock) tuples)")
      ->capture_default_str()
      ->check(one_of({"json", "py", "both", "zeus"}));
  export_cmd->add_option("--every", exp->every, "Export every N-th point (equal time spacing) plus the fastest")
      ->check(positive());
  add_selector(export_cmd, exp->selector);

  auto read = std::make_shared<ReadArgs>();
  auto* read_cmd = plans->add_subcommand(
      "read", "Parse a plan file (.json, or a .py from the Perseus artifact or Zeus) and print it as JSON");
  read_cmd->add_option("file", read->file, "Plan file")->required();

  return [show, show_cmd, exp, export_cmd, read] {
    if (show_cmd->parsed()) return run_show(*show);
    if (export_cmd->parsed()) return run_export(*exp);
    return run_read(*read);
  };
}

}  // namespace perseus::cli
