#include "perseus/cli/plan_source.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "perseus/baselines/envpipe.hpp"
#include "perseus/cli/arguments.hpp"
#include "perseus/pipeline/schedule.hpp"
#include "perseus/util/error.hpp"

namespace perseus::cli {

void add_selector(CLI::App* cmd, Selector& s) {
  auto* index = cmd->add_option("--index", s.index, "Frontier point (0 = slowest)");
  auto* time = cmd->add_option("--time", s.time, "Cheapest plan whose iteration time <= T seconds")->check(positive());
  auto* slow =
      cmd->add_option("--slowdown", s.slowdown, "Cheapest plan within this factor of the fastest time (e.g. 1.05)")
          ->check(between(1.0, 1e6));
  auto* cheapest = cmd->add_flag("--min-energy", s.min_energy, "The cheapest plan of all, whatever its time");
  index->excludes(time)->excludes(slow)->excludes(cheapest);
  time->excludes(slow)->excludes(cheapest);
  slow->excludes(cheapest);
}

bool has_selection(const Selector& s) { return s.index || s.time || s.slowdown || s.min_energy; }

std::size_t select(const FrontierRecord& record, const Selector& s) {
  if (record.points.empty()) throw Error("the frontier has no points", ErrorKind::bad_input);
  if (s.index) {
    if (*s.index >= record.points.size()) {
      throw Error(fmt::format("--index {} is out of range: the frontier has {} points", *s.index, record.points.size()),
                  ErrorKind::bad_setting);
    }
    return *s.index;
  }
  if (s.min_energy) return cheapest_point(record);
  // Times are the emulated ones where the record has them: what the plans take on the profile.
  const double fastest = record.points[fastest_point(record)].shown_time();
  double deadline = fastest;  // default: the fastest plan
  if (s.time) deadline = *s.time;
  if (s.slowdown) deadline = fastest * *s.slowdown;
  const auto found = cheapest_within(record, deadline);
  if (!found) {
    throw Error(fmt::format("no plan finishes within {:.10g} s: the fastest takes {:.10g} s", deadline, fastest),
                ErrorKind::bad_setting);
  }
  return *found;
}

void add_pipeline_options(CLI::App* cmd, PipelineArgs& args, bool profile_required) {
  auto* profile =
      cmd->add_option("profile", args.profile, "Stage profile CSV: stage,instruction,frequency,time,energy");
  if (profile_required) profile->required();
  cmd->add_option("--stages", args.shape.num_stages, "Number of pipeline stages")->check(positive());
  cmd->add_option("--microbatches", args.shape.num_microbatches, "Microbatches per iteration")->check(positive());
  cmd->add_option("--p2p-power", args.p_block, "GPU power (W) while blocked on communication")->check(non_negative());
  cmd->add_option("--unit-time", args.unit_time, "Planner time quantum in seconds (default 0.001)")->check(positive());
  auto set_schedule = [&args](const std::string& name) {  // one_of checked the name
    args.schedule_given = true;
    args.envpipe = name == "envpipe";
    args.shape.schedule = args.envpipe ? ScheduleKind::one_f_one_b : *parse_schedule_kind(name);
  };
  cmd->add_option_function<std::string>(
         "--schedule", set_schedule,
         "1f1b (default), gpipe, interleaved (Megatron-LM's, with --virtual-stages), zb-h1, zbv, dualpipev "
         "(zero-bubble and DualPipeV: a profile with backward_input/backward_weight rows), or envpipe (1F1B "
         "with EnvPipe's extra forwards)")
      ->check(one_of({"1f1b", "gpipe", "interleaved", "zb-h1", "zbv", "dualpipev", "envpipe"}));
  auto set_virtual_stages = [&args](int count) {
    args.virtual_stages_given = true;
    args.shape.virtual_stages = count;
  };
  cmd->add_option_function<int>(
         "--virtual-stages", set_virtual_stages,
         "With --schedule interleaved: model chunks per stage (the profile has stages x this many model stages)")
      ->check(between(1, 1024));
  cmd->add_option("--extra-forwards", args.shape.extra_forwards,
                  "Extra forwards per stage before its first backward (1f1b), e.g. 3,2,1,0")
      ->delimiter(',');
  cmd->add_option("--envpipe-memory-cap", args.envpipe_memory_cap,
                  "With --schedule envpipe: most extra forwards memory holds")
      ->check(non_negative());
  cmd->add_flag("--quantize", args.quantize, "Floor instruction times to the unit time, as the planner does");
  cmd->add_option("--clock-latency", args.clock_latency_ms,
                  "Milliseconds until a changed clock takes effect: an instruction whose clock differs from the one "
                  "before it on its stage runs that long at that one's clock (emulation; the planner does not see it)")
      ->check(CLI::Range(0.0, 10000.0));
  cmd->add_flag("--recompute", args.recompute,
                "Activation recomputation: each backward runs its forward again first (added to the backward's "
                "time and energy at its clock; a frontier planned with it says so itself)");
}

Pipeline resolve_pipeline(const PipelineArgs& args, const FrontierRecord* record, const PlanFile* plan_file) {
  Pipeline p;
  std::string profile = args.profile;
  if (profile.empty() && record) profile = record->profile;
  if (profile.empty()) throw Error("a stage profile is required", ErrorKind::bad_setting);
  auto pick = [&](const auto& given, auto from_record, const char* option) {
    if (given) {
      if (record && *given != from_record) {
        throw Error(fmt::format("{} {} differs from the frontier's {}", option, *given, from_record),
                    ErrorKind::bad_setting);
      }
      return *given;
    }
    if (record) return from_record;
    throw Error(fmt::format("{} is required (or give --frontier)", option), ErrorKind::bad_setting);
  };
  auto if_given = [](int count) { return count > 0 ? std::optional<int>(count) : std::nullopt; };  // 0: not given
  p.config.num_stages = pick(if_given(args.shape.num_stages), record ? record->num_stages : 0, "--stages");
  // Microbatches not given: from a plan file that says (JSON) or names its forwards (Zeus's).
  auto microbatches = if_given(args.shape.num_microbatches);
  if (!microbatches && !record && plan_file && plan_file->num_microbatches) microbatches = plan_file->num_microbatches;
  if (!microbatches && !record && plan_file && !plan_file->instructions.empty()) {
    const auto& first = plan_file->instructions.front();
    microbatches = static_cast<int>(std::count(first.begin(), first.end(), "forward"));
  }
  p.config.num_microbatches = pick(microbatches, record ? record->num_microbatches : 0, "--microbatches");
  p.config.p_block = pick(args.p_block, record ? record->p_block : 0.0, "--p2p-power");
  p.unit_time = args.unit_time ? *args.unit_time : (record ? record->unit_time : 0.001);

  p.profile = read_profile(profile);
  if (args.recompute || (record && record->recompute)) p.profile = with_recomputation(p.profile);
  if (args.schedule_given) {
    p.config.schedule = args.shape.schedule;
    p.config.virtual_stages = args.shape.virtual_stages;
    if (args.envpipe) {
      p.config.extra_forwards =
          envpipe_extra_forwards(p.profile, p.config.num_stages, p.config.num_microbatches, args.envpipe_memory_cap);
    }
  } else if (record) {
    p.config.schedule = record->schedule;
    p.config.extra_forwards = record->extra_forwards;
    p.config.virtual_stages = record->virtual_stages;
  } else if (plan_file && plan_file->schedule) {
    p.config.schedule = *plan_file->schedule;
    p.config.extra_forwards = plan_file->extra_forwards;
    p.config.virtual_stages = plan_file->virtual_stages;
  }
  if (args.virtual_stages_given) {
    if (record && args.shape.virtual_stages != record->virtual_stages)
      throw Error(fmt::format("--virtual-stages {} differs from the frontier's {}", args.shape.virtual_stages,
                              record->virtual_stages),
                  ErrorKind::bad_setting);
    p.config.virtual_stages = args.shape.virtual_stages;
  }
  if (!args.shape.extra_forwards.empty()) {
    if (args.envpipe) throw Error("--extra-forwards and --schedule envpipe exclude each other", ErrorKind::bad_setting);
    p.config.extra_forwards = args.shape.extra_forwards;
  }
  if (record && (p.config.schedule != record->schedule || p.config.extra_forwards != record->extra_forwards)) {
    throw Error("the schedule differs from the frontier's", ErrorKind::bad_setting);
  }
  if (args.quantize) p.config.quantum = p.unit_time;
  p.config.clock_latency = args.clock_latency_ms / 1000;
  return p;
}

void add_plan_source_options(CLI::App* cmd, PlanSourceArgs& args) {
  auto* plan = cmd->add_option("--plan", args.plan_file, "Plan file (.json, or the artifact's freqs_pipeline_*.py)");
  auto* frontier = cmd->add_option("--frontier", args.frontier_dir, "Directory written by perseus optimize");
  auto* baseline = cmd->add_option("--baseline", args.baseline, "Baseline planner")->check(one_of(baseline_names()));
  plan->excludes(frontier)->excludes(baseline);
  frontier->excludes(baseline);
  add_selector(cmd, args.selector);
  add_zeus_options(cmd, args.baseline_options.zeus);
}

void add_zeus_options(CLI::App* cmd, ZeusOptions& options) {
  cmd->add_option("--eta", options.eta, "Zeus baselines: weight of energy in eta*E + (1-eta)*MaxPower*T")
      ->capture_default_str()
      ->check(between(0.0, 1.0));
  cmd->add_option("--max-power", options.max_power,
                  "Zeus baselines: MaxPower per GPU in watts (default: the profile's highest)")
      ->check(non_negative());
}

LoadedSource load_source(const PlanSourceArgs& args) {
  const int given = !args.plan_file.empty() + !args.frontier_dir.empty() + !args.baseline.empty();
  if (given != 1) throw Error("give exactly one of --plan, --frontier and --baseline", ErrorKind::bad_setting);
  if (has_selection(args.selector) && args.frontier_dir.empty()) {
    throw Error("--index/--time/--slowdown/--min-energy select a point of --frontier", ErrorKind::bad_setting);
  }
  LoadedSource source;
  if (!args.frontier_dir.empty()) source.record = read_frontier_record(args.frontier_dir);
  if (!args.plan_file.empty()) source.plan_file = read_plan_file(args.plan_file);
  return source;
}

namespace {

// A plan that names its instructions (Zeus's format) must name them in the emulated schedule's order.
void check_plan_order(const PlanFile& plan, const Pipeline& pipeline) {
  const auto& c = pipeline.config;
  for (std::size_t s = 0; s < plan.instructions.size(); ++s) {
    int extra = c.extra_forwards.empty() ? 0 : c.extra_forwards[s];
    auto order =
        stage_schedule(c.schedule, static_cast<int>(s), c.num_stages, c.num_microbatches, extra, c.virtual_stages);
    for (std::size_t k = 0; k < order.size() && k < plan.instructions[s].size(); ++k) {
      const std::string_view want = to_string(order[k].kind);
      if (plan.instructions[s][k] != want)
        throw Error(fmt::format("stage {}, slot {}: the plan names a {} where the {} schedule runs a {}", s, k,
                                plan.instructions[s][k], to_string(c.schedule), want),
                    ErrorKind::bad_input);
    }
  }
}

}  // namespace

ResolvedPlan resolve_plan(const PlanSourceArgs& args, const LoadedSource& source, const Pipeline& pipeline,
                          const Emulator& emulator) {
  ResolvedPlan resolved;
  if (source.record) {
    const Plan plan = plan_at(*source.record, select(*source.record, args.selector));
    resolved.label = fmt::format("frontier point {} of {}", *plan.index, source.record->points.size());
    resolved.frequencies = plan.frequencies;
    resolved.model_time = plan.time;
    resolved.model_energy = plan.energy;
  } else if (source.plan_file) {
    resolved.label = args.plan_file;
    resolved.frequencies = source.plan_file->frequencies;
    try {  // shape, clocks and (Zeus's format) instruction names checked here, so that the error names the file
      emulator.check_plan(resolved.frequencies);
      check_plan_order(*source.plan_file, pipeline);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", args.plan_file, e.what()), e.kind(), e.settings());
    }
    resolved.model_time = source.plan_file->time;
    resolved.model_energy = source.plan_file->energy;
  } else {
    auto result = run_baseline(args.baseline, pipeline.profile, emulator, args.baseline_options);
    resolved.label = args.baseline;
    resolved.frequencies = std::move(result.plan.frequencies);
    resolved.note = result.note;
  }
  return resolved;
}

}  // namespace perseus::cli
