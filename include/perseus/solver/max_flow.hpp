#pragma once
// Maximum flow with lower and upper bounds on arcs, in integer units.
//
// Problem: on a directed graph whose arcs carry bounds lb <= f <= ub, find an s-t flow of maximum
// value that respects every bound, or say that none does. The Phillips–Dessouky solver needs one
// per frontier point, on the critical subgraph of the pipeline's DAG, to find the cheapest way to
// shorten the iteration (its minimum cut).
//
// Algorithm: the classic reduction of bounded flow to two plain maximum flows (Ahuja, Magnanti and
// Orlin, "Network Flows", 1993, §6.7): first a feasible circulation, with every lower bound moved to
// a super source and super sink and an unbounded t->s arc; then a maximum s-t flow on the residual
// of that circulation. Each plain maximum flow is Dinic's blocking-flow algorithm (E. A. Dinic,
// "Algorithm for solution of a problem of maximum flow in networks with power estimation", Soviet
// Math. Doklady 11, 1970), O(V^2 E), written for this graph's shape: BoundedFlowNetwork keeps one
// network across frontier points and re-solves from the last flow. Tests check it against
// Boost.Graph's push-relabel (Goldberg and Tarjan, J. ACM 35(4), 1988).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "perseus/util/undo_log.hpp"

namespace perseus {

struct BoundedArc {
  int from = 0;
  int to = 0;
  std::int64_t lower = 0;
  std::int64_t upper = 0;
};

// When the lower bounds count as met. exact: every unit. reference: as the reference planner
// decides it, per node in floating point (`abs(flow - capacity) > 1e-6` on values k * 1e-6), so a
// node whose lower bounds fall short by one 1e-6 unit may still count as satisfied.
enum class Feasibility { exact, reference };

// Whether `flow` units meet a demand of `capacity` units under `rule`.
inline bool demand_met(std::int64_t capacity, std::int64_t flow, Feasibility rule) {
  const std::int64_t shortfall = capacity - flow;
  if (shortfall <= 0) return true;
  if (shortfall >= 2 || rule == Feasibility::exact) return false;
  constexpr double kFpError = 1e-6;
  return !(static_cast<double>(capacity) * kFpError - static_cast<double>(flow) * kFpError > kFpError);
}
// Whether a residual of `high - low` units counts as open (an unsaturated arc) under `rule`: any
// unit, or as the reference decides `high - low > 1e-6` on values k * 1e-6.
inline bool residual_open(std::int64_t high, std::int64_t low, Feasibility rule) {
  const std::int64_t residual = high - low;
  if (residual >= 2) return true;
  if (residual <= 0) return false;
  if (rule == Feasibility::exact) return true;
  constexpr double kFpError = 1e-6;
  return static_cast<double>(high) * kFpError - static_cast<double>(low) * kFpError > kFpError;
}

// Plain max flow on a residual network; reusable across calls to avoid reallocations.
class Dinic {
 public:
  // `first_edges`: the edges with ids below it (an even count: both edges of a pair) are laid out
  // apart from the rest, node by node, so that a max_flow over just them reads no other edge's
  // memory (the planner's s-t phase runs on its chain edges, not on the helper edges of its
  // feasibility phase). Either way a node's edges are taken in the order they were added.
  void reset(int num_nodes, int first_edges = 0);
  int add_edge(int from, int to, std::int64_t capacity);  // returns the forward edge id
  // Edges come in pairs, forward then reverse: ids 2i and 2i + 1.
  static int reverse(int edge) { return edge ^ 1; }
  // `first_only`: only the first edges take part, as on a network of just those.
  std::int64_t max_flow(int source, int sink, std::int64_t limit, bool first_only = false);
  std::int64_t residual(int edge) const { return built_ ? slot_cap_[slot_of_[edge]] : cap_[edge]; }
  void set_residual(int edge, std::int64_t value) {
    if (!built_) {
      cap_[edge] = value;
      reached_count_ = -1;
      return;
    }
    const int slot = slot_of_[edge];
    if (journaling_) journal_.push({slot, slot_cap_[slot]});
    slot_cap_[slot] = value;
    reached_count_ = -1;
  }
  // An edge where it lies in the built network (once max_flow has run, until an edge is added):
  // reading through it costs no lookup, for callers that read the same edges again and again.
  class EdgeRef {
   public:
    EdgeRef() = default;

