#pragma once
// The Phillips–Dessouky time–cost trade-off solver (docs/design.md#the-solver). Starting from every
// instruction at its slowest option, each iteration shortens the iteration by one unit time at
// the least added cost, found as a minimum cut of the critical subgraph.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
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
};

struct PlanningProblem {
  PipelineDag dag;
  std::vector<OperationSpec> specs;   // indexed by spec_index(model stage, kind)
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

struct SolverOptions {
  MaxFlowAlgorithm algorithm = MaxFlowAlgorithm::dinic;
  CutRule cut_rule = CutRule::reference;
  const std::atomic<bool>* stop = nullptr;  // checked every iteration; set by Ctrl-C
  std::function<void(std::size_t points, int quant_time)> on_progress;  // after each point
  // 1: one thread. 2: a second thread computes each point's times while the first solves the next
  // points' flows (the same frontier). 0: 2 where the machine has a second core and the pipeline is large enough
  // to gain from it (kParallelMinInstructions).
  int threads = 0;
  static constexpr int kParallelMinInstructions = 256;
};

struct DurationChange {
  std::int32_t instruction = 0;
  std::int32_t duration = 0;  // new quantized duration
};

struct FrontierPoint {
  int quant_time = 0;            // iteration time in unit times
  double cost_change = 0;        // effective energy added by this step
  double effective_cost = 0;     // sum of the cost model over all instructions
  std::size_t changes_begin = 0; // this point's changes are changes[changes_begin, next begin)
};

struct Frontier {
  std::vector<int> start_durations;  // per instruction: the slowest plan the solver starts from
  int start_quant_time = 0;
  double start_effective_cost = 0;
  std::vector<FrontierPoint> points;  // slowest first, as the reference emits them
  std::vector<DurationChange> changes;
  std::string stop_reason;
  bool interrupted = false;

  std::size_t changes_end(std::size_t point) const {
    return point + 1 < points.size() ? points[point + 1].changes_begin : changes.size();
  }
  // Durations of every instruction at a frontier point (or the start plan for point == npos).
  std::vector<int> durations_at(std::size_t point) const;
};

Frontier solve_frontier(const PlanningProblem& problem, const SolverOptions& options = {});

}  // namespace perseus
