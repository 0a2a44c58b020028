#pragma once
// Command-line pieces shared by the commands that run plans (emulate, baseline, whatif, plot):
// the pipeline options (profile, stages, microbatches, P_block, schedule) and where a plan comes
// from (a plan file, a frontier point, or a baseline).
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "perseus/baselines/registry.hpp"
#include "perseus/emulate/emulator.hpp"
#include "perseus/pipeline/shape.hpp"
#include "perseus/plan/frontier_record.hpp"
#include "perseus/plan/plan_files.hpp"

namespace perseus::cli {

// How a frontier point is chosen: at most one of these.
struct Selector {
  std::optional<std::size_t> index;
  std::optional<double> time;
  std::optional<double> slowdown;
  bool min_energy = false;  // the cheapest plan of all (the energy-optimal end)
};
void add_selector(CLI::App* cmd, Selector& selector);
bool has_selection(const Selector& selector);
// The selected point; the fastest when nothing is selected.
std::size_t select(const FrontierRecord& record, const Selector& selector);

struct PipelineArgs {
  std::string profile;
  // The shape as the command line gives it. What it leaves out comes from the frontier or the plan
  // file: stages or microbatches left 0, and the schedule or virtual stages when not given.
  PipelineShape shape;
  bool schedule_given = false, virtual_stages_given = false;
  bool envpipe = false;  // --schedule envpipe: 1f1b with EnvPipe's extra forwards
  std::optional<double> p_block, unit_time;
  int envpipe_memory_cap = -1;  // extra forwards that fit in memory; -1: no cap
  bool quantize = false;
  bool recompute = false;       // 1F1B with activation recomputation (with_recomputation)
  double clock_latency_ms = 0;  // the emulator's EmulatorConfig::clock_latency, in milliseconds
};
// `profile_required`: false where a frontier directory can name the profile.
void add_pipeline_options(CLI::App* cmd, PipelineArgs& args, bool profile_required);

// The pipeline to emulate, with gaps filled from `record` (plans.json names the profile, stages,
// microbatches, P_block, unit time and schedule) or from a JSON plan file (schedule,
// microbatches), and checked against them.
struct Pipeline {
  Profile profile;
  EmulatorConfig config;
  double unit_time = 0.001;
};
Pipeline resolve_pipeline(const PipelineArgs& args, const FrontierRecord* record, const PlanFile* plan_file);

struct PlanSourceArgs {
  std::string plan_file;
  std::string frontier_dir;
  std::string baseline;
  Selector selector;
  BaselineOptions baseline_options;
};
void add_plan_source_options(CLI::App* cmd, PlanSourceArgs& args);
void add_zeus_options(CLI::App* cmd, ZeusOptions& options);

// The chosen plan with its label. The frontier record, when one was given, is loaded first so
// that the pipeline can be filled from it.
struct ResolvedPlan {
  std::string label;
  std::vector<std::vector<int>> frequencies;
  std::optional<double> model_time, model_energy;  // the planner's prediction, for frontier plans
  std::string note;
};
struct LoadedSource {
  std::optional<FrontierRecord> record;
  std::optional<PlanFile> plan_file;
};
// Checks that exactly one source is given and reads its files.
LoadedSource load_source(const PlanSourceArgs& args);
ResolvedPlan resolve_plan(const PlanSourceArgs& args, const LoadedSource& source, const Pipeline& pipeline,
                          const Emulator& emulator);

}  // namespace perseus::cli
