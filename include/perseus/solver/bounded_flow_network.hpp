#pragma once
// A maximum flow within bounds that a caller solves again and again on the same arcs with a few
// bounds changed: the planner's consecutive frontier points (99.9% of them on GPT-3 A40, 96
// microbatches, share their critical arcs, and a step changes a handful of durations; where
// critical arcs come and go, as on zero-bubble schedules, the planner keeps the ones that left
// with bounds [0, 0], so that those changes are new bounds too). What
// depends only on the arcs' endpoints (the series contraction, the residual network) is built
// once; a re-solve starts from the last flow, so only the endpoints of the changed arcs (and the
// source and sink) are out of balance, and its work follows the change, not the network.
// The flow is max_flow.hpp's two-phase one (a feasible circulation, then a maximum flow on its
// residual), each phase by Dinic, warm-started from the last flow.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "perseus/solver/max_flow.hpp"
#include "perseus/util/undo_log.hpp"

namespace perseus {

class BoundedFlowNetwork {
 public:
  // New arcs: contracted and built anew, the flow started from `initial` (per arc, clamped to its
  // bounds; nullptr: the lower bounds). False when no flow meets the lower bounds.
  bool solve(int num_nodes, const std::vector<BoundedArc>& arcs, int source, int sink,
             const std::vector<std::int64_t>* initial, Feasibility feasibility);
  // The arcs of the last call, where only those listed in `changed` (indices into `arcs`, any
  // order, repeats allowed) have new bounds; starts from the last flow.
  bool resolve(const std::vector<BoundedArc>& arcs, const std::vector<int>& changed, Feasibility feasibility);
  // The arcs a minimum cut of the last flow crosses. Its source side is what the source reaches
  // through open residuals (per arc, residual_open under `rule`: the side closest to the source,
  // the same for every maximum flow when the rule is exact); `forward` gets the arcs (indices into
  // `arcs`, the bounds of the last call) leaving it, `backward` those entering it, each ascending.
  void min_cut(const std::vector<BoundedArc>& arcs, Feasibility rule, std::vector<int>& forward,
               std::vector<int>& backward);
  // Resolves that may be taken back (the planner solves the next points' flows while another
  // thread checks that their critical arcs stay the same): a checkpoint holds the flow, bounds and
  // state of the moment it was taken, undo_to() brings them back (later checkpoints are gone with
  // it), forget_before() drops what only an undo to an earlier checkpoint would need, and
  // end_checkpoints() all of it. Only while the network holds a flow (has_flow()).
  struct Checkpoint {
    std::size_t journal = 0, bounds = 0;
    std::vector<std::pair<int, std::int64_t>> carried;
  };
  bool has_flow() const { return has_flow_; }
  void checkpoint(Checkpoint& into);
  void undo_to(const Checkpoint& checkpoint);
  void forget_before(const Checkpoint& checkpoint);
  void end_checkpoints();
  // Whether `arcs` has the last call's endpoints (then resolve may be used).
  bool same_arcs(int num_nodes, const std::vector<BoundedArc>& arcs, int source, int sink) const;
  // The flow on arc `arc` of the last successful call.
  std::int64_t flow(int arc) const {
    const int c = chain_of_[arc];
    return chains_[c].upper - dinic_.residual(chain_edge_[c]);
  }

