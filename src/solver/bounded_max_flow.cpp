#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/push_relabel_max_flow.hpp>
#include <algorithm>
#include <limits>

#include "perseus/solver/max_flow.hpp"

namespace perseus {

namespace {

constexpr std::int64_t kUnbounded = std::numeric_limits<std::int64_t>::max() / 8;

// Buffers of the Dinic path, kept per thread so that a planner's thousands of calls reuse them.
struct Workspace {
  Dinic dinic;
  std::vector<int> in_degree, out_degree, out_arc;
  std::vector<BoundedArc> chain_arcs;  // one per chain
  std::vector<int> chain_of;           // per original arc
  std::vector<std::int64_t> start, chain_flow, excess, helper_capacity;
  std::vector<char> set;
  std::vector<int> arc_edge, helper_edges;
};

// Arcs in series (joined by a node with exactly one arc in and one out) carry the same flow, so
// a chain becomes one arc with bounds [max lower, min upper]. The critical subgraphs of pipeline
// DAGs are mostly such chains, which shrinks the network several times. Fills w.chain_arcs and
// w.chain_of; false when a chain's bounds leave no feasible flow.
bool contract_series(int n, const std::vector<BoundedArc>& arcs, int source, int sink, Feasibility feasibility,
                     Workspace& w) {
  w.in_degree.assign(n, 0);
  w.out_degree.assign(n, 0);
  w.out_arc.assign(n, -1);
  for (std::size_t i = 0; i < arcs.size(); ++i) {
    ++w.in_degree[arcs[i].to];
    ++w.out_degree[arcs[i].from];
    w.out_arc[arcs[i].from] = static_cast<int>(i);
  }
  auto through = [&](int v) {
    return v != source && v != sink && w.in_degree[v] == 1 && w.out_degree[v] == 1;
  };
  w.chain_arcs.clear();
  w.chain_of.assign(arcs.size(), -1);
  for (std::size_t first = 0; first < arcs.size(); ++first) {
    if (through(arcs[first].from)) continue;  // not the head of its chain
    const int id = static_cast<int>(w.chain_arcs.size());
    BoundedArc merged = arcs[first];
    int current = static_cast<int>(first);
    w.chain_of[current] = id;
    while (through(arcs[current].to)) {
      current = w.out_arc[arcs[current].to];
      w.chain_of[current] = id;
      merged.lower = std::max(merged.lower, arcs[current].lower);
      merged.upper = std::min(merged.upper, arcs[current].upper);
    }
    merged.to = arcs[current].to;
    if (merged.lower > merged.upper) {  // no flow fits every arc of the chain
      // A node in the chain falls short by the difference: the rule decides, as at any node.
      if (!demand_met(merged.lower, merged.upper, feasibility)) return false;
      merged.lower = merged.upper;
    }
    w.chain_arcs.push_back(merged);
  }
  // Arcs on a cycle of through nodes have no head; a DAG has none, but stay correct regardless.
  for (std::size_t i = 0; i < arcs.size(); ++i) {
    if (w.chain_of[i] < 0) {
      w.chain_of[i] = static_cast<int>(w.chain_arcs.size());
      w.chain_arcs.push_back(arcs[i]);
    }
  }
  return true;
}

// Starts from `initial` (within the bounds, not necessarily conserving flow): the solver passes
// the previous iteration's flow, so that only the few nodes whose balance changed need routing.
bool dinic_flow(int n, const std::vector<BoundedArc>& arcs, const std::vector<std::int64_t>& initial, int source,
                int sink, Feasibility feasibility, Workspace& w, std::vector<std::int64_t>& flow) {
  Dinic& dinic = w.dinic;
  const int super_source = n, super_sink = n + 1;
  dinic.reset(n + 2);
  w.arc_edge.resize(arcs.size());
  w.excess.assign(n, 0);
  for (std::size_t i = 0; i < arcs.size(); ++i) {
    const auto& arc = arcs[i];
    const std::int64_t x = initial[i];
    w.arc_edge[i] = dinic.add_edge(arc.from, arc.to, arc.upper - x);
    dinic.set_residual(w.arc_edge[i] ^ 1, x - arc.lower);
    w.excess[arc.to] += x;
    w.excess[arc.from] -= x;
  }
  w.helper_edges.clear();
  w.helper_capacity.clear();
  std::int64_t demand = 0;
  for (int v = 0; v < n; ++v) {
    if (w.excess[v] > 0) {
      w.helper_edges.push_back(dinic.add_edge(super_source, v, w.excess[v]));
      w.helper_capacity.push_back(w.excess[v]);
      demand += w.excess[v];
    } else if (w.excess[v] < 0) {
      w.helper_edges.push_back(dinic.add_edge(v, super_sink, -w.excess[v]));
      w.helper_capacity.push_back(-w.excess[v]);
    }
  }
  const int back_edge = dinic.add_edge(sink, source, kUnbounded);
  if (dinic.max_flow(super_source, super_sink, demand) < demand) {
    // Short: feasible only if every node's shortfall passes the rule (the reference's per-node check).
    for (std::size_t h = 0; h < w.helper_edges.size(); ++h) {
      const std::int64_t capacity = w.helper_capacity[h];
      if (!demand_met(capacity, capacity - dinic.residual(w.helper_edges[h]), feasibility)) return false;
    }
  }
  // Drop the helpers: what remains on the original arcs is a feasible s-t flow.
  for (int e : w.helper_edges) {
    dinic.set_residual(e, 0);
    dinic.set_residual(e ^ 1, 0);
  }
  dinic.set_residual(back_edge, 0);
  dinic.set_residual(back_edge ^ 1, 0);
  dinic.max_flow(source, sink, kUnbounded);
  flow.resize(arcs.size());
  for (std::size_t i = 0; i < arcs.size(); ++i) flow[i] = arcs[i].upper - dinic.residual(w.arc_edge[i]);
  return true;
}

bool with_dinic(int n, const std::vector<BoundedArc>& arcs, const std::vector<std::int64_t>* initial, int source,
                int sink, Feasibility feasibility, std::vector<std::int64_t>& flow) {
  thread_local Workspace w;
  if (!contract_series(n, arcs, source, sink, feasibility, w)) return false;
  const std::size_t chains = w.chain_arcs.size();
  w.start.resize(chains);
  for (std::size_t c = 0; c < chains; ++c) w.start[c] = w.chain_arcs[c].lower;
  if (initial) {
    w.set.assign(chains, 0);
    for (std::size_t i = 0; i < arcs.size(); ++i) {
      const int c = w.chain_of[i];
      if (w.set[c]) continue;
      w.set[c] = 1;
      w.start[c] = std::clamp((*initial)[i], w.chain_arcs[c].lower, w.chain_arcs[c].upper);
    }
  }
  if (!dinic_flow(n, w.chain_arcs, w.start, source, sink, feasibility, w, w.chain_flow)) return false;
  flow.resize(arcs.size());
  for (std::size_t i = 0; i < arcs.size(); ++i) flow[i] = w.chain_flow[w.chain_of[i]];
  return true;
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

bool bounded_max_flow_into(int num_nodes, const std::vector<BoundedArc>& arcs, int source, int sink,
                           MaxFlowAlgorithm algorithm, const std::vector<std::int64_t>* initial,
                           Feasibility feasibility, std::vector<std::int64_t>& flow) {
  if (algorithm == MaxFlowAlgorithm::boost_push_relabel) {
    auto result = with_boost(num_nodes, arcs, source, sink, feasibility);
    if (!result) return false;
    flow = std::move(*result);
    return true;
  }
  return with_dinic(num_nodes, arcs, initial, source, sink, feasibility, flow);
}

std::optional<std::vector<std::int64_t>> bounded_max_flow(int num_nodes,
                                                          const std::vector<BoundedArc>& arcs,
                                                          int source, int sink,
                                                          MaxFlowAlgorithm algorithm,
                                                          const std::vector<std::int64_t>* initial,
                                                          Feasibility feasibility) {
  std::vector<std::int64_t> flow;
  if (!bounded_max_flow_into(num_nodes, arcs, source, sink, algorithm, initial, feasibility, flow)) return std::nullopt;
  return flow;
}

bool demand_met(std::int64_t capacity, std::int64_t flow, Feasibility rule) {
  const std::int64_t shortfall = capacity - flow;
  if (shortfall <= 0) return true;
  if (shortfall >= 2 || rule == Feasibility::exact) return false;
  constexpr double kFpError = 1e-6;
  return !(static_cast<double>(capacity) * kFpError - static_cast<double>(flow) * kFpError > kFpError);
}

}  // namespace perseus
