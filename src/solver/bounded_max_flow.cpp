#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/push_relabel_max_flow.hpp>
#include <algorithm>
#include <limits>

#include "perseus/solver/max_flow.hpp"

namespace perseus {

namespace {

constexpr std::int64_t kUnbounded = std::numeric_limits<std::int64_t>::max() / 8;

// Arcs in series (joined by a node with exactly one arc in and one out) carry the same flow, so
// a chain becomes one arc with bounds [max lower, min upper]. The critical subgraphs of pipeline
// DAGs are mostly such chains, which shrinks the network several times.
struct Chains {
  std::vector<BoundedArc> arcs;      // one per chain
  std::vector<int> chain_of;         // per original arc
};

std::optional<Chains> contract_series(int n, const std::vector<BoundedArc>& arcs, int source,
                                      int sink, Feasibility feasibility) {
  std::vector<int> in_degree(n, 0), out_degree(n, 0), out_arc(n, -1);
  for (std::size_t i = 0; i < arcs.size(); ++i) {
    ++in_degree[arcs[i].to];
    ++out_degree[arcs[i].from];
    out_arc[arcs[i].from] = static_cast<int>(i);
  }
  auto through = [&](int v) {
    return v != source && v != sink && in_degree[v] == 1 && out_degree[v] == 1;
  };
  Chains result;
  result.chain_of.assign(arcs.size(), -1);
  for (std::size_t first = 0; first < arcs.size(); ++first) {
    if (through(arcs[first].from)) continue;  // not the head of its chain
    const int id = static_cast<int>(result.arcs.size());
    BoundedArc merged = arcs[first];
    int current = static_cast<int>(first);
    result.chain_of[current] = id;
    while (through(arcs[current].to)) {
      current = out_arc[arcs[current].to];
      result.chain_of[current] = id;
      merged.lower = std::max(merged.lower, arcs[current].lower);
      merged.upper = std::min(merged.upper, arcs[current].upper);
    }
    merged.to = arcs[current].to;
    if (merged.lower > merged.upper) {  // no flow fits every arc of the chain
      // A node in the chain falls short by the difference: the rule decides, as at any node.
      if (!demand_met(merged.lower, merged.upper, feasibility)) return std::nullopt;
      merged.lower = merged.upper;
    }
    result.arcs.push_back(merged);
  }
  // Arcs on a cycle of through nodes have no head; a DAG has none, but stay correct regardless.
  for (std::size_t i = 0; i < arcs.size(); ++i) {
    if (result.chain_of[i] < 0) {
      result.chain_of[i] = static_cast<int>(result.arcs.size());
      result.arcs.push_back(arcs[i]);
    }
  }
  return result;
}

// Starts from `initial` (within the bounds, not necessarily conserving flow): the solver passes
// the previous iteration's flow, so that only the few nodes whose balance changed need routing.
std::optional<std::vector<std::int64_t>> dinic_flow(int n, const std::vector<BoundedArc>& arcs,
                                                    const std::vector<std::int64_t>& initial,
                                                    int source, int sink, Feasibility feasibility) {
  thread_local Dinic dinic;
  const int super_source = n, super_sink = n + 1;
  dinic.reset(n + 2);
  std::vector<int> arc_edge(arcs.size());
  std::vector<std::int64_t> excess(n, 0);
  for (std::size_t i = 0; i < arcs.size(); ++i) {
    const auto& arc = arcs[i];
    const std::int64_t x = initial[i];
    arc_edge[i] = dinic.add_edge(arc.from, arc.to, arc.upper - x);
    dinic.set_residual(arc_edge[i] ^ 1, x - arc.lower);
    excess[arc.to] += x;
    excess[arc.from] -= x;
  }
  std::vector<int> helper_edges;
  std::vector<std::int64_t> helper_capacity;
  std::int64_t demand = 0;
  for (int v = 0; v < n; ++v) {
    if (excess[v] > 0) {
      helper_edges.push_back(dinic.add_edge(super_source, v, excess[v]));
      helper_capacity.push_back(excess[v]);
      demand += excess[v];
    } else if (excess[v] < 0) {
      helper_edges.push_back(dinic.add_edge(v, super_sink, -excess[v]));
      helper_capacity.push_back(-excess[v]);
    }
  }
  const int back_edge = dinic.add_edge(sink, source, kUnbounded);
  if (dinic.max_flow(super_source, super_sink, demand) < demand) {
    // Short: feasible only if every node's shortfall passes the rule (the reference's per-node check).
    for (std::size_t h = 0; h < helper_edges.size(); ++h) {
      const std::int64_t capacity = helper_capacity[h];
      if (!demand_met(capacity, capacity - dinic.residual(helper_edges[h]), feasibility)) return std::nullopt;
    }
  }
  // Drop the helpers: what remains on the original arcs is a feasible s-t flow.
  for (int e : helper_edges) {
    dinic.set_residual(e, 0);
    dinic.set_residual(e ^ 1, 0);
  }
  dinic.set_residual(back_edge, 0);
  dinic.set_residual(back_edge ^ 1, 0);
  dinic.max_flow(source, sink, kUnbounded);
  std::vector<std::int64_t> flow(arcs.size());
  for (std::size_t i = 0; i < arcs.size(); ++i) {
    flow[i] = arcs[i].upper - dinic.residual(arc_edge[i]);
  }
  return flow;
}

std::optional<std::vector<std::int64_t>> with_dinic(int n, const std::vector<BoundedArc>& arcs,
                                                    const std::vector<std::int64_t>* initial,
                                                    int source, int sink, Feasibility feasibility) {
  const auto chains = contract_series(n, arcs, source, sink, feasibility);
  if (!chains) return std::nullopt;
  std::vector<std::int64_t> start(chains->arcs.size(), -1);
  for (std::size_t c = 0; c < chains->arcs.size(); ++c) start[c] = chains->arcs[c].lower;
  if (initial) {
    std::vector<char> set(chains->arcs.size(), 0);
    for (std::size_t i = 0; i < arcs.size(); ++i) {
      const int c = chains->chain_of[i];
      if (set[c]) continue;
      set[c] = 1;
      start[c] = std::clamp((*initial)[i], chains->arcs[c].lower, chains->arcs[c].upper);
    }
  }
  const auto chain_flow = dinic_flow(n, chains->arcs, start, source, sink, feasibility);
  if (!chain_flow) return std::nullopt;
  std::vector<std::int64_t> flow(arcs.size());
  for (std::size_t i = 0; i < arcs.size(); ++i) flow[i] = (*chain_flow)[chains->chain_of[i]];
  return flow;
}

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
    return boost::get(boost::edge_capacity, graph, e) -
           boost::get(boost::edge_residual_capacity, graph, e);
  }
  long run(int s, int t) { return boost::push_relabel_max_flow(graph, s, t); }
  Graph graph;
};

