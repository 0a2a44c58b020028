#pragma once
// The emulator's core: a pipeline's instructions as a graph in topological order, the walk that
// gives each its earliest start and end, the critical path back from the last, and the two
// formulas every emulation shares (an instruction after a clock change; an iteration's energy).
// The emulator (one run), its noisy batches (many draws of many pipelines at once) and whoever else
// evaluates plans walk this one graph, so that a fix here reaches them all.
#include <cstddef>
#include <utility>
#include <vector>

#include "perseus/pipeline/dag.hpp"
#include "perseus/profile/time_energy.hpp"

namespace perseus {

struct PipelineWalk {
  PipelineWalk() = default;
  explicit PipelineWalk(const PipelineDag& dag);

  std::vector<Instruction> instructions;          // per node
  std::vector<int> topo;                          // nodes in topological order
  std::vector<std::vector<int>> predecessors;     // per node
  std::vector<std::vector<int>> successors;       // per node
  std::vector<std::pair<int, std::size_t>> slot;  // node -> (stage, slot in the stage's order)
  std::vector<std::vector<int>> stage_nodes;      // per stage, its nodes in schedule order

  int nodes() const { return static_cast<int>(instructions.size()); }
  // The node its stage runs before `node` (the stage's last one for its first: the iteration before).
  int previous_on_stage(int node) const {
    const auto [s, k] = slot[static_cast<std::size_t>(node)];
    const auto& stage = stage_nodes[static_cast<std::size_t>(s)];
    return stage[k > 0 ? k - 1 : stage.size() - 1];
  }

  // Earliest start and end of every node (the longest-path pass), `duration(node)` called once per
  // node in topological order; returns the node that ends last, -1 when there is none.
  template <typename Duration>
  int walk(Duration&& duration, double* start, double* end) const {
    int last = -1;
    for (int node : topo) {
      const auto n = static_cast<std::size_t>(node);
      double s = 0;
      for (int p : predecessors[n]) s = std::max(s, end[static_cast<std::size_t>(p)]);
      start[n] = s;
      end[n] = s + duration(node);
      if (last < 0 || end[n] > end[static_cast<std::size_t>(last)]) last = node;
    }
    return last;
  }

  // The critical path of a walk, from `last` back through the predecessor each node waited for
  // (the latest-ending one that ended as it started): `visit(node)` for each.
  template <typename Visit>
  void critical_path(int last, const double* start, const double* end, Visit&& visit) const {
    for (int node = last; node >= 0;) {
      visit(node);
      int next = -1;
      for (int p : predecessors[static_cast<std::size_t>(node)]) {
        const double e = end[static_cast<std::size_t>(p)];
        if (e == start[static_cast<std::size_t>(node)] && (next < 0 || e > end[static_cast<std::size_t>(next)]))
          next = p;
      }
      node = next;
    }
  }
};

// An instruction whose clock differs from the one before it on its stage: it runs `latency` seconds
// at the old clock (`old`: its cost there), the rest of its work at its own (`now`); all of it at
// the old one when that ends sooner. `factor` scales both costs (noise, a GPU's speed); the latency
// is wall time and is not scaled.
TimeEnergy cost_after_clock_change(TimeEnergy now, TimeEnergy old, double latency, double factor = 1);

// One iteration's energy: the instructions' `compute` joules, and `gpus` GPUs drawing `p_block`
// watts while not busy (`busy`: the instructions' seconds, all GPUs) until the iteration's `time`.
inline double iteration_energy(double compute, double busy, double time, int gpus, double p_block) {
  return compute + (gpus * time - busy) * p_block;
}

}  // namespace perseus