 private:
  void contract_series(const std::vector<BoundedArc>& arcs);
  void lay_out_ends_by_search();
  void build_network();
  bool set_chain_bounds(int chain, const std::vector<BoundedArc>& arcs, Feasibility feasibility);
  void add_excess(int node, std::int64_t amount);
  // A chain direction: chain c taken forward (its edge) or backward (its reverse edge), numbered
  // 2c and 2c + 1. ends_at_, chain_ref_ and the network's edge labels are indexed by or hold these.
  static int chain_direction(int c, bool forward) { return 2 * c + (forward ? 0 : 1); }
  static int chain_of_direction(int k) { return k >> 1; }
  static bool is_forward(int k) { return (k & 1) == 0; }
  std::int64_t chain_residual(int c, bool forward) const {
    return dinic_.residual(chain_ref_[chain_direction(c, forward)]);
  }
  bool chain_open(int c, bool forward, std::int64_t residual, const std::vector<BoundedArc>& arcs,
                  Feasibility rule) const;
  int first_closed(int c, bool forward, const std::vector<BoundedArc>& arcs, Feasibility rule) const;
  int walk_to_closed(int c, bool forward, const std::vector<BoundedArc>& arcs, Feasibility rule) const;
  bool route(Feasibility feasibility);
  void search_side(const std::vector<BoundedArc>& arcs, Feasibility rule);
  void narrow_side(const std::vector<BoundedArc>& arcs, Feasibility rule);
  template <typename InSide>
  void cut_edges(const std::vector<BoundedArc>& arcs, Feasibility rule, const int* side, int side_size, InSide in_side,
                 std::vector<int>& forward, std::vector<int>& backward) const;

  // The structure. Nodes are numbered as in `arcs` (n_, source_, sink_) until the contraction,
  // then as chain ends (m_, end_source_, end_sink_): chains_, the network and the cut use those.
  int n_ = -1, source_ = -1, sink_ = -1;
  int m_ = 0, end_source_ = -1, end_sink_ = -1;
  std::vector<std::pair<int, int>> ends_;  // per arc: (from, to)
  // Series contraction: arcs joined by a node with one arc in and one out carry the same flow.
  std::vector<int> chain_of_;                // per arc: its chain
  std::vector<int> chain_first_;             // per chain: its lowest-numbered arc
  std::vector<int> member_start_, members_;  // per chain: its arcs, start to end
  std::vector<int> ends_start_, ends_at_;    // per end: the chain direction leaving or entering it
  std::vector<int> ends_other_;              // per entry of ends_at_: the chain's other end
  std::vector<BoundedArc> chains_;           // per chain: its ends and bounds
  std::vector<int> end_chains_;              // chains that start or end at the source or sink
  // The residual network: an edge per chain, then a supply and a drain edge per node (open while
  // the node's balance is positive or negative, closed between calls), then the sink -> source
  // edge. It keeps the last flow between calls; the maximum-flow phase runs on the chain edges.
  Dinic dinic_;
  std::vector<int> chain_edge_, supply_edge_, drain_edge_;
  std::vector<int> helper_order_;  // the ends in the order their helper edges are added
  int back_edge_ = -1;
  // Each chain edge is labelled in the network with its chain direction (helper edges: -1).
  std::vector<Dinic::EdgeRef> chain_ref_;  // per chain direction: its edge (once laid out)
  std::vector<Dinic::EdgeRef> end_ref_;    // per entry of ends_at_: its chain's edge leaving that end
  bool has_flow_ = false;                  // the network holds a flow that met the bounds
  // Imbalances the last flow kept at nodes other than the source and sink: a shortfall the
  // feasibility rule let pass (one unit at most per node).
  std::vector<std::pair<int, std::int64_t>> carried_;
  // Per call: zero everywhere between calls.
  std::vector<std::int64_t> excess_;
  std::vector<int> unbalanced_;         // nodes with nonzero excess, each once
  std::vector<char> listed_, touched_;  // per node / per chain
  std::vector<int> touched_chains_;
  std::vector<char> in_side_;  // the cut's source side
  std::vector<char> cut_off_;  // per node, zero between calls: labelled by the search, off the side
  std::vector<int> cut_off_nodes_;
  std::vector<int> side_;
  std::vector<int> in_degree_, out_degree_, out_arc_;  // contraction scratch
  // While checkpoints are kept: each chain's bounds before a change.
  bool checkpointing_ = false;
  UndoLog<std::pair<int, std::pair<std::int64_t, std::int64_t>>> saved_bounds_;
};

}  // namespace perseus
