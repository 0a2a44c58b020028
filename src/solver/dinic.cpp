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
  std::vector<int> fill(adj_start_.begin(), adj_start_.end() - 1);
  for (int e = 0; e < static_cast<int>(from_.size()); ++e) adj_[fill[from_[e]]++] = e;
  level_.resize(num_nodes_);
  iter_.resize(num_nodes_);
  queue_.resize(num_nodes_);
  built_ = true;
}

bool Dinic::bfs(int source, int sink) {
  std::fill(level_.begin(), level_.end(), -1);
  int head = 0, tail = 0;
  queue_[tail++] = source;
  level_[source] = 0;
  while (head < tail) {
    const int u = queue_[head++];
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

// Pushes as much as it can from `u` (not just one path), and marks nodes that cannot reach
// the sink in this phase dead, so that each phase scans every edge only a few times.
std::int64_t Dinic::dfs(int u, int sink, std::int64_t pushed) {
  if (u == sink) return pushed;
  std::int64_t total = 0;
  for (int& i = iter_[u]; i < adj_start_[u + 1]; ++i) {
    const int e = adj_[i];
    const int v = to_[e];
    if (cap_[e] <= 0 || level_[v] != level_[u] + 1) continue;
    const std::int64_t got = dfs(v, sink, std::min(pushed - total, cap_[e]));
    if (got > 0) {
      cap_[e] -= got;
      cap_[e ^ 1] += got;
      total += got;
      if (total == pushed) return total;
    }
  }
  level_[u] = -1;
  return total;
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
