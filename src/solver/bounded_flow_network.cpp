#include "perseus/solver/bounded_flow_network.hpp"

#include <algorithm>
#include <limits>

namespace perseus {

namespace {
constexpr std::int64_t kUnbounded = std::numeric_limits<std::int64_t>::max() / 8;
}  // namespace

bool BoundedFlowNetwork::same_arcs(int num_nodes, const std::vector<BoundedArc>& arcs, int source, int sink) const {
  if (num_nodes != n_ || source != source_ || sink != sink_ || arcs.size() != ends_.size()) return false;
  for (std::size_t i = 0; i < arcs.size(); ++i)
    if (arcs[i].from != ends_[i].first || arcs[i].to != ends_[i].second) return false;
  return true;
}

// Chains of arcs in series become one arc each. The critical subgraphs of pipeline DAGs are
// mostly such chains, which shrinks the network several times.
void BoundedFlowNetwork::contract_series(const std::vector<BoundedArc>& arcs) {
  in_degree_.assign(n_, 0);
  out_degree_.assign(n_, 0);
  out_arc_.assign(n_, -1);
  for (std::size_t i = 0; i < arcs.size(); ++i) {
    ++in_degree_[arcs[i].to];
    ++out_degree_[arcs[i].from];
    out_arc_[arcs[i].from] = static_cast<int>(i);
  }
  auto through = [&](int v) { return v != source_ && v != sink_ && in_degree_[v] == 1 && out_degree_[v] == 1; };
  chains_.clear();
  chain_first_.clear();
  chain_of_.assign(arcs.size(), -1);
  members_.clear();
  member_start_.assign(1, 0);
  for (std::size_t first = 0; first < arcs.size(); ++first) {
    if (through(arcs[first].from)) continue;  // not the head of its chain
    const int id = static_cast<int>(chains_.size());
    int current = static_cast<int>(first), lowest = current;
    chain_of_[current] = id;
    members_.push_back(current);
    while (through(arcs[current].to)) {
      current = out_arc_[arcs[current].to];
      chain_of_[current] = id;
      members_.push_back(current);
      lowest = std::min(lowest, current);
    }
    chains_.push_back({arcs[first].from, arcs[current].to, 0, 0});
    chain_first_.push_back(lowest);
    member_start_.push_back(static_cast<int>(members_.size()));
  }
  // Arcs on a cycle of through nodes have no head; a DAG has none, but stay correct regardless.
  for (std::size_t i = 0; i < arcs.size(); ++i) {
    if (chain_of_[i] < 0) {
      chain_of_[i] = static_cast<int>(chains_.size());
      chains_.push_back(arcs[i]);
      chain_first_.push_back(static_cast<int>(i));
      members_.push_back(static_cast<int>(i));
      member_start_.push_back(static_cast<int>(members_.size()));
    }
  }
  const int num_chains = static_cast<int>(chains_.size());
  // From here on nodes are the chains' ends only (and the source and sink), numbered densely in
  // the order of their numbers in `arcs` (so every search visits edges in the same order as over
  // all nodes): the residual network and the cut's search never see the nodes inside chains.
  std::vector<int>& end_id = in_degree_;  // scratch, no longer needed
  end_id.assign(n_, -1);
  end_id[source_] = end_id[sink_] = 0;
  for (const auto& chain : chains_) end_id[chain.from] = end_id[chain.to] = 0;
  m_ = 0;
  for (int v = 0; v < n_; ++v)
    if (end_id[v] == 0) end_id[v] = m_++;
  for (auto& chain : chains_) chain.from = end_id[chain.from], chain.to = end_id[chain.to];
  end_source_ = end_id[source_];
  end_sink_ = end_id[sink_];
  lay_out_ends_by_search();
  // The chains at each end, for the cut's search.
  ends_start_.assign(m_ + 1, 0);
  for (const auto& chain : chains_) ++ends_start_[chain.from + 1], ++ends_start_[chain.to + 1];
  for (int v = 0; v < m_; ++v) ends_start_[v + 1] += ends_start_[v];
  ends_at_.resize(2 * chains_.size());
  ends_other_.resize(2 * chains_.size());
  std::vector<int>& fill = out_arc_;  // scratch, no longer needed
  fill.assign(ends_start_.begin(), ends_start_.end() - 1);
  for (int c = 0; c < num_chains; ++c) {
    const int leaving = fill[chains_[c].from]++, entering = fill[chains_[c].to]++;
    ends_at_[leaving] = chain_direction(c, true);  // leaves the node
    ends_other_[leaving] = chains_[c].to;
    ends_at_[entering] = chain_direction(c, false);  // enters it
    ends_other_[entering] = chains_[c].from;
  }
  chain_ref_.clear();
  end_chains_.clear();
  for (int c = 0; c < num_chains; ++c)
    if (chains_[c].from == end_source_ || chains_[c].to == end_source_ || chains_[c].from == end_sink_ ||
        chains_[c].to == end_sink_)
      end_chains_.push_back(c);
}

// Where the ends lie in memory: in the order a search from the source along the chains meets them,
// so that the flow's searches (which mostly go that way) read the network nearly in order instead
// of jumping between stages. Only where nodes lie changes: each node's edges keep their order, and
// the helper edges are added in the ends' first numbering (helper_order_), so every search takes
// the same steps as before.
void BoundedFlowNetwork::lay_out_ends_by_search() {
  const int num_chains = static_cast<int>(chains_.size());
  std::vector<int>& out_start = ends_start_;  // scratch, filled for the cut afterwards
  std::vector<int>& out = ends_at_;
  std::vector<int>& fill = out_arc_;
  out_start.assign(m_ + 1, 0);
  out.resize(num_chains);
  for (const auto& chain : chains_) ++out_start[chain.from + 1];
  for (int v = 0; v < m_; ++v) out_start[v + 1] += out_start[v];
  fill.assign(out_start.begin(), out_start.end() - 1);
  for (int c = 0; c < num_chains; ++c) out[fill[chains_[c].from]++] = chains_[c].to;
  std::vector<int>& place = helper_order_;  // per end in the first numbering: its place
  place.assign(m_, -1);
  std::vector<int>& order = ends_other_;
  order.clear();
  order.reserve(m_);
  auto meet = [&](int v) {
    if (place[v] >= 0) return;
    place[v] = static_cast<int>(order.size());
    order.push_back(v);
  };
  meet(end_source_);
  for (std::size_t k = 0; k < order.size(); ++k)
    for (int i = out_start[order[k]]; i < out_start[order[k] + 1]; ++i) meet(out[i]);
  for (int v = 0; v < m_; ++v) meet(v);
  for (auto& chain : chains_) chain.from = place[chain.from], chain.to = place[chain.to];
  end_source_ = place[end_source_];
  end_sink_ = place[end_sink_];
}

void BoundedFlowNetwork::build_network() {
  const int super_source = m_, super_sink = m_ + 1;
  dinic_.reset(m_ + 2, 2 * static_cast<int>(chains_.size()));
  chain_edge_.clear();
  for (int c = 0; c < static_cast<int>(chains_.size()); ++c) {
    const int edge = dinic_.add_edge(chains_[c].from, chains_[c].to, 0);
    dinic_.set_label(edge, chain_direction(c, true));
    dinic_.set_label(Dinic::reverse(edge), chain_direction(c, false));
    chain_edge_.push_back(edge);
  }
  supply_edge_.resize(m_);
  drain_edge_.resize(m_);
  for (int v : helper_order_) {
    supply_edge_[v] = dinic_.add_edge(super_source, v, 0);
    drain_edge_[v] = dinic_.add_edge(v, super_sink, 0);
  }
  back_edge_ = dinic_.add_edge(end_sink_, end_source_, 0);
  excess_.assign(m_, 0);
  listed_.assign(m_, 0);
  touched_.assign(chains_.size(), 0);
}

// A chain's bounds are [max lower, min upper] over its arcs. False when they leave no feasible
// flow: a node in the chain falls short by the difference, and the rule decides, as at any node.
bool BoundedFlowNetwork::set_chain_bounds(int c, const std::vector<BoundedArc>& arcs, Feasibility feasibility) {
  std::int64_t lower = std::numeric_limits<std::int64_t>::min(), upper = std::numeric_limits<std::int64_t>::max();
  for (int k = member_start_[c]; k < member_start_[c + 1]; ++k) {
    lower = std::max(lower, arcs[members_[k]].lower);
    upper = std::min(upper, arcs[members_[k]].upper);
  }
  if (lower > upper) {
    if (!demand_met(lower, upper, feasibility)) return false;
    lower = upper;
  }
  if (checkpointing_) saved_bounds_.push({c, {chains_[c].lower, chains_[c].upper}});
  chains_[c].lower = lower;
  chains_[c].upper = upper;
  return true;
}

void BoundedFlowNetwork::add_excess(int node, std::int64_t amount) {
  excess_[node] += amount;
  if (!listed_[node]) {
    listed_[node] = 1;
    unbalanced_.push_back(node);
  }
}

// From a flow within the bounds that conserves everywhere except at the listed nodes: first a
// feasible flow (their imbalances routed between supply and drain edges, with the sink -> source
// edge open), then a maximum s-t flow on the chain edges. Leaves every helper closed and every
// excess zero.
bool BoundedFlowNetwork::route(Feasibility feasibility) {
  const int super_source = m_, super_sink = m_ + 1;
  std::int64_t demand = 0;
  for (int v : unbalanced_) {
    const std::int64_t e = excess_[v];
    if (e > 0) {
      dinic_.set_residual(supply_edge_[v], e);
      demand += e;
    } else if (e < 0) {
      dinic_.set_residual(drain_edge_[v], -e);
    }
  }
  dinic_.set_residual(back_edge_, kUnbounded);
  dinic_.set_residual(Dinic::reverse(back_edge_), 0);
  bool feasible = true;
  carried_.clear();
  if (dinic_.max_flow(super_source, super_sink, demand) < demand) {
    // Short: feasible only if every node's shortfall passes the rule (the reference's per-node check).
    // What a node keeps of its imbalance stays in the flow the next call starts from.
    for (int v : unbalanced_) {
      const std::int64_t e = excess_[v];
      if (e == 0) continue;
      const int edge = e > 0 ? supply_edge_[v] : drain_edge_[v];
      const std::int64_t capacity = e > 0 ? e : -e;
      const std::int64_t left = dinic_.residual(edge);
      feasible = feasible && demand_met(capacity, capacity - left, feasibility);
      if (left > 0 && v != end_source_ && v != end_sink_) carried_.push_back({v, e > 0 ? left : -left});
    }
  }
  for (int v : unbalanced_) {
    for (int edge : {supply_edge_[v], drain_edge_[v]}) {
      dinic_.set_residual(edge, 0);
      dinic_.set_residual(Dinic::reverse(edge), 0);
    }
    excess_[v] = 0;
    listed_[v] = 0;
  }
  unbalanced_.clear();
  dinic_.set_residual(back_edge_, 0);
  dinic_.set_residual(Dinic::reverse(back_edge_), 0);
  if (!feasible) return false;
  dinic_.max_flow(end_source_, end_sink_, kUnbounded, /*first_only=*/true);
  has_flow_ = true;
  return true;
}

bool BoundedFlowNetwork::solve(int num_nodes, const std::vector<BoundedArc>& arcs, int source, int sink,
                               const std::vector<std::int64_t>* initial, Feasibility feasibility) {
  if (!same_arcs(num_nodes, arcs, source, sink)) {
    n_ = num_nodes, source_ = source, sink_ = sink;
    contract_series(arcs);
    build_network();
    ends_.resize(arcs.size());
    for (std::size_t i = 0; i < arcs.size(); ++i) ends_[i] = {arcs[i].from, arcs[i].to};
  }
  has_flow_ = false;
  const int num_chains = static_cast<int>(chains_.size());
  for (int c = 0; c < num_chains; ++c)
    if (!set_chain_bounds(c, arcs, feasibility)) return false;
  // Each chain starts from its lowest-numbered arc's warm start (or its lower bound).
  for (int c = 0; c < num_chains; ++c) {
    const BoundedArc& chain = chains_[c];
    const std::int64_t x = initial ? std::clamp((*initial)[chain_first_[c]], chain.lower, chain.upper) : chain.lower;
    dinic_.set_residual(chain_edge_[c], chain.upper - x);
    dinic_.set_residual(Dinic::reverse(chain_edge_[c]), x - chain.lower);
    add_excess(chain.to, x);
    add_excess(chain.from, -x);
  }
  return route(feasibility);
}

// The last flow conserves at every node but the source and sink (which carry its value) and the
// nodes whose shortfall the rule let pass (carried_); moving a changed chain's flow into its new
// bounds unbalances only that chain's ends. The imbalances are those a start from scratch with
// the last flow as its warm start sees.
bool BoundedFlowNetwork::resolve(const std::vector<BoundedArc>& arcs, const std::vector<int>& changed,
                                 Feasibility feasibility) {
  if (!has_flow_) return solve(n_, arcs, source_, sink_, nullptr, feasibility);
  has_flow_ = false;
  for (int c : end_chains_) {
    const std::int64_t f = chains_[c].upper - dinic_.residual(chain_edge_[c]);
    for (int v : {end_source_, end_sink_}) {
      if (chains_[c].to == v) add_excess(v, f);
      if (chains_[c].from == v) add_excess(v, -f);
    }
  }
  for (const auto& [v, e] : carried_) add_excess(v, e);
  touched_chains_.clear();
  for (int arc : changed) {
    const int c = chain_of_[arc];
    if (!touched_[c]) {
      touched_[c] = 1;
      touched_chains_.push_back(c);
    }
  }
  bool bounds_ok = true;
  for (int c : touched_chains_) {
    touched_[c] = 0;
    if (!bounds_ok) continue;
    const std::int64_t f = chains_[c].upper - dinic_.residual(chain_edge_[c]);
    if (!set_chain_bounds(c, arcs, feasibility)) {
      bounds_ok = false;
      continue;
    }
    const BoundedArc& chain = chains_[c];
    const std::int64_t x = std::clamp(f, chain.lower, chain.upper);
    dinic_.set_residual(chain_edge_[c], chain.upper - x);
    dinic_.set_residual(Dinic::reverse(chain_edge_[c]), x - chain.lower);
    add_excess(chain.to, x - f);
    add_excess(chain.from, f - x);
  }
  if (!bounds_ok) {
    for (int v : unbalanced_) excess_[v] = 0, listed_[v] = 0;
    unbalanced_.clear();
    return false;
  }
  return route(feasibility);
}

void BoundedFlowNetwork::checkpoint(Checkpoint& into) {
  checkpointing_ = true;
  into.journal = dinic_.journal_mark();
  into.bounds = saved_bounds_.mark();
  into.carried = carried_;
}

void BoundedFlowNetwork::undo_to(const Checkpoint& checkpoint) {
  dinic_.rollback_to(checkpoint.journal);
  saved_bounds_.undo_to(checkpoint.bounds, [&](const auto& entry) {
    chains_[entry.first].lower = entry.second.first;
    chains_[entry.first].upper = entry.second.second;
  });
  carried_ = checkpoint.carried;
  has_flow_ = true;
}

void BoundedFlowNetwork::forget_before(const Checkpoint& checkpoint) {
  dinic_.forget_before(checkpoint.journal);
  saved_bounds_.forget_before(checkpoint.bounds);
}

void BoundedFlowNetwork::end_checkpoints() {
  checkpointing_ = false;
  saved_bounds_.clear();
  dinic_.end_journal();
}

// The first arc of chain c that is closed, from its start forward or from its end backward; -1
// when none is. The chain's residual is its tightest arc's: two units or more leave every arc
// open, so only a chain with one unit or none is walked.
int BoundedFlowNetwork::first_closed(int c, bool forward, const std::vector<BoundedArc>& arcs, Feasibility rule) const {
  if (chain_residual(c, forward) >= 2) return -1;
  return walk_to_closed(c, forward, arcs, rule);
}

// Whether every arc of chain c is open that way, given the chain's residual that way. No residual
// closes the tightest arc, two units or more open every arc: only one unit needs the walk.
bool BoundedFlowNetwork::chain_open(int c, bool forward, std::int64_t residual, const std::vector<BoundedArc>& arcs,
                                    Feasibility rule) const {
  if (residual <= 0) return false;
  return residual >= 2 || walk_to_closed(c, forward, arcs, rule) < 0;
}

// first_closed's walk, arc by arc.
int BoundedFlowNetwork::walk_to_closed(int c, bool forward, const std::vector<BoundedArc>& arcs,
                                       Feasibility rule) const {
  const std::int64_t f = chains_[c].upper - dinic_.residual(chain_ref_[chain_direction(c, true)]);
  const int begin = member_start_[c], end = member_start_[c + 1];
  for (int k = 0; k < end - begin; ++k) {
    const int i = members_[forward ? begin + k : end - 1 - k];
    const bool open = forward ? residual_open(arcs[i].upper, f, rule) : residual_open(f, arcs[i].lower, rule);
    if (!open) return k;
  }
  return -1;
}

// The source side is what the source reaches through open chains: a chain lets the search on when
// all its arcs are open that way. The last maximum-flow search labelled what the source reaches
// through positive residuals; where each node it reached was first reached through an open chain
// (always under the exact rule; under the reference rule, chains of one unit are checked), its
// labels are the side already, and otherwise the side is those labels less the nodes the rule cuts
// off (narrow_side). Then each chain with an end on the source side is walked from that end to its
// first closed arc, the cut's edge there.
void BoundedFlowNetwork::min_cut(const std::vector<BoundedArc>& arcs, Feasibility rule, std::vector<int>& forward,
                                 std::vector<int>& backward) {
  forward.clear();
  backward.clear();
  if (chain_ref_.empty()) {
    for (int edge : chain_edge_)
      chain_ref_.push_back(dinic_.placed(edge)), chain_ref_.push_back(dinic_.placed(Dinic::reverse(edge)));
    end_ref_.resize(ends_at_.size());
    for (std::size_t k = 0; k < ends_at_.size(); ++k) end_ref_[k] = chain_ref_[ends_at_[k]];
  }
  if (cut_off_.size() != static_cast<std::size_t>(m_)) cut_off_.assign(m_, 0);
  bool searched = dinic_.residual_side_known();
  bool narrowed = false;
  if (searched && rule != Feasibility::exact) {
    for (Dinic::EdgeRef edge : dinic_.residual_side_unit_edges()) {
      const int k = dinic_.label(edge);  // a chain direction
      if (k < 0) {                       // reached by a helper edge: not a search of the chains
        searched = false;
        break;
      }
      if (!chain_open(chain_of_direction(k), is_forward(k), dinic_.residual(edge), arcs, rule)) {
        cut_off_[!is_forward(k) ? chains_[chain_of_direction(k)].from : chains_[chain_of_direction(k)].to] = 1;
        narrowed = true;
      }
    }
    if (!searched) {
      for (Dinic::EdgeRef edge : dinic_.residual_side_unit_edges())
        if (const int k = dinic_.label(edge); k >= 0)
          cut_off_[!is_forward(k) ? chains_[chain_of_direction(k)].from : chains_[chain_of_direction(k)].to] = 0;
      narrowed = false;
    }
  }
  if (narrowed) {
    narrow_side(arcs, rule);
    cut_edges(
        arcs, rule, dinic_.residual_side(), dinic_.residual_side_size(),
        [&](int v) { return dinic_.on_residual_side(v) && !cut_off_[v]; }, forward, backward);
    for (int v : cut_off_nodes_) cut_off_[v] = 0;
  } else if (searched) {
    cut_edges(
        arcs, rule, dinic_.residual_side(), dinic_.residual_side_size(),
        [&](int v) { return dinic_.on_residual_side(v); }, forward, backward);
  } else {
    search_side(arcs, rule);
    cut_edges(
        arcs, rule, side_.data(), static_cast<int>(side_.size()), [&](int v) { return in_side_[v] != 0; }, forward,
        backward);
  }
  std::sort(forward.begin(), forward.end());
  std::sort(backward.begin(), backward.end());
}

// The search's labels less what the rule cuts off, with cut_off_ marking the nodes first reached
// through a closed chain. Every node whose search-tree path crosses no such chain is on the side
// (its path is open); the others (the marked nodes' subtrees, marked in search order, where each
// node comes after its parent) are on it only where an open chain leads to them from the side,
// which a search among just those nodes finds. Work: one pass over the labels, and the cut-off
// nodes' chains (usually a handful of nodes) instead of a search of the whole side.
void BoundedFlowNetwork::narrow_side(const std::vector<BoundedArc>& arcs, Feasibility rule) {
  const int* side = dinic_.residual_side();
  const int* parent = dinic_.residual_side_parents();
  const int size = dinic_.residual_side_size();
  cut_off_nodes_.clear();
  for (int p = 1; p < size; ++p) {
    const int v = side[p];
    if (cut_off_[v] || cut_off_[parent[p]]) {
      cut_off_[v] = 1;
      cut_off_nodes_.push_back(v);
    }
  }
  // The chain at entry k of node v's ends, taken from its other end into v: open?
  auto open_into = [&](int k) {
    const int c = chain_of_direction(ends_at_[k]);
    const bool forward = !is_forward(ends_at_[k]);  // the chain enters v: its forward direction
    return chain_open(c, forward, chain_residual(c, forward), arcs, rule);
  };
  auto open_from = [&](int k) {
    const int c = chain_of_direction(ends_at_[k]);
    const bool forward = is_forward(ends_at_[k]);  // the chain leaves v
    return chain_open(c, forward, chain_residual(c, forward), arcs, rule);
  };
  std::vector<int>& back = side_;  // scratch: nodes found on the side again, to search from
  back.clear();
  for (int v : cut_off_nodes_) {
    for (int k = ends_start_[v]; k < ends_start_[v + 1]; ++k) {
      const int w = ends_other_[k];
      if (dinic_.on_residual_side(w) && !cut_off_[w] && open_into(k)) {
        cut_off_[v] = 0;
        back.push_back(v);
        break;
      }
    }
  }
  for (std::size_t next = 0; next < back.size(); ++next) {
    const int u = back[next];
    for (int k = ends_start_[u]; k < ends_start_[u + 1]; ++k) {
      const int w = ends_other_[k];
      if (cut_off_[w] && open_from(k)) {
        cut_off_[w] = 0;
        back.push_back(w);
      }
    }
  }
}

void BoundedFlowNetwork::search_side(const std::vector<BoundedArc>& arcs, Feasibility rule) {
  in_side_.assign(m_, 0);
  side_.clear();
  side_.push_back(end_source_);
  in_side_[end_source_] = 1;
  for (std::size_t next = 0; next < side_.size(); ++next) {
    const int u = side_[next];
    for (int k = ends_start_[u]; k < ends_start_[u + 1]; ++k) {
      const int v = ends_other_[k];
      if (in_side_[v]) continue;
      if (chain_open(chain_of_direction(ends_at_[k]), is_forward(ends_at_[k]), dinic_.residual(end_ref_[k]), arcs,
                     rule)) {
        in_side_[v] = 1;
        side_.push_back(v);
      }
    }
  }
}

template <typename InSide>
void BoundedFlowNetwork::cut_edges(const std::vector<BoundedArc>& arcs, Feasibility rule, const int* side,
                                   int side_size, InSide in_side, std::vector<int>& forward,
                                   std::vector<int>& backward) const {
  for (int s = 0; s < side_size; ++s) {
    const int u = side[s];
    if (!in_side(u)) continue;  // labelled, but cut off (narrow_side)
    // u's chains as the network lays them out (each chain's edge at its start, its reverse edge at
    // its end): read in order, where the ends' lists would be read all over memory.
    for (Dinic::EdgeRef edge : dinic_.first_edges(u)) {
      const int k = dinic_.label(edge);
      const bool leaves = is_forward(k);
      const bool other_in = in_side(dinic_.head(edge));
      if (other_in && !leaves) continue;                     // inside: seen from its start
      if (other_in && dinic_.residual(edge) >= 2) continue;  // inside, every arc open ahead
      const int c = chain_of_direction(k);
      const bool start_in = leaves || other_in, end_in = !leaves || other_in;
      const int length = member_start_[c + 1] - member_start_[c];
      // From the start, nodes up to the first closed arc are on the source side; from the end, back
      // to the first closed arc walking backward. With both ends inside, the two walks may meet.
      const int ahead = start_in ? first_closed(c, true, arcs, rule) : -1;
      if (start_in && end_in && ahead < 0) continue;
      const int behind = end_in ? first_closed(c, false, arcs, rule) : -1;
      if (start_in && end_in && (behind < 0 || ahead + behind >= length - 1)) continue;
      if (ahead >= 0) forward.push_back(members_[member_start_[c] + ahead]);
      if (behind >= 0) backward.push_back(members_[member_start_[c + 1] - 1 - behind]);
    }
  }
}

}  // namespace perseus
