#pragma once
// Maximum flow with lower and upper bounds on arcs, in integer units.
// The solver needs, per iteration, a maximum s-t flow that respects lb <= f <= ub on every arc
// (DESIGN §2.5 step 3). Two implementations: a Dinic solver written for this shape of graph,
// and Boost.Graph's push-relabel, kept as the test oracle.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace perseus {

struct BoundedArc {
  int from = 0;
  int to = 0;
  std::int64_t lower = 0;
  std::int64_t upper = 0;
};

enum class MaxFlowAlgorithm { dinic, boost_push_relabel };

// When the lower bounds count as met. exact: every unit. reference: as the reference planner
// decides it, per node in floating point (`abs(flow - capacity) > 1e-6` on values k * 1e-6), so a
// node whose lower bounds fall short by one 1e-6 unit may still count as satisfied.
enum class Feasibility { exact, reference };

// Whether `flow` units meet a demand of `capacity` units under `rule`.
bool demand_met(std::int64_t capacity, std::int64_t flow, Feasibility rule);
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

// Returns the flow on each arc of a maximum s-t flow within the bounds, or nullopt when no flow
// satisfies every lower bound (first a feasible circulation with an infinite t->s arc, then a
// maximum flow on its residual, as the reference planner does). `initial`, when given, is a
// per-arc starting flow within the bounds (a warm start; the Dinic solver uses it, the oracle
// ignores it).
std::optional<std::vector<std::int64_t>> bounded_max_flow(
    int num_nodes, const std::vector<BoundedArc>& arcs, int source, int sink,
    MaxFlowAlgorithm algorithm, const std::vector<std::int64_t>* initial = nullptr,
    Feasibility feasibility = Feasibility::exact);
// The same into `flow` (resized to the arcs; false: no feasible flow). With Dinic it allocates
// nothing once the thread's buffers have grown to the network's size: the planner calls it once
// per frontier point.
bool bounded_max_flow_into(int num_nodes, const std::vector<BoundedArc>& arcs, int source, int sink,
                           MaxFlowAlgorithm algorithm, const std::vector<std::int64_t>* initial,
                           Feasibility feasibility, std::vector<std::int64_t>& flow);

// Plain max flow on a residual network; reusable across calls to avoid reallocations.
class Dinic {
 public:
  void reset(int num_nodes);
  int add_edge(int from, int to, std::int64_t capacity);  // returns the forward edge id
  // `edge_count` >= 0: only the edges with ids below it take part (both edges of a pair have ids
  // on the same side of an even count), as on a network of just those edges: each node's edges
  // are laid out in the order they were added, so the rest come after them and are never looked at.
  std::int64_t max_flow(int source, int sink, std::int64_t limit, int edge_count = -1);
  std::int64_t residual(int edge) const { return built_ ? slot_cap_[slot_of_[edge]] : cap_[edge]; }
  // Once max_flow has run: where an edge's residual lives, and the residual there.
  int slot(int edge) const { return slot_of_[edge]; }
  int num_slots() const { return static_cast<int>(slot_of_.size()); }
  std::int64_t residual_at(int slot) const { return slot_cap_[slot]; }
  void set_residual(int edge, std::int64_t value) {
    if (!built_) {
      cap_[edge] = value;
      reached_count_ = -1;
      return;
    }
    const int slot = slot_of_[edge];
    if (journaling_) journal_.push_back({slot, slot_cap_[slot]});
    slot_cap_[slot] = value;
    reached_count_ = -1;
  }
  int num_nodes() const { return num_nodes_; }
  // After a max_flow that ended because no augmenting path was left: its last search labelled
  // every node the source reaches through positive residuals, which is the source side of a
  // minimum cut. residual_side_known() is false otherwise (the flow reached its limit, or a
  // residual was set since).
  bool residual_side_known() const { return reached_count_ >= 0; }
  const int* residual_side() const { return queue_.data(); }  // residual_side_size() nodes, in search order
  int residual_side_size() const { return reached_count_; }
  bool on_residual_side(int node) const { return level_[node] >= 0; }
  // The slots of the edges with exactly one unit left through which that search first reached a
  // node (where the planner's reference rule may see the edge as closed).
  std::span<const int> residual_side_unit_edges() const { return {unit_edges_.data(), static_cast<std::size_t>(unit_count_)}; }
  // From begin_journal() on (on a built network: once max_flow has run), every residual change is
  // recorded; rollback() brings back the residuals of that moment, end_journal() keeps the new ones.
  void begin_journal();
  void rollback();
  void end_journal();

 private:
  void build_adjacency();
  void limit_to_first(int edge_count);
  bool bfs(int source, int sink);
  std::int64_t dfs(int source, int sink, std::int64_t limit);

  struct Frame {
    int node, via;  // via: the slot of the edge it was reached by (-1 for the source)
    std::int64_t budget, total;
  };

  int num_nodes_ = 0;
  bool built_ = false;
  std::vector<int> from_, to_;  // per edge id, as added
  std::vector<std::int64_t> cap_;  // per edge id until the adjacency is built
  // Once built, edges live in slots grouped by their tail node: slot_of_[edge id], and per slot
  // the head node, residual capacity and the reverse edge's slot.
  std::vector<int> adj_start_, slot_of_, head_, reverse_;
  // Per node, the end of its slots: all of them, or those of the first `prefix_count_` edges.
  std::vector<int> end_all_, end_prefix_;
  int prefix_count_ = -1;
  int reached_count_ = -1;  // nodes the last search labelled, when it labelled all it reaches; else -1
  std::vector<int> unit_edges_;  // per search: slots through which one unit first reached a node
  int unit_count_ = 0;
  int labelled_ = 0;  // the last search's nodes: queue_[0, labelled_) (the only ones with a level)
  const int* end_ = nullptr;  // the ends this max_flow call uses
  std::vector<std::int64_t> slot_cap_;
  std::vector<int> level_, iter_, queue_, fill_;
  std::vector<Frame> frames_;
  bool journaling_ = false;
  std::vector<std::pair<int, std::int64_t>> journal_;  // (slot, residual before the change)
};

}  // namespace perseus
