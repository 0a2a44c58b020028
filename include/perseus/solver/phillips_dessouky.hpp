#pragma once
// The Phillips–Dessouky time–cost trade-off solver.
//
// Problem: every instruction of the pipeline's DAG (an activity network) may run at one of several
// durations, each with a cost (its energy, as the cost model gives it); find, for every iteration
// time from the slowest plan's down to the shortest reachable, a plan of least summed cost: the
// time–energy frontier.
//
// Algorithm: S. Phillips and M. I. Dessouky, "Solving the project time/cost tradeoff problem using
// the minimal cut concept", Management Science 24(4), 1977. Starting from every instruction at its
// slowest option, each step shortens the iteration by one unit time at the least added cost: a
// minimum cut of the critical subgraph, whose arcs carry the cost of shortening (forward) or the
// saving of lengthening (backward) as flow bounds (max_flow.hpp). Perseus (Chung et al., SOSP 2024)
// applies it to per-instruction GPU clocks; the `reference` cut rule reproduces its planner's
// floating-point decisions, and so its frontiers.
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "perseus/model/cost_model.hpp"
#include "perseus/model/options.hpp"
#include "perseus/pipeline/dag.hpp"
#include "perseus/solver/max_flow.hpp"

namespace perseus {

// Options and cost model shared by every instruction of one (stage, kind).
struct OperationSpec {
  OperationOptions options;
  std::shared_ptr<const CostModel> model;
  std::string fallback;  // why `auto` planned it with the piecewise-linear hull; empty where it did not
};

struct PlanningProblem {
  PipelineDag dag;
  std::vector<OperationSpec> specs;  // indexed by spec_index(model stage, kind)
  double unit_time = 0.001;
  double p_block = 0;

  static int spec_index(int stage, InstructionKind kind) { return operation_index(stage, kind); }
  const OperationSpec& spec_of(int instruction) const {
    const auto& inst = dag.instructions[instruction];
    return specs[spec_index(model_stage(inst, dag.num_stages), inst.kind)];
  }
};

// How the minimum cut is read off the residual network.
enum class CutRule {
  // Like the reference planner: an arc counts as unsaturated when its residual exceeds 1e-6 in
  // the reference's floating-point arithmetic (a residual of exactly one 1e-6 unit is decided by
  // evaluating that arithmetic). Reproduces the reference frontiers.
  reference,
  // Exact integer arithmetic: any residual of one unit or more is unsaturated. Independent of the
  // max-flow algorithm; used to check the fast solver against the library oracle.
  exact,
};

// A maximum flow within the bounds (max_flow.hpp's problem), or nullopt when no flow meets every
// lower bound: what tests check the solver's own flow network against.
using MaxFlowOracle = std::function<std::optional<std::vector<std::int64_t>>(
    int num_nodes, const std::vector<BoundedArc>& arcs, int source, int sink, Feasibility feasibility)>;

struct SolverOptions {
  // When set, each point's flow comes from it (and the cut from that flow's arcs) instead of the
  // solver's incremental Dinic network.
  MaxFlowOracle max_flow_oracle;
  CutRule cut_rule = CutRule::reference;
  const std::atomic<bool>* stop = nullptr;                              // checked every iteration; set by Ctrl-C
  std::function<void(std::size_t points, int quant_time)> on_progress;  // after each point
  // 1: one thread. 2: a second thread computes each point's times while the first solves the next
  // points' flows (the same frontier). 0: 2 where the machine has a second core and the pipeline is large enough
  // to gain from it (kParallelMinInstructions).
  int threads = 0;
  static constexpr int kParallelMinInstructions = 256;
  // Where the critical arcs change, the flow network keeps arcs no longer critical, resting at a
  // flow of 0, while they are at most this share of it; 0: it is built anew on the critical arcs
  // at every change (the same frontier, slower where they change often).
  double most_resting = 0.25;
  // Stop where the reference planner stops: at a step that changes the cost by less than 1e-6 J,
  // and at a cut that would slow down an instruction already at its slowest clock. Otherwise such a
  // step is taken (time for free is a point of the frontier, not its end) and such an instruction
  // left as it is (the iteration gets shorter all the same). Either way the frontiers agree up to
  // the reference's stop.
  bool reference_stops = false;
};

struct DurationChange {
  std::int32_t instruction = 0;
  std::int32_t duration = 0;  // new quantized duration
};

struct FrontierPoint {
  int quant_time = 0;             // iteration time in unit times
  double cost_change = 0;         // effective energy added by this step
  double effective_cost = 0;      // sum of the cost model over all instructions
  std::size_t changes_begin = 0;  // this point's changes are changes[changes_begin, next begin)
  // The plan as the emulator runs it (exact_times.hpp): seconds and joules, unquantized. Set by
  // the solver as it takes the step; NaN on a point made otherwise until it is set.
  double exact_time = std::numeric_limits<double>::quiet_NaN();
  double exact_energy = std::numeric_limits<double>::quiet_NaN();
};

// Why a frontier ends: the solver was interrupted, or its next step cannot shorten the iteration.
enum class StopReason {
  none,                     // not solved yet
  interrupted,              // SolverOptions::stop was set
  no_feasible_flow,         // no flow within the bounds on the critical subgraph
  no_forward_cut_arc,       // the minimum cut crosses no arc forward
  fixed_dependency_in_cut,  // the cut crosses a dependency, whose duration is fixed
  instruction_at_fastest,   // an instruction to shorten already runs at its fastest clock
  instruction_at_slowest,   // an instruction to lengthen already runs at its slowest clock
  negligible_cost_change,   // a step changes the cost by less than 1e-6
};

// The reason in words, as `perseus optimize` prints it and frontier records keep it. `instruction`:
// the instruction the reason names (instruction_at_fastest and instruction_at_slowest), e.g.
// "F3 on stage 1".
std::string to_string(StopReason reason, const std::string& instruction = "");

struct Frontier {
  std::vector<int> start_durations;  // per instruction: the slowest plan the solver starts from
  int start_quant_time = 0;
  double start_effective_cost = 0;
  std::vector<FrontierPoint> points;  // slowest first, as the reference emits them
  std::vector<DurationChange> changes;
  StopReason stop_reason = StopReason::none;
  std::string stop_instruction;  // the instruction stop_reason names, if it names one
  // The instructions the last cut would have changed, where the frontier ended at a cut (what made
  // it stop, when it stopped before the iteration could get no shorter).
  std::vector<int> stop_cut;
  // The last point is the one before it with clocks on its exact critical path raised until it runs
  // as fast as every instruction at its fastest clock (plan_frontier), at the same quantized time.
  bool fastest_fitted = false;
  bool interrupted = false;

  std::string stop_text() const { return to_string(stop_reason, stop_instruction); }

  std::size_t changes_end(std::size_t point) const {
    return point + 1 < points.size() ? points[point + 1].changes_begin : changes.size();
  }
  // Durations of every instruction at a frontier point (or the start plan for point == npos).
  std::vector<int> durations_at(std::size_t point) const;
};

Frontier solve_frontier(const PlanningProblem& problem, const SolverOptions& options = {});

}  // namespace perseus
