#include "perseus/emulate/pipeline_walk.hpp"

namespace perseus {

PipelineWalk::PipelineWalk(const PipelineDag& dag) : instructions(dag.instructions), stage_nodes(dag.stage_nodes) {
  const int n = nodes();
  predecessors.assign(static_cast<std::size_t>(n), {});
  successors.assign(static_cast<std::size_t>(n), {});
  for (const auto& [u, v] : dag.edges)
    if (u < n && v < n) {
      predecessors[static_cast<std::size_t>(v)].push_back(u);
      successors[static_cast<std::size_t>(u)].push_back(v);
    }
  for (int node : dag.topological_order())
    if (node < n) topo.push_back(node);
  slot.assign(static_cast<std::size_t>(n), {0, 0});
  for (std::size_t s = 0; s < stage_nodes.size(); ++s)
    for (std::size_t k = 0; k < stage_nodes[s].size(); ++k)
      slot[static_cast<std::size_t>(stage_nodes[s][k])] = {static_cast<int>(s), k};
}

TimeEnergy cost_after_clock_change(TimeEnergy now, TimeEnergy old, double latency, double factor) {
  const double t_old = old.time * factor;
  if (latency <= 0 || t_old <= 0) return {now.time * factor, now.energy * factor};
  if (t_old <= latency) return {t_old, old.energy * factor};  // it ends before the new clock takes effect
  const double done = latency / t_old;                        // its share of the work at the old clock
  return {latency + (1 - done) * now.time * factor, done * old.energy * factor + (1 - done) * now.energy * factor};
}

}  // namespace perseus
