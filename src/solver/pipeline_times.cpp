#include "perseus/solver/pipeline_times.hpp"

#include <algorithm>
#include <limits>

namespace perseus {

PipelineTimes::PipelineTimes(const PipelineDag& dag, const std::vector<int>& durations,
                             const std::vector<double>& costs)
    : num_nodes_(dag.num_nodes()), cost_(costs) {
  auto adjacency = [&](bool forward, std::vector<int>& start, std::vector<int>& list) {
    start.assign(num_nodes_ + 1, 0);
    for (const auto& [u, v] : dag.edges) ++start[(forward ? v : u) + 1];
    for (int v = 0; v < num_nodes_; ++v) start[v + 1] += start[v];
    list.resize(dag.edges.size());
    std::vector<int> fill(start.begin(), start.end() - 1);
    for (const auto& [u, v] : dag.edges) list[fill[forward ? v : u]++] = forward ? u : v;
  };
  std::vector<int> pred_start, pred, succ_start, succ;  // by DAG node
  adjacency(true, pred_start, pred);
  adjacency(false, succ_start, succ);
  order_by_start_time(dag, pred_start, pred, durations);
  by_position(pred_start, pred, pred_pair_, extra_pred_start_, extra_pred_);
  by_position(succ_start, succ, succ_pair_, extra_succ_start_, extra_succ_);
  duration_at_.resize(num_nodes_);
  for (int p = 0; p < num_nodes_; ++p)
    duration_at_[p] = dag_order_[p] < static_cast<int>(durations.size()) ? durations[dag_order_[p]] : 0;
  finish_.assign(num_nodes_ + 1, 0);
  tail_end_.resize(num_nodes_);
  tail_start_.assign(num_nodes_ + 1, kNoWayToTheSink);
  sink_position_ = position_[dag.sink];
  // Each dependency's ends, and where its mark lives: the slot of its head among its tail's successors.
  for (const auto& [u, v] : dag.edges) {
    const int pu = position_[u], pv = position_[v];
    dependency_from_.push_back(pu);
    dependency_to_.push_back(pv);
    const int a = succ_pair_[2 * pu];
    if (a >= 0) {
      dependency_slot_.push_back(2 * pu + (a == pv ? 0 : 1));
    } else {
      int k = extra_succ_start_[~a];
      while (extra_succ_[k] != pv) ++k;
      dependency_slot_.push_back(~k);
    }
  }
  for (int p = 0; p < num_nodes_; ++p)
    if (succ_pair_[2 * p] < 0) extra_succ_positions_.push_back(p);
  critical_at_.assign(num_nodes_, 0);
  succ_critical_.assign(succ_pair_.size(), 0);
  extra_succ_critical_.assign(extra_succ_.size(), 0);
  first_changed_ = num_nodes_;
}

// An order where every edge goes forward, sorted by start time in the slowest plan (ties in
// topological order): consecutive frontier points change instructions that run at about the same
// time, so a step's changes lie close together.
void PipelineTimes::order_by_start_time(const PipelineDag& dag, const std::vector<int>& pred_start,
                                        const std::vector<int>& pred, const std::vector<int>& durations) {
  auto duration_of = [&](int node) { return node < static_cast<int>(durations.size()) ? durations[node] : 0; };
  dag_order_ = dag.topological_order();
  std::vector<int> start(dag_order_.size(), 0);
  for (int i : dag_order_)
    for (int k = pred_start[i]; k < pred_start[i + 1]; ++k)
      start[i] = std::max(start[i], start[pred[k]] + duration_of(pred[k]));
  std::stable_sort(dag_order_.begin(), dag_order_.end(), [&](int a, int b) { return start[a] < start[b]; });
  position_.resize(dag_order_.size());
  for (std::size_t p = 0; p < dag_order_.size(); ++p) position_[dag_order_[p]] = static_cast<int>(p);
}

// An adjacency by DAG node, as pairs by position (see pred_pair_).
void PipelineTimes::by_position(const std::vector<int>& start, const std::vector<int>& list,
                                std::vector<int>& pairs_out, std::vector<int>& extra_start_out,
                                std::vector<int>& extra_out) const {
  pairs_out.clear();
  extra_start_out.assign(1, 0);
  extra_out.clear();
  for (int i : dag_order_) {
    const int count = start[i + 1] - start[i];
    if (count <= 2) {
      pairs_out.push_back(count > 0 ? position_[list[start[i]]] : num_nodes_);
      pairs_out.push_back(count > 1 ? position_[list[start[i] + 1]] : num_nodes_);
      continue;
    }
    pairs_out.push_back(~(static_cast<int>(extra_start_out.size()) - 1));
    pairs_out.push_back(num_nodes_);
    for (int k = start[i]; k < start[i + 1]; ++k) extra_out.push_back(position_[list[k]]);
    extra_start_out.push_back(static_cast<int>(extra_out.size()));
  }
}

void PipelineTimes::set_duration(int instruction, int duration, double cost) {
  cost_.set(instruction, cost);
  const int p = position_[instruction];
  duration_at_[p] = duration;
  first_changed_ = std::min(first_changed_, p);
  last_changed_ = std::max(last_changed_, p);
}

// Only end times from the earliest changed position on move, and tails up to the latest.
bool PipelineTimes::update() {
  const bool same = compute_times(first_changed_, last_changed_);
  first_changed_ = num_nodes_;
  last_changed_ = -1;
  return same;
}

void PipelineTimes::compute_all() {
  compute_times(0, num_nodes_ - 1);
  first_changed_ = num_nodes_;
  last_changed_ = -1;
}

// Earliest end times from position `first` on, tails up to position `last`, all by position so
// that both passes read memory nearly in order; and whether every arc is critical exactly where it
// is marked: a node's arc when its end time and tail add up to the iteration time, a dependency
// when its tail's end time and its head's tail from the start do. No way through an arc is longer
// than the iteration, so past `last` (tails unchanged there) the forward pass, as it sets each end
// time, keeps just the shortest way through a marked arc and the longest through an unmarked one:
// work that fills the wait on its chain of end times. The backward pass checks where it has just
// read the tails. All without branches but for nodes with more than two successors.
bool PipelineTimes::compute_times(int first, int last) {
  const int *pred = pred_pair_.data(), *duration = duration_at_.data(), *succ = succ_pair_.data();
  const char *was = critical_at_.data(), *succ_was = succ_critical_.data();
  int *finish = finish_.data(), *tail_end = tail_end_.data(), *tail_start = tail_start_.data();
  auto set_finish = [&](int p) {
    const int a = pred[2 * p], b = pred[2 * p + 1];
    int start;
    if (a >= 0) [[likely]] {
      start = std::max(finish[a], finish[b]);
    } else {
      start = 0;
      for (int k = extra_pred_start_[~a]; k < extra_pred_start_[~a + 1]; ++k)
        start = std::max(start, finish[extra_pred_[k]]);
    }
    return finish[p] = start + duration[p];
  };
  const int fused_from = std::max(first, last + 1);
  for (int p = first; p < fused_from; ++p) set_finish(p);
  constexpr int kNone = std::numeric_limits<int>::max();
  int shortest_marked = kNone, longest_unmarked = std::numeric_limits<int>::min();
  auto keep = [&](bool marked, int way) {
    shortest_marked = std::min(shortest_marked, marked ? way : kNone);
    longest_unmarked = std::max(longest_unmarked, marked ? std::numeric_limits<int>::min() : way);
  };
  for (int p = fused_from; p < num_nodes_; ++p) {
    const int f = set_finish(p);
    const int a = succ[2 * p];
    if (a < 0) [[unlikely]] {  // its successors' list: checked below, with the node's own arc
      continue;
    }
    keep(was[p], f + tail_end[p]);
    keep(succ_was[2 * p], f + tail_start[a]);
    keep(succ_was[2 * p + 1], f + tail_start[succ[2 * p + 1]]);
  }
  const int makespan = makespan_ = finish[sink_position_];
  int differ = (shortest_marked < makespan) | (longest_unmarked >= makespan);
  // Whether p's arc and its dependencies to its successors are critical as marked, given its tail
  // and its successors' tails from the start.
  auto check = [&](int p, int tail, int tail_a, int tail_b) {
    const int f = finish[p];
    differ |= ((f + tail == makespan) != was[p]) | ((f + tail_a == makespan) != succ_was[2 * p]) |
              ((f + tail_b == makespan) != succ_was[2 * p + 1]);
  };
  auto check_extra = [&](int p, int a) {
    for (int k = extra_succ_start_[~a]; k < extra_succ_start_[~a + 1]; ++k)
      differ |= (finish[p] + tail_start[extra_succ_[k]] == makespan) != extra_succ_critical_[k];
  };
  auto check_position = [&](int p) {
    const int a = succ[2 * p];
    if (a < 0) [[unlikely]] {
      check_extra(p, a);
      check(p, tail_end[p], kNoWayToTheSink, kNoWayToTheSink);
      return;
    }
    check(p, tail_end[p], tail_start[a], tail_start[succ[2 * p + 1]]);
  };
  // Past `last`, what the forward pass did not keep: positions before `first`, and nodes with a list.
  for (int p = last + 1; p < fused_from; ++p) check_position(p);
  for (const int p : extra_succ_positions_)
    if (p >= fused_from) check_position(p);
  for (int p = last; p >= 0; --p) {
    const int a = succ[2 * p], b = succ[2 * p + 1];
    int tail, tail_a = kNoWayToTheSink, tail_b = kNoWayToTheSink;
    if (a >= 0) [[likely]] {
      tail_a = tail_start[a];
      tail_b = tail_start[b];
      tail = std::max(tail_a, tail_b);
    } else {
      tail = kNoWayToTheSink;
      for (int k = extra_succ_start_[~a]; k < extra_succ_start_[~a + 1]; ++k)
        tail = std::max(tail, tail_start[extra_succ_[k]]);
      check_extra(p, a);
    }
    tail = p == sink_position_ ? 0 : tail;
    tail_end[p] = tail;
    tail_start[p] = tail + duration[p];
    check(p, tail, tail_a, tail_b);
  }
  return differ == 0;
}

double PipelineTimes::total_cost() const { return cost_.sum(); }

// Starts as early as it can and the way on to the sink is as long as it can be.
bool PipelineTimes::is_critical(int arc) const {
  if (arc < num_nodes_) return finish_[position_[arc]] + tail_end_[position_[arc]] == makespan_;
  const int k = arc - num_nodes_;
  return finish_[dependency_from_[k]] + tail_start_[dependency_to_[k]] == makespan_;
}

void PipelineTimes::clear_critical() {
  std::fill(critical_at_.begin(), critical_at_.end(), 0);
  std::fill(succ_critical_.begin(), succ_critical_.end(), 0);
  std::fill(extra_succ_critical_.begin(), extra_succ_critical_.end(), 0);
}

void PipelineTimes::mark_critical(int arc) {
  if (arc < num_nodes_) {
    critical_at_[position_[arc]] = 1;
    return;
  }
  const int slot = dependency_slot_[arc - num_nodes_];
  (slot >= 0 ? succ_critical_[slot] : extra_succ_critical_[~slot]) = 1;
}

void PipelineTimes::mark_all_critical(std::vector<int>& out) {
  clear_critical();
  out.clear();
  const int *finish = finish_.data(), *tail_end = tail_end_.data(), *tail_start = tail_start_.data();
  const int makespan = makespan_;
  for (int a = 0; a < num_nodes_; ++a) {
    const int p = position_[a];
    if (finish[p] + tail_end[p] != makespan) continue;
    critical_at_[p] = 1;
    out.push_back(a);
  }
  const int num_dependencies = static_cast<int>(dependency_from_.size());
  for (int k = 0; k < num_dependencies; ++k) {
    if (finish[dependency_from_[k]] + tail_start[dependency_to_[k]] != makespan) continue;
    const int slot = dependency_slot_[k];
    (slot >= 0 ? succ_critical_[slot] : extra_succ_critical_[~slot]) = 1;
    out.push_back(num_nodes_ + k);
  }
}

}  // namespace perseus
