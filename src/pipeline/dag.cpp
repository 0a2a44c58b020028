#include "perseus/pipeline/dag.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <queue>
#include <set>
#include <tuple>

#include "perseus/pipeline/dependencies.hpp"

#include "perseus/util/error.hpp"

namespace perseus {

PipelineDag build_pipeline_dag(ScheduleKind schedule, int num_stages, int num_microbatches,
                               const std::vector<int>& extra_forwards, int virtual_stages) {
  virtual_stages = schedule_virtual_stages(schedule, virtual_stages);
  PipelineDag dag;
  dag.shape() = {num_stages, num_microbatches, schedule, extra_forwards, virtual_stages};
  dag.check();
  for (int s = 0; s < num_stages; ++s) {
    std::vector<int> ids;
    for (const auto& inst : stage_schedule(schedule, s, num_stages, num_microbatches,
                                           extra_forwards.empty() ? 0 : extra_forwards[s], virtual_stages)) {
      ids.push_back(static_cast<int>(dag.instructions.size()));
      dag.instructions.push_back(inst);
    }
    for (std::size_t i = 1; i < ids.size(); ++i) dag.edges.emplace_back(ids[i - 1], ids[i]);
    dag.stage_nodes.push_back(std::move(ids));
  }
  // Data edges: from the node producing an item to every node needing it, unless the stage's own
  // order already runs the producer first (an edge the chain implies only enlarges the solver's
  // networks).
  std::vector<int> slot(dag.instructions.size());
  for (const auto& ids : dag.stage_nodes)
    for (std::size_t i = 0; i < ids.size(); ++i) slot[static_cast<std::size_t>(ids[i])] = static_cast<int>(i);
  auto implied = [&](int from, int to) {
    const auto& a = dag.instructions[static_cast<std::size_t>(from)];
    const auto& b = dag.instructions[static_cast<std::size_t>(to)];
    return a.stage == b.stage && slot[static_cast<std::size_t>(from)] < slot[static_cast<std::size_t>(to)];
  };
  const DataItems items(dag.num_model_stages(), num_microbatches);
  std::vector<int> producer(static_cast<std::size_t>(items.size()), -1);
  std::vector<int> produces, needs;
  for (int id = 0; id < static_cast<int>(dag.instructions.size()); ++id) {
    items.of(dag.instructions[id], num_stages, produces, needs);
    for (int item : produces) producer[item] = id;
  }
  // Listed boundary by boundary between model stages k and k + 1, microbatch by microbatch, the
  // forward's edge before the backward's: the order the solver has always seen for 1F1B (its
  // minimum cuts break ties by it).
  std::vector<std::tuple<int, int, int, int, int>> data;  // (boundary, microbatch, backward?, from, to)
  for (int id = 0; id < static_cast<int>(dag.instructions.size()); ++id) {
    items.of(dag.instructions[id], num_stages, produces, needs);
    for (int item : needs) {
      const int from = producer[item];
      if (from < 0)
        throw Error(fmt::format("the {} schedule runs {} on stage {} without the instruction it needs",
                                to_string(schedule), short_name(dag.instructions[id], virtual_stages),
                                dag.instructions[id].stage));
      if (from == id || implied(from, id)) continue;
      const bool gradient = items.is_gradient(item);
      data.emplace_back(items.model_stage(item) - (gradient ? 1 : 0), items.microbatch(item), gradient ? 1 : 0, from,
                        id);
    }
  }
  std::stable_sort(data.begin(), data.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a), std::get<2>(a)) <
           std::tie(std::get<0>(b), std::get<1>(b), std::get<2>(b));
  });
  std::set<std::pair<int, int>> seen(dag.edges.begin(), dag.edges.end());
  for (const auto& [boundary, microbatch, backward, from, to] : data)
    if (seen.insert({from, to}).second) dag.edges.emplace_back(from, to);
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
    throw Error(fmt::format("the {} schedule for {} stages and {} microbatches has a cycle", to_string(schedule),
                            num_stages, num_microbatches));
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
