#include <algorithm>
#include <limits>

#include "perseus/solver/max_flow.hpp"

namespace perseus {

void Dinic::reset(int num_nodes) {
  num_nodes_ = num_nodes;
  built_ = false;
  from_.clear();
  to_.clear();
  cap_.clear();
}

int Dinic::add_edge(int from, int to, std::int64_t capacity) {
  const int id = static_cast<int>(to_.size());
  from_.push_back(from);
  to_.push_back(to);
  cap_.push_back(capacity);
  from_.push_back(to);
  to_.push_back(from);
  cap_.push_back(0);
  built_ = false;
  return id;
}

void Dinic::build_adjacency() {
  adj_start_.assign(num_nodes_ + 1, 0);
  for (int node : from_) ++adj_start_[node + 1];
  for (int i = 0; i < num_nodes_; ++i) adj_start_[i + 1] += adj_start_[i];
  adj_.resize(from_.size());
  fill_.assign(adj_start_.begin(), adj_start_.end() - 1);
  for (int e = 0; e < static_cast<int>(from_.size()); ++e) adj_[fill_[from_[e]]++] = e;
  level_.resize(num_nodes_);
  iter_.resize(num_nodes_);
  queue_.resize(num_nodes_);
  built_ = true;
}

// Levels up to the sink's only: a node farther than the sink lies on no shortest path, so the
// phase's blocking flow (and every step the DFS takes that pushes flow) is the same as with a
// full labelling, at a fraction of the cost when the sink is near (the planner's feasibility
// phases route a few nodes' excess to their neighbours).
bool Dinic::bfs(int source, int sink) {
  std::fill(level_.begin(), level_.end(), -1);
  int head = 0, tail = 0;
  queue_[tail++] = source;
  level_[source] = 0;
  while (head < tail) {
    const int u = queue_[head++];
    if (level_[sink] >= 0 && level_[u] >= level_[sink]) break;
    for (int i = adj_start_[u]; i < adj_start_[u + 1]; ++i) {
      const int e = adj_[i];
      const int v = to_[e];
      if (cap_[e] > 0 && level_[v] < 0) {
        level_[v] = level_[u] + 1;
        queue_[tail++] = v;
      }
    }
  }
  return level_[sink] >= 0;
}

// Pushes as much as it can from the source (not just one path), and marks nodes that cannot
// reach the sink in this phase dead, so that each phase scans every edge only a few times. The
// recursive form, unrolled onto an explicit stack (a path is as long as the pipeline's critical
// path: 10^5 instructions overflowed the call stack), taking exactly the same steps.
std::int64_t Dinic::dfs(int source, int sink, std::int64_t limit) {
  frames_.clear();
  frames_.push_back({source, -1, limit, 0});
  for (;;) {
    std::int64_t result = 0;
    {
      Frame& f = frames_.back();
      if (f.node == sink) {
        result = f.budget;
      } else {
        const int end = adj_start_[f.node + 1];
        int& i = iter_[f.node];
        while (i < end && !(cap_[adj_[i]] > 0 && level_[to_[adj_[i]]] == level_[f.node] + 1)) ++i;
        if (i < end) {  // descend along the next admissible edge
          const int e = adj_[i];
          const Frame child{to_[e], e, std::min(f.budget - f.total, cap_[e]), 0};
          frames_.push_back(child);
          continue;
        }
        level_[f.node] = -1;  // dead for this phase
        result = f.total;
      }
    }
    // Return `result` to the parent through the edge it came by, as many levels as return at once.
    for (;;) {
      const int via = frames_.back().via;
      frames_.pop_back();
      if (frames_.empty()) return result;
      Frame& parent = frames_.back();
      if (result > 0) {
        cap_[via] -= result;
        cap_[via ^ 1] += result;
        parent.total += result;
        if (parent.total == parent.budget) {  // the parent is full: it returns too, its edge kept
          result = parent.total;
          continue;
        }
      }
      ++iter_[parent.node];
      break;
    }
  }
}

std::int64_t Dinic::max_flow(int source, int sink, std::int64_t limit) {
  if (!built_) build_adjacency();
  std::int64_t total = 0;
  while (total < limit && bfs(source, sink)) {
    std::copy(adj_start_.begin(), adj_start_.end() - 1, iter_.begin());
    const std::int64_t got = dfs(source, sink, limit - total);
    if (got == 0) break;
    total += got;
  }
  return total;
}

}  // namespace perseus