   private:
    friend class Dinic;
    explicit EdgeRef(int slot) : slot_(slot) {}
    int slot_ = -1;
  };
  EdgeRef placed(int edge) const { return EdgeRef(slot_of_[edge]); }
  std::int64_t residual(EdgeRef edge) const { return slot_cap_[edge.slot_]; }
  int head(EdgeRef edge) const { return head_[edge.slot_]; }
  // A number the caller attaches to an edge (-1 unless set), read back through an EdgeRef, e.g.
  // which of its own objects the edge stands for.
  void set_label(int edge, int label) {
    label_[edge] = label;
    if (built_) slot_label_[slot_of_[edge]] = label;
  }
  int label(EdgeRef edge) const { return slot_label_[edge.slot_]; }
  // A node's first edges (see reset) as the built network lays them out: in the order they were added.
  class EdgeRange {
   public:
    struct iterator {
      int slot;
      EdgeRef operator*() const { return EdgeRef(slot); }
      iterator& operator++() {
        ++slot;
        return *this;
      }
      bool operator==(const iterator&) const = default;
    };
    EdgeRange(int begin, int end) : begin_(begin), end_(end) {}
    iterator begin() const { return {begin_}; }
    iterator end() const { return {end_}; }

   private:
    int begin_, end_;
  };
  EdgeRange first_edges(int node) const { return {begin_first_[node], end_first_[node]}; }
  int num_nodes() const { return num_nodes_; }
  // After a max_flow that ended because no augmenting path was left: its last search labelled
  // every node the source reaches through positive residuals, which is the source side of a
  // minimum cut. residual_side_known() is false otherwise (the flow reached its limit, or a
  // residual was set since).
  bool residual_side_known() const { return reached_count_ >= 0; }
  const int* residual_side() const { return queue_.data(); }  // residual_side_size() nodes, in search order
  int residual_side_size() const { return reached_count_; }
  bool on_residual_side(int node) const { return level_[node] >= base_; }
  // Per node of residual_side(), in the same order, the node that search first reached it from
  // (-1 for the source): its search tree.
  const int* residual_side_parents() const;
  // The edges with exactly one unit left through which that search first reached a node (where
  // the planner's reference rule may see the edge as closed).
  std::span<const EdgeRef> residual_side_unit_edges() const;
  // A journal of residual changes (on a built network: once max_flow has run), kept from the first
  // journal_mark() until end_journal(): rollback_to(mark) brings back the residuals of the moment
  // journal_mark() returned `mark` (later marks are gone with it); forget_before(mark) drops what
  // only a rollback to an earlier mark would need.
  std::size_t journal_mark();
  void rollback_to(std::size_t mark);
  void forget_before(std::size_t mark);
  void end_journal();

 private:
  void build_adjacency();
  template <bool kFirstOnly>
  std::int64_t phases(int source, int sink, std::int64_t limit);
  template <bool kFirstOnly>
  bool bfs(int source, int sink);
  template <bool kFirstOnly>
  std::int64_t dfs(int source, int sink, std::int64_t limit);
  // The slot after `slot` among `node`'s, where the first edges' are followed by the others'.
  template <bool kFirstOnly>
  int next_slot(int node, int slot) const {
    ++slot;
    if constexpr (!kFirstOnly) {
      if (slot == end_first_[node]) slot = begin_other_[node];
    }
    return slot;
  }
  template <bool kFirstOnly>
  int first_slot(int node) const {
    return kFirstOnly || begin_first_[node] != end_first_[node] ? begin_first_[node] : begin_other_[node];
  }
  template <bool kFirstOnly>
  int end_slot(int node) const {
    return kFirstOnly ? end_first_[node] : end_other_[node];
  }

  struct Frame {
    int node, via;  // via: the slot of the edge it was reached by (-1 for the source)
    std::int64_t budget, total;
  };

  int num_nodes_ = 0;
  bool built_ = false;
  std::vector<int> from_, to_, label_;  // per edge id, as added
  std::vector<std::int64_t> cap_;       // per edge id until the adjacency is built
  // Once built, edges live in slots: the first edges' grouped by their tail node, then the others'
  // likewise. slot_of_[edge id], and per slot the head node, residual capacity and the reverse
  // edge's slot, and the caller's label; per node, the range of its first edges' slots and of its others'.
  int first_edges_ = 0;
  std::vector<int> slot_of_, head_, reverse_, slot_label_;
  std::vector<int> begin_first_, end_first_, begin_other_, end_other_;
  int reached_count_ = -1;  // nodes the last search labelled, when it labelled all it reaches; else -1
  // Per search, per node in queue_ order: the slot of the edge that first reached it (the source's
  // unused). The parents and one-unit edges are read off it when asked for (only a search that
  // labelled all it reaches is asked): the search itself stores one number per node.
  std::vector<int> via_;
  mutable std::vector<int> parent_;          // per node in queue_ order: the node it was first reached from
  mutable std::vector<EdgeRef> unit_edges_;  // edges through which one unit first reached a node
  mutable bool parents_read_ = false, units_read_ = false;
  int base_ = 0;  // the last search's level 0: lower levels are earlier searches' (or dead ends)
  std::vector<std::int64_t> slot_cap_;
  std::vector<int> level_, iter_, queue_, fill_;
  std::vector<Frame> frames_;
  bool journaling_ = false;
  UndoLog<std::pair<int, std::int64_t>> journal_;  // (slot, residual before the change)
};

}  // namespace perseus
