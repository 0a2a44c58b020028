#pragma once
// The pipeline's dependency DAG, activity on node: one node per instruction, plus
// a dummy source before every node without predecessors and a dummy sink after every node
// without successors.
#include <utility>
#include <vector>

#include "perseus/pipeline/schedule.hpp"
#include "perseus/pipeline/shape.hpp"

namespace perseus {

struct PipelineDag : PipelineShape {
  std::vector<Instruction> instructions;      // node i < instructions.size() is instructions[i]
  std::vector<std::vector<int>> stage_nodes;  // per stage (GPU), node ids in execution order
  int source = 0;                             // == instructions.size()
  int sink = 0;                               // == instructions.size() + 1
  std::vector<std::pair<int, int>> edges;     // (from, to), no duplicates

  int num_nodes() const { return static_cast<int>(instructions.size()) + 2; }
  int num_model_stages() const { return num_stages * virtual_stages; }
  // Node ids in an order where every edge goes forward.
  std::vector<int> topological_order() const;
};

// Edges: each stage's order, and per microbatch a model stage's forward before the next one's
// and a model stage's backward before the previous one's (model stage = virtual stage with
// interleaving, whose neighbours sit on the neighbouring GPUs).
PipelineDag build_pipeline_dag(ScheduleKind schedule, int num_stages, int num_microbatches,
                               const std::vector<int>& extra_forwards = {}, int virtual_stages = 1);

}  // namespace perseus
