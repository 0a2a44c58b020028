// `perseus optimize`: profile in, complete time–energy frontier out.
#include <fmt/format.h>

#include <cmath>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "perseus/cli/arguments.hpp"
#include "perseus/cli/commands.hpp"
#include "perseus/cli/interrupt.hpp"
#include "perseus/baselines/envpipe.hpp"
#include "perseus/plan/frontier_record.hpp"
#include "perseus/solver/planning.hpp"
#include "perseus/util/error.hpp"

namespace perseus::cli {

namespace {

struct OptimizeArgs {
  std::string profile;
  std::string out;
  PlanningConfig config;
  std::string schedule = "1f1b";
  std::string cost_model = "auto";
  int envpipe_memory_cap = -1;
  bool quiet = false;
  bool recompute = false;
  int threads = 0;
};

// Points done, current iteration time and rate, redrawn on one terminal line.
class Progress {
 public:
  explicit Progress(double unit_time, bool enabled) : unit_time_(unit_time), enabled_(enabled) {}
  void update(std::size_t points, int quant_time) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\r  %zu points, iteration time %.4f s, %.0f points/s   ", points, quant_time * unit_time_,
                 seconds > 0 ? points / seconds : 0.0);
    std::fflush(stderr);
    drawn_ = true;
  }
  void finish() {
    if (drawn_) std::fprintf(stderr, "\r%*s\r", 70, "");
  }

 private:
  double unit_time_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_;
};

// A frontier with times or energies that are not finite numbers is no result: the run failed
// (exit 1), saying why, and writes nothing.
void check_frontier(const FrontierRecord& record) {
  for (std::size_t i = 0; i < record.points.size(); ++i)
    if (!std::isfinite(record.points[i].time) || !std::isfinite(record.points[i].energy))
      throw Error(fmt::format("no frontier: point {} has time {} s and energy {} J, not finite numbers (the profile's "
                              "times or energies are too large to add up)",
                              i, record.points[i].time, record.points[i].energy),
                  ErrorKind::failed);
}

// With the exponential model (the reference mode), the operations that made the solver stop early.
std::string stopping_models(const PlannedFrontier& planned) {
  std::vector<std::string> names;
  for (int spec : planned.stopping_specs()) names.push_back(describe_spec(spec));
  return fmt::format(
      "the exponential cost model{} of {} stop{} it; --cost-model auto plans {} with the "
      "piecewise-linear hull",
      names.size() == 1 ? "" : "s", fmt::join(names, ", "), names.size() == 1 ? "s" : "",
      names.size() == 1 ? "it" : "them");
}

int run_optimize(OptimizeArgs& args) {
  const bool envpipe = args.schedule == "envpipe";
  const auto schedule = envpipe ? ScheduleKind::one_f_one_b : parse_schedule_kind(args.schedule);
  if (!schedule) throw Error("--schedule must be one of " + schedule_names() + " or envpipe", ErrorKind::bad_setting);
  args.config.schedule = *schedule;
  args.config.cost_model = *parse_cost_model_kind(args.cost_model);  // CLI checked the name
  if (envpipe && !args.config.extra_forwards.empty()) {
    throw Error("--extra-forwards and --schedule envpipe exclude each other", ErrorKind::bad_setting);
  }

  const auto started = std::chrono::steady_clock::now();
  Profile profile = read_profile(args.profile);
  if (args.recompute) profile = with_recomputation(profile);
  if (envpipe) {  // checks the profile's coverage of the stages itself
    args.config.extra_forwards =
        envpipe_extra_forwards(profile, args.config.num_stages, args.config.num_microbatches, args.envpipe_memory_cap);
  }
  PlannedFrontier planned;
  {
    StopOnSignal interrupt;
    Progress progress(args.config.unit_time, !args.quiet && ::isatty(STDERR_FILENO));
    SolverOptions options;
    options.stop = interrupt.flag();
    options.threads = args.threads;
    options.on_progress = [&](std::size_t points, int quant_time) { progress.update(points, quant_time); };
    planned = plan_frontier(profile, args.config, options);
    progress.finish();
  }
  const PlanningProblem& problem = planned.problem;
  const Frontier& frontier = planned.frontier;
  const bool reference_stop = args.config.cost_model == CostModelKind::exponential && planned.stopped_early();
  if (reference_stop && planned.only_the_start)
    throw Error(
        fmt::format("no frontier: the solver found no plan ({}); {}", frontier.stop_text(), stopping_models(planned)),
        ErrorKind::failed);

  const FrontierRecord record =
      make_frontier_record(problem, frontier, {args.profile, args.cost_model, args.recompute});
  check_frontier(record);
  write_frontier_record(record, args.out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!args.quiet) {
    std::fprintf(stderr, "%s\n",
                 fmt::format("perseus: {} frontier points in {:.2f} s{}", record.points.size(), seconds,
                             frontier.interrupted ? " (interrupted)" : "")
                     .c_str());
    if (!record.points.empty()) {
      // On the profile (emulated), with 10 significant digits, and the planner's quantized view.
      const auto& slow = record.points.front();
      const std::size_t fastest = fastest_point(record), cheapest = cheapest_point(record);
      const auto &fast = record.points[fastest], &cheap = record.points[cheapest];
      std::fprintf(stderr, "%s\n",
                   fmt::format("  slowest {:.10g} s at {:.10g} J, fastest {:.10g} s at {:.10g} J, cheapest {:.10g} s "
                               "at {:.10g} J (point {}; plans show --min-energy)",
                               slow.shown_time(), slow.shown_energy(), fast.shown_time(), fast.shown_energy(),
                               cheap.shown_time(), cheap.shown_energy(), cheapest)
                       .c_str());
      const auto dominated =
          std::count_if(record.points.begin(), record.points.end(), [](const RecordedPoint& p) { return p.dominated; });
      std::fprintf(stderr, "%s\n",
                   fmt::format("  times and energies emulated on the profile; the planner's quantized: slowest "
                               "{:.10g} s at {:.10g} J, fastest {:.10g} s at {:.10g} J; {} of {} points dominated "
                               "(slower and costlier than another: frontier.csv's dominated column)",
                               slow.time, slow.energy, fast.time, fast.energy, dominated, record.points.size())
                       .c_str());
    }
    std::vector<std::string> fallbacks;  // with auto: where the hull plans instead of the exponential fit, and why
    for (int spec = 0; spec < static_cast<int>(problem.specs.size()); ++spec)
      if (!problem.specs[spec].fallback.empty())
        fallbacks.push_back(fmt::format("{} ({})", describe_spec(spec), problem.specs[spec].fallback));
    if (!fallbacks.empty())
      std::fprintf(
          stderr, "%s\n",
          fmt::format("  cost model: piecewise-linear for {}; exponential elsewhere", fmt::join(fallbacks, "; "))
              .c_str());
    std::fprintf(stderr, "  stopped: %s\n", frontier.stop_text().c_str());
    if (reference_stop)
      std::fprintf(stderr, "  %s\n",
                   fmt::format("stopped before the fastest iteration time ({:.4f} s): {}",
                               planned.fastest_quant_time * problem.unit_time, stopping_models(planned))
                       .c_str());
    std::fprintf(stderr, "  wrote %s/{frontier.csv,iteration_time_energy.csv,plans.json,plan_changes.csv}\n",
                 args.out.c_str());
  }
  return frontier.interrupted ? kExitInterrupted : kExitOk;
}

}  // namespace