// Follows the reference planner literally: feasible flow on a fresh network, then a second
// max flow on a network built from the residual capacities.
std::optional<std::vector<std::int64_t>> with_boost(int n, const std::vector<BoundedArc>& arcs,
                                                    int source, int sink, Feasibility feasibility) {
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

}  // namespace

std::optional<std::vector<std::int64_t>> bounded_max_flow(int num_nodes,
                                                          const std::vector<BoundedArc>& arcs,
                                                          int source, int sink,
                                                          MaxFlowAlgorithm algorithm,
                                                          const std::vector<std::int64_t>* initial,
                                                          Feasibility feasibility) {
  if (algorithm == MaxFlowAlgorithm::boost_push_relabel) return with_boost(num_nodes, arcs, source, sink, feasibility);
  return with_dinic(num_nodes, arcs, initial, source, sink, feasibility);
}

bool demand_met(std::int64_t capacity, std::int64_t flow, Feasibility rule) {
  const std::int64_t shortfall = capacity - flow;
  if (shortfall <= 0) return true;
  if (shortfall >= 2 || rule == Feasibility::exact) return false;
  constexpr double kFpError = 1e-6;
  return !(static_cast<double>(capacity) * kFpError - static_cast<double>(flow) * kFpError > kFpError);
}

}  // namespace perseus
