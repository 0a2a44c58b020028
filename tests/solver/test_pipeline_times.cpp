#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "perseus/pipeline/dag.hpp"
#include "perseus/solver/pipeline_times.hpp"

using namespace perseus;

namespace {

// A random DAG in the pipeline's form (a source before every node without predecessors, a sink
// after every node without successors), with nodes of up to `max_degree` predecessors, so that
// nodes with more than two predecessors or successors occur as well.
PipelineDag random_dag(std::mt19937& rng, int n, int max_degree) {
  PipelineDag dag;
  dag.instructions.resize(n);
  std::vector<int> in(n, 0), out(n, 0);
  for (int v = 1; v < n; ++v) {
    std::uniform_int_distribution<int> degree(0, max_degree), earlier(std::max(0, v - 12), v - 1);
    std::vector<int> preds;
    for (int k = degree(rng); k > 0; --k) preds.push_back(earlier(rng));
    std::sort(preds.begin(), preds.end());
    preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
    for (int u : preds) dag.edges.emplace_back(u, v), ++out[u], ++in[v];
  }
  dag.source = n;
  dag.sink = n + 1;
  for (int v = 0; v < n; ++v)
    if (in[v] == 0) dag.edges.emplace_back(dag.source, v);
  for (int v = 0; v < n; ++v)
    if (out[v] == 0) dag.edges.emplace_back(v, dag.sink);
  return dag;
}

struct Times {
  int makespan = 0;
  std::vector<bool> critical;  // per arc, numbered as PipelineTimes numbers them
};

// Longest paths the plain way: every node in topological order, forward and backward.
Times brute_force(const PipelineDag& dag, const std::vector<int>& durations) {
  const int nodes = dag.num_nodes();
  auto duration = [&](int v) { return v < static_cast<int>(durations.size()) ? durations[v] : 0; };
  const auto order = dag.topological_order();
  std::vector<int> finish(nodes, 0), tail_start(nodes, 0), tail_end(nodes, 0);
  for (int v : order) {
    int start = 0;
    for (const auto& [a, b] : dag.edges)
      if (b == v) start = std::max(start, finish[a]);
    finish[v] = start + duration(v);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    int tail = 0;
    for (const auto& [a, b] : dag.edges)
      if (a == *it) tail = std::max(tail, tail_start[b]);
    tail_end[*it] = tail;
    tail_start[*it] = tail + duration(*it);
  }
  Times t;
  t.makespan = finish[dag.sink];
  for (int v = 0; v < nodes; ++v) t.critical.push_back(finish[v] + tail_end[v] == t.makespan);
  for (const auto& [a, b] : dag.edges) t.critical.push_back(finish[a] + tail_start[b] == t.makespan);
  return t;
}

}  // namespace

// The planner recomputes only what a step's changes move and checks the critical arcs in the same
// passes: after every batch of random changes the iteration time, every arc's criticality and the
// answer "still the marked arcs?" must be a full recomputation's, on DAGs with nodes of one, two
// and more predecessors and successors.
TEST(PipelineTimes, UpdatesAndChecksAsAFullRecomputation) {
  std::mt19937 rng(3);
  int checked = 0, changed_sets = 0, kept_sets = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 5 + trial * 3;
    const PipelineDag dag = random_dag(rng, n, trial % 3 == 0 ? 2 : 4);
    std::uniform_int_distribution<int> initial(3, 9), pick(0, n - 1), step(-1, 1);
    std::vector<int> durations(n);
    for (int& d : durations) d = initial(rng);
    PipelineTimes times(dag, durations, std::vector<double>(n, 1.0));
    times.compute_all();
    auto mark = [&](const Times& truth) {
      times.clear_critical();
      for (std::size_t a = 0; a < truth.critical.size(); ++a)
        if (truth.critical[a]) times.mark_critical(static_cast<int>(a));
    };
    Times marked = brute_force(dag, durations);
    mark(marked);
    for (int round = 0; round < 40; ++round) {
      for (int k = 0; k < 1 + round % 4; ++k) {
        const int i = pick(rng);
        durations[i] = std::max(1, durations[i] + step(rng));
        times.set_duration(i, durations[i], 1.0);
      }
      const bool same = times.update();
      const Times truth = brute_force(dag, durations);
      ASSERT_EQ(times.makespan(), truth.makespan) << "trial " << trial << " round " << round;
      for (std::size_t a = 0; a < truth.critical.size(); ++a)
        ASSERT_EQ(times.is_critical(static_cast<int>(a)), truth.critical[a]) << "arc " << a << ", trial " << trial;
      ASSERT_EQ(same, truth.critical == marked.critical) << "trial " << trial << " round " << round;
      (same ? kept_sets : changed_sets) += 1;
      if (!same && round % 2 == 0) {  // the planner marks the new set where it changed
        marked = truth;
        mark(marked);
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 60 * 40);
  EXPECT_GT(changed_sets, 100);
  EXPECT_GT(kept_sets, 200);
}

// A dependency can stop being critical while both its ends stay critical (another way between
// them became longer): the check must see that too, whichever of its tail's successors it is, and
// still see it (the marks now stale) after a change upstream, where only end times move and the
// forward pass does the checking.
TEST(PipelineTimes, SeesADependencyLeaveTheCriticalPathWhileItsEndsStay) {
  for (const bool direct_first : {true, false}) {
    SCOPED_TRACE(direct_first ? "direct dependency listed first" : "listed last");
    PipelineDag dag;
    dag.instructions.resize(4);  // u = 0, w = 1, v = 2, x = 3: x -> u -> w -> v and u -> v
    if (direct_first) dag.edges = {{0, 2}, {0, 1}, {1, 2}};
    else dag.edges = {{0, 1}, {1, 2}, {0, 2}};
    dag.edges.emplace_back(3, 0);
    dag.source = 4;
    dag.sink = 5;
    dag.edges.emplace_back(4, 3);
    dag.edges.emplace_back(2, 5);
    PipelineTimes times(dag, {2, 0, 3, 1}, {0.0, 0.0, 0.0, 0.0});
    times.compute_all();
    const int direct = dag.num_nodes() + (direct_first ? 0 : 2);
    times.clear_critical();
    for (int arc = 0; arc < dag.num_nodes() + static_cast<int>(dag.edges.size()); ++arc)
      if (times.is_critical(arc)) times.mark_critical(arc);
    EXPECT_TRUE(times.is_critical(direct));
    times.set_duration(1, 1, 0.0);
    EXPECT_FALSE(times.update());
    EXPECT_FALSE(times.is_critical(direct));
    for (int node = 0; node < 4; ++node) EXPECT_TRUE(times.is_critical(node));
    times.set_duration(3, 2, 0.0);  // upstream: every node stays critical, the dependency does not
    EXPECT_FALSE(times.update());
    EXPECT_FALSE(times.is_critical(direct));
    EXPECT_FALSE(times.update());   // no change at all: the marks are still not the critical arcs
    times.set_duration(1, 0, 0.0);  // back: the marked arcs are critical again
    EXPECT_TRUE(times.update());
  }
}
