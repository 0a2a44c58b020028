// The test-only max-flow oracle: Boost.Graph's push-relabel on the bounded problem, literally as
// the reference planner solves it, to check the solver's own Dinic network against; and the Dinic
// network behind the same call (one per thread, kept while the arcs' endpoints stay the same, as
// the planner keeps its own across frontier points).
#include "max_flow_oracle.hpp"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/push_relabel_max_flow.hpp>

#include <algorithm>
#include <limits>

#include "perseus/solver/bounded_flow_network.hpp"

namespace perseus {
namespace {

constexpr std::int64_t kUnbounded = std::numeric_limits<std::int64_t>::max() / 8;

using Traits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using Graph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS, boost::no_property,
    boost::property<boost::edge_capacity_t, long,
                    boost::property<boost::edge_residual_capacity_t, long,
                                    boost::property<boost::edge_reverse_t, Traits::edge_descriptor>>>>;
using Edge = Traits::edge_descriptor;

struct BoostNetwork {
  explicit BoostNetwork(int n) : graph(n) {}
  Edge add(int u, int v, long capacity) {
    auto capacity_map = boost::get(boost::edge_capacity, graph);
    auto reverse_map = boost::get(boost::edge_reverse, graph);
    const Edge forward = boost::add_edge(u, v, graph).first;
    const Edge backward = boost::add_edge(v, u, graph).first;
    capacity_map[forward] = capacity;
    capacity_map[backward] = 0;
    reverse_map[forward] = backward;
    reverse_map[backward] = forward;
    return forward;
  }
  long flow(Edge e) const {
    return boost::get(boost::edge_capacity, graph, e) - boost::get(boost::edge_residual_capacity, graph, e);
  }
  long run(int s, int t) { return boost::push_relabel_max_flow(graph, s, t); }
  Graph graph;
};

// Follows the reference planner literally: feasible flow on a fresh network, then a second
// max flow on a network built from the residual capacities.
std::optional<std::vector<std::int64_t>> with_boost(int n, const std::vector<BoundedArc>& arcs, int source, int sink,
                                                    Feasibility feasibility) {
  BoostNetwork first(n + 2);
  std::vector<Edge> arc_edges;
  std::vector<std::int64_t> in_lower(n, 0), out_lower(n, 0);
  for (const auto& arc : arcs) {
    arc_edges.push_back(first.add(arc.from, arc.to, std::max<std::int64_t>(0, arc.upper - arc.lower)));
    in_lower[arc.to] += arc.lower;
    out_lower[arc.from] += arc.lower;
  }
  std::vector<Edge> supply, drain;
  for (int v = 0; v < n; ++v) {
    supply.push_back(first.add(n, v, in_lower[v]));
    drain.push_back(first.add(v, n + 1, out_lower[v]));
  }
  first.add(sink, source, kUnbounded);
  first.run(n, n + 1);
  for (int v = 0; v < n; ++v) {
    if (!demand_met(in_lower[v], first.flow(supply[v]), feasibility) ||
        !demand_met(out_lower[v], first.flow(drain[v]), feasibility)) {
      return std::nullopt;
    }
  }
  std::vector<std::int64_t> flow(arcs.size());
  for (std::size_t i = 0; i < arcs.size(); ++i) flow[i] = arcs[i].lower + first.flow(arc_edges[i]);

  BoostNetwork second(n);
  std::vector<std::pair<Edge, Edge>> pairs;
  for (std::size_t i = 0; i < arcs.size(); ++i) {
    const Edge up = second.add(arcs[i].from, arcs[i].to, arcs[i].upper - flow[i]);
    const Edge down = second.add(arcs[i].to, arcs[i].from, flow[i] - arcs[i].lower);
    pairs.emplace_back(up, down);
  }
  second.run(source, sink);
  for (std::size_t i = 0; i < arcs.size(); ++i) {
    flow[i] += second.flow(pairs[i].first) - second.flow(pairs[i].second);
  }
  return flow;
}

bool with_dinic(int n, const std::vector<BoundedArc>& arcs, const std::vector<std::int64_t>* initial, int source,
                int sink, Feasibility feasibility, std::vector<std::int64_t>& flow) {
  thread_local BoundedFlowNetwork network;
  if (!network.solve(n, arcs, source, sink, initial, feasibility)) return false;
  flow.resize(arcs.size());
  for (std::size_t i = 0; i < arcs.size(); ++i) flow[i] = network.flow(static_cast<int>(i));
  return true;
}

}  // namespace

std::optional<std::vector<std::int64_t>> bounded_max_flow(int num_nodes, const std::vector<BoundedArc>& arcs,
                                                          int source, int sink, MaxFlowAlgorithm algorithm,
                                                          const std::vector<std::int64_t>* initial,
                                                          Feasibility feasibility) {
  if (algorithm == MaxFlowAlgorithm::boost_push_relabel) return with_boost(num_nodes, arcs, source, sink, feasibility);
  std::vector<std::int64_t> flow;
  if (!with_dinic(num_nodes, arcs, initial, source, sink, feasibility, flow)) return std::nullopt;
  return flow;
}

MaxFlowOracle boost_max_flow_oracle() {
  return [](int num_nodes, const std::vector<BoundedArc>& arcs, int source, int sink, Feasibility feasibility) {
    return with_boost(num_nodes, arcs, source, sink, feasibility);
  };
}

}  // namespace perseus
