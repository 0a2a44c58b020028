#include "pipeline_times.hpp"

#include <algorithm>

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
  by_position(pred_start, pred, pred_start_, pred_);
  by_position(succ_start, succ, succ_start_, succ_);
  duration_at_.resize(num_nodes_);
  for (int p = 0; p < num_nodes_; ++p)
    duration_at_[p] = dag_order_[p] < static_cast<int>(durations.size()) ? durations[dag_order_[p]] : 0;
  finish_.resize(num_nodes_);
  tail_end_.resize(num_nodes_);
  tail_start_.resize(num_nodes_);
  sink_position_ = position_[dag.sink];
  // Dependencies (end of u -> start of v) by their ends' positions, the order the check visits
  // them in, near the times it reads.
  const int num_dependencies = static_cast<int>(dag.edges.size());
  auto ends = [&](int k) { return std::pair(position_[dag.edges[k].first], position_[dag.edges[k].second]); };
  std::vector<int> by_ends(num_dependencies);
  for (int k = 0; k < num_dependencies; ++k) by_ends[k] = k;
  std::sort(by_ends.begin(), by_ends.end(), [&](int x, int y) { return ends(x) < ends(y); });
  check_slot_.resize(num_dependencies);
  for (int j = 0; j < num_dependencies; ++j) {
    check_slot_[by_ends[j]] = j;
    check_from_.push_back(ends(by_ends[j]).first);
    check_to_.push_back(ends(by_ends[j]).second);
  }
  critical_at_.assign(num_nodes_, 0);
  dependency_critical_.assign(num_dependencies, 0);
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

// An adjacency by DAG node, as one by position.
void PipelineTimes::by_position(const std::vector<int>& start, const std::vector<int>& list,
                                std::vector<int>& start_out, std::vector<int>& list_out) const {
  start_out.assign(1, 0);
  list_out.clear();
  for (int i : dag_order_) {
    for (int k = start[i]; k < start[i + 1]; ++k) list_out.push_back(position_[list[k]]);
    start_out.push_back(static_cast<int>(list_out.size()));
  }
}

void PipelineTimes::set_duration(int instruction, int duration, double cost) {
  cost_[instruction] = cost;
  const int p = position_[instruction];
  duration_at_[p] = duration;
  first_changed_ = std::min(first_changed_, p);
  last_changed_ = std::max(last_changed_, p);
}

// Only end times from the earliest changed position on move, and tails up to the latest.
void PipelineTimes::update() {
  compute_times(first_changed_, last_changed_);
  first_changed_ = num_nodes_;
  last_changed_ = -1;
}

void PipelineTimes::compute_all() {
  compute_times(0, num_nodes_ - 1);
  first_changed_ = num_nodes_;
  last_changed_ = -1;
}

// Earliest end times from position `first` on, tails up to position `last`, all by position so
// that both passes read memory nearly in order.
void PipelineTimes::compute_times(int first, int last) {
  const int *pred_start = pred_start_.data(), *pred = pred_.data(), *duration = duration_at_.data();
  int* finish = finish_.data();
  for (int p = first; p < num_nodes_; ++p) {
    int start = 0;
    for (int k = pred_start[p]; k < pred_start[p + 1]; ++k) start = std::max(start, finish[pred[k]]);
    finish[p] = start + duration[p];
  }
  makespan_ = finish[sink_position_];
  const int *succ_start = succ_start_.data(), *succ = succ_.data();
  int *tail_end = tail_end_.data(), *tail_start = tail_start_.data();
  for (int p = last; p >= 0; --p) {
    int tail = p == sink_position_ ? 0 : kNoWayToTheSink;
    for (int k = succ_start[p]; k < succ_start[p + 1]; ++k) tail = std::max(tail, tail_start[succ[k]]);
    tail_end[p] = tail;
    tail_start[p] = tail + duration[p];
  }
}

double PipelineTimes::total_cost() const {
  double sum = 0;
  for (double c : cost_) sum += c;
  return sum;
}

// Starts as early as it can and the way on to the sink is as long as it can be.
bool PipelineTimes::is_critical(int arc) const {
  if (arc < num_nodes_) return finish_[position_[arc]] + tail_end_[position_[arc]] == makespan_;
  const int k = check_slot_[arc - num_nodes_];
  return finish_[check_from_[k]] + tail_start_[check_to_[k]] == makespan_;
}

void PipelineTimes::clear_critical() {
  std::fill(critical_at_.begin(), critical_at_.end(), 0);
  std::fill(dependency_critical_.begin(), dependency_critical_.end(), 0);
}

void PipelineTimes::mark_critical(int arc) {
  if (arc < num_nodes_)
    critical_at_[position_[arc]] = 1;
  else
    dependency_critical_[check_slot_[arc - num_nodes_]] = 1;
}

// is_critical on every arc, by position and without branches (the compiler vectorizes the node
// arcs' part, which reads memory in order).
bool PipelineTimes::same_critical() const {
  const int num_dependencies = static_cast<int>(check_from_.size());
  const int *finish = finish_.data(), *tail_end = tail_end_.data(), *tail_start = tail_start_.data();
  const char* was = critical_at_.data();
  const int makespan = makespan_;
  int differ = 0;
  for (int p = 0; p < num_nodes_; ++p) differ |= (finish[p] + tail_end[p] == makespan) != was[p];
  const int *from = check_from_.data(), *to = check_to_.data();
  const char* dependency_was = dependency_critical_.data();
  for (int k = 0; k < num_dependencies; ++k)
    differ |= (finish[from[k]] + tail_start[to[k]] == makespan) != dependency_was[k];
  return differ == 0;
}

}  // namespace perseus