Runner add_optimize_command(CLI::App& app) {
  auto args = std::make_shared<OptimizeArgs>();
  auto* cmd = app.add_subcommand("optimize", "Compute the complete iteration time-energy frontier of a stage profile");
  cmd->add_option("profile", args->profile, "Stage profile CSV: stage,instruction,frequency,time,energy")->required();
  cmd->add_option("--stages", args->config.num_stages, "Number of pipeline stages")->required()->check(positive());
  cmd->add_option("--microbatches", args->config.num_microbatches, "Microbatches per iteration")
      ->required()
      ->check(positive());
  cmd->add_option("--p2p-power", args->config.p_block, "GPU power (W) while blocked on communication")
      ->required()
      ->check(non_negative());
  cmd->add_option("--unit-time", args->config.unit_time, "Time quantum in seconds (one frontier step)")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option(
         "--schedule", args->schedule,
         "Pipeline schedule: 1f1b, gpipe, interleaved (Megatron-LM's interleaved 1F1B; needs --virtual-stages), "
         "zb-h1, zbv, dualpipev (zero-bubble and DualPipeV: the profile needs backward_input/backward_weight "
         "rows), or envpipe (1F1B with EnvPipe's extra forwards)")
      ->capture_default_str()
      ->check(one_of({"1f1b", "gpipe", "interleaved", "zb-h1", "zbv", "dualpipev", "envpipe"}));
  cmd->add_option(
         "--virtual-stages", args->config.virtual_stages,
         "With --schedule interleaved: model chunks per stage, V >= 2. The profile then has S x V model stages: "
         "stage = chunk x S + pipeline stage, or a chunk column beside stage = pipeline stage")
      ->capture_default_str()
      ->check(between(1, 1024));
  cmd->add_option("--extra-forwards", args->config.extra_forwards,
                  "Extra forwards per stage before its first backward (1f1b), e.g. 3,2,1,0")
      ->delimiter(',');
  cmd->add_option("--envpipe-memory-cap", args->envpipe_memory_cap,
                  "With --schedule envpipe: most extra forwards memory holds")
      ->check(non_negative());
  cmd->add_flag("--recompute", args->recompute,
                "1F1B with activation recomputation: each backward runs its forward again first, at the backward's "
                "clock (its time and energy are added to the backward's; recorded in plans.json)");
  cmd->add_option("--cost-model", args->cost_model,
                  "auto: exp where it fits, pwl where not; exp: a*exp(b*q)+c fit (the reference, strict); "
                  "pwl: convex piecewise-linear hull")
      ->capture_default_str()
      ->check(one_of({"auto", "exp", "pwl"}));
  cmd->add_option("--noise-factor", args->config.noise_factor, "Pareto slack used when 3 or fewer options survive")
      ->capture_default_str();
  cmd->add_option("--threads", args->threads,
                  "Solver threads: 1, or 2 (a second thread computes each point's times while the first solves the "
                  "next points' flows; the same frontier); 0: 2 where the machine has a second core and the pipeline "
                  "has at least 256 "
                  "instructions")
      ->capture_default_str()
      ->check(between(0, 2));
  cmd->add_option("--out", args->out, "Output directory (created if missing)")->required();
  cmd->add_flag("--quiet,-q", args->quiet, "No progress display or summary");
  return [args] { return run_optimize(*args); };
}

}  // namespace perseus::cli
