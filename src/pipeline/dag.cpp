#include "perseus/pipeline/dag.hpp"

#include <fmt/format.h>

#include <queue>

#include "perseus/util/error.hpp"

namespace perseus {

PipelineDag build_pipeline_dag(ScheduleKind schedule, int num_stages, int num_microbatches,
                               const std::vector<int>& extra_forwards, int virtual_stages) {
  PipelineDag dag;
  dag.shape() = {num_stages, num_microbatches, schedule, extra_forwards, virtual_stages};
  dag.check();
  const int model_stages = dag.num_model_stages();
  // node id of (model stage, kind, microbatch), to wire cross-stage edges without comparing all pairs
  std::vector<std::vector<int>> forward_id(model_stages, std::vector<int>(num_microbatches, -1));
  auto backward_id = forward_id;
  for (int s = 0; s < num_stages; ++s) {
    std::vector<int> ids;
    for (const auto& inst : stage_schedule(schedule, s, num_stages, num_microbatches,
                                           extra_forwards.empty() ? 0 : extra_forwards[s], virtual_stages)) {
      const int id = static_cast<int>(dag.instructions.size());
      dag.instructions.push_back(inst);
      ids.push_back(id);
      (inst.kind == InstructionKind::forward ? forward_id : backward_id)[model_stage(inst, num_stages)][inst.microbatch] = id;
    }
    for (std::size_t i = 1; i < ids.size(); ++i) dag.edges.emplace_back(ids[i - 1], ids[i]);
    dag.stage_nodes.push_back(std::move(ids));
  }
  for (int k = 0; k + 1 < model_stages; ++k) {
    for (int m = 0; m < num_microbatches; ++m) {
      dag.edges.emplace_back(forward_id[k][m], forward_id[k + 1][m]);
      dag.edges.emplace_back(backward_id[k + 1][m], backward_id[k][m]);
    }
  }
  const int n = static_cast<int>(dag.instructions.size());
  dag.source = n;
  dag.sink = n + 1;
  std::vector<int> in_degree(n, 0), out_degree(n, 0);
  for (const auto& [u, v] : dag.edges) {
    ++out_degree[u];
    ++in_degree[v];
  }
  for (int i = 0; i < n; ++i) {
    if (in_degree[i] == 0) dag.edges.emplace_back(dag.source, i);
  }
  for (int i = 0; i < n; ++i) {
    if (out_degree[i] == 0) dag.edges.emplace_back(i, dag.sink);
  }
  if (dag.topological_order().size() != static_cast<std::size_t>(dag.num_nodes())) {
    throw Error(fmt::format("the {} schedule for {} stages and {} microbatches has a cycle",
                            to_string(schedule), num_stages, num_microbatches));
  }
  return dag;
}

std::vector<int> PipelineDag::topological_order() const {
  const int n = num_nodes();
  std::vector<std::vector<int>> out(n);
  std::vector<int> in_degree(n, 0);
  for (const auto& [u, v] : edges) {
    out[u].push_back(v);
    ++in_degree[v];
  }
  std::queue<int> ready;
  for (int i = 0; i < n; ++i) {
    if (in_degree[i] == 0) ready.push(i);
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int u = ready.front();
    ready.pop();
    order.push_back(u);
    for (int v : out[u]) {
      if (--in_degree[v] == 0) ready.push(v);
    }
  }
  return order;
}

}  // namespace perseus
