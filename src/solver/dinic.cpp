#include <algorithm>
#include <limits>

#include "perseus/solver/max_flow.hpp"

namespace perseus {

void Dinic::reset(int num_nodes, int first_edges) {
  num_nodes_ = num_nodes;
  first_edges_ = first_edges;
  built_ = false;
  reached_count_ = -1;
  end_journal();
  from_.clear();
  to_.clear();
  label_.clear();
  cap_.clear();
}

int Dinic::add_edge(int from, int to, std::int64_t capacity) {
  end_journal();  // the slots it names are about to move
  reached_count_ = -1;
  if (built_) {  // the residuals live in the slots: bring them back before the layout changes
    for (std::size_t e = 0; e < cap_.size(); ++e) cap_[e] = slot_cap_[slot_of_[e]];
  }
  const int id = static_cast<int>(to_.size());
  from_.push_back(from);
  to_.push_back(to);
  cap_.push_back(capacity);
  from_.push_back(to);
  to_.push_back(from);
  cap_.push_back(0);
  label_.insert(label_.end(), 2, -1);
  built_ = false;
  return id;
}

// Lays the edges out node by node (each node's in the order they were added), the first edges'
// before all others, so that a search reads a node's edges from consecutive memory; edge ids map
// to their slots.
void Dinic::build_adjacency() {
  const int num_edges = static_cast<int>(from_.size());
  const int first = std::min(first_edges_, num_edges);
  // Counts per (region, node), then running starts: region 0 = first edges, 1 = the others.
  std::vector<int>& start = fill_;
  start.assign(2 * num_nodes_ + 1, 0);
  for (int e = 0; e < num_edges; ++e) ++start[(e < first ? 0 : num_nodes_) + from_[e] + 1];
  for (int k = 0; k < 2 * num_nodes_; ++k) start[k + 1] += start[k];
  begin_first_.assign(start.begin(), start.begin() + num_nodes_);
  end_first_.assign(start.begin() + 1, start.begin() + num_nodes_ + 1);
  begin_other_.assign(start.begin() + num_nodes_, start.begin() + 2 * num_nodes_);
  end_other_.assign(start.begin() + num_nodes_ + 1, start.end());
  slot_of_.resize(num_edges);
  for (int e = 0; e < num_edges; ++e) slot_of_[e] = start[(e < first ? 0 : num_nodes_) + from_[e]]++;
  head_.resize(num_edges);
  slot_cap_.resize(num_edges);
  reverse_.resize(num_edges);
  slot_label_.resize(num_edges);
  for (int e = 0; e < num_edges; ++e) {
    const int slot = slot_of_[e];
    head_[slot] = to_[e];
    slot_label_[slot] = label_[e];
    slot_cap_[slot] = cap_[e];
    reverse_[slot] = slot_of_[reverse(e)];
  }
  level_.assign(num_nodes_, -1);
  base_ = 0;
  iter_.resize(num_nodes_);
  queue_.resize(num_nodes_);
  via_.resize(num_nodes_);
  built_ = true;
}

// Levels up to the sink's only: a node farther than the sink lies on no shortest path, so the
// phase's blocking flow (and every step the DFS takes that pushes flow) is the same as with a
// full labelling, at a fraction of the cost when the sink is near (the planner's feasibility
// phases route a few nodes' excess to their neighbours).
template <bool kFirstOnly>
bool Dinic::bfs(int source, int sink) {
  int* level = level_.data();
  int* queue = queue_.data();
  int* via = via_.data();
  const int* heads = head_.data();
  const std::int64_t* cap = slot_cap_.data();
  // Levels count from a base above every earlier search's: nothing to clear, so a search near the
  // source (the feasibility phases') costs what it reaches. Back to a full clear before it overflows.
  if (base_ > std::numeric_limits<int>::max() - 2 * (num_nodes_ + 1)) {
    std::fill(level_.begin(), level_.end(), -1);
    base_ = 0;
  } else {
    base_ += num_nodes_ + 1;
  }
  const int base = base_;
  int head = 0, tail = 0;
  parents_read_ = units_read_ = false;
  queue[tail++] = source;
  level[source] = base;
  while (head < tail) {
    const int u = queue[head++];
    if (level[sink] >= base && level[u] >= level[sink]) break;
    const int next_level = level[u] + 1;
    // Per node reached, only the edge it came by: its parent and whether one unit reached it are
    // read off that edge when asked for (residual_side_parents, residual_side_unit_edges), which
    // only the last search of a max_flow is.
    auto scan = [&](int begin, int end) {
      for (int i = begin; i < end; ++i) {
        const int v = heads[i];
        if (cap[i] > 0 && level[v] < base) {
          level[v] = next_level;
          via[tail] = i;
          queue[tail++] = v;
        }
      }
    };
    scan(begin_first_[u], end_first_[u]);
    if constexpr (!kFirstOnly) scan(begin_other_[u], end_other_[u]);
  }
  reached_count_ = tail;
  return level[sink] >= base;
}

// Pushes as much as it can from the source (not just one path), and marks nodes that cannot
// reach the sink in this phase dead, so that each phase scans every edge only a few times. The
// recursive form, unrolled onto an explicit stack (a path is as long as the pipeline's critical
// path: 10^5 instructions overflowed the call stack), taking exactly the same steps.
template <bool kFirstOnly>
std::int64_t Dinic::dfs(int source, int sink, std::int64_t limit) {
  // A path visits each node at most once: num_nodes_ frames suffice (sized once, no push_back).
  if (frames_.size() < static_cast<std::size_t>(num_nodes_) + 1) frames_.resize(num_nodes_ + 1);
  Frame* frames = frames_.data();
  int depth = 0;
  frames[0] = {source, -1, limit, 0};
  for (;;) {
    std::int64_t result = 0;
    {
      Frame& f = frames[depth];
      if (f.node == sink) {
        result = f.budget;
      } else {
        const int end = end_slot<kFirstOnly>(f.node);
        const int wanted = level_[f.node] + 1;
        const int* level = level_.data();
        const int* heads = head_.data();
        const std::int64_t* cap = slot_cap_.data();
        int i = iter_[f.node];  // a local: the scan stores it once, not at every edge
        while (i != end && !(cap[i] > 0 && level[heads[i]] == wanted)) i = next_slot<kFirstOnly>(f.node, i);
        iter_[f.node] = i;
        if (i != end) {  // descend along the next admissible edge
          frames[++depth] = {head_[i], i, std::min(f.budget - f.total, slot_cap_[i]), 0};
          continue;
        }
        level_[f.node] = base_ - 1;  // dead for this phase
        result = f.total;
      }
    }
    // Return `result` to the parent through the edge it came by, as many levels as return at once.
    for (;;) {
      const int via = frames[depth].via;
      if (depth-- == 0) return result;
      Frame& parent = frames[depth];
      if (result > 0) {
        if (journaling_) {
          journal_.push({via, slot_cap_[via]});
          journal_.push({reverse_[via], slot_cap_[reverse_[via]]});
        }
        slot_cap_[via] -= result;
        slot_cap_[reverse_[via]] += result;
        parent.total += result;
        if (parent.total == parent.budget) {  // the parent is full: it returns too, its edge kept
          result = parent.total;
          continue;
        }
      }
      iter_[parent.node] = next_slot<kFirstOnly>(parent.node, iter_[parent.node]);
      break;
    }
  }
}

const int* Dinic::residual_side_parents() const {
  if (!parents_read_) {
    parent_.resize(queue_.size());
    parent_[0] = -1;
    for (int p = 1; p < reached_count_; ++p) parent_[p] = head_[reverse_[via_[p]]];  // the edge's tail
    parents_read_ = true;
  }
  return parent_.data();
}

// The residuals are those of the search (any change since makes the side unknown).
std::span<const Dinic::EdgeRef> Dinic::residual_side_unit_edges() const {
  if (!units_read_) {
    unit_edges_.clear();
    for (int p = 1; p < reached_count_; ++p)
      if (slot_cap_[via_[p]] == 1) unit_edges_.push_back(EdgeRef(via_[p]));
    units_read_ = true;
  }
  return unit_edges_;
}

std::size_t Dinic::journal_mark() {
  journaling_ = built_;
  return journal_.mark();
}

void Dinic::rollback_to(std::size_t mark) {
  journal_.undo_to(mark, [&](const auto& entry) { slot_cap_[entry.first] = entry.second; });
  reached_count_ = -1;
}

void Dinic::forget_before(std::size_t mark) { journal_.forget_before(mark); }

void Dinic::end_journal() {
  journal_.clear();
  journaling_ = false;
}

std::int64_t Dinic::max_flow(int source, int sink, std::int64_t limit, bool first_only) {
  if (!built_) build_adjacency();
  return first_only ? phases<true>(source, sink, limit) : phases<false>(source, sink, limit);
}

template <bool kFirstOnly>
std::int64_t Dinic::phases(int source, int sink, std::int64_t limit) {
  std::int64_t total = 0;
  reached_count_ = -1;
  while (total < limit && bfs<kFirstOnly>(source, sink)) {
    if constexpr (kFirstOnly) std::copy(begin_first_.begin(), begin_first_.end(), iter_.begin());
    else
      for (int v = 0; v < num_nodes_; ++v) iter_[v] = first_slot<false>(v);
    const std::int64_t got = dfs<kFirstOnly>(source, sink, limit - total);
    if (got == 0) break;
    total += got;
  }
  if (level_[sink] >= base_) reached_count_ = -1;  // the last search stopped at the sink: not all it reaches
  return total;
}

}  // namespace perseus
