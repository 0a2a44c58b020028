#include "perseus/solver/exact_times.hpp"

#include <algorithm>
#include <bit>

namespace perseus {

namespace {

// Incremental sums drift by a rounding error per update: summed again from scratch this often.
constexpr int kUpdatesBetweenSums = 4096;

}  // namespace

ExactTimes::ExactTimes(const PlanningProblem& problem, const std::vector<int>& durations)
    : problem_(problem), num_nodes_(problem.dag.num_nodes()) {
  const auto& dag = problem.dag;
  node_at_ = dag.topological_order();
  position_.resize(num_nodes_);
  for (int p = 0; p < num_nodes_; ++p) position_[node_at_[p]] = p;
  sink_position_ = position_[dag.sink];
  auto csr = [&](bool predecessors, std::vector<int>& start, std::vector<int>& list) {
    start.assign(num_nodes_ + 1, 0);
    for (const auto& [u, v] : dag.edges) ++start[position_[predecessors ? v : u] + 1];
    for (int p = 0; p < num_nodes_; ++p) start[p + 1] += start[p];
    list.resize(dag.edges.size());
    std::vector<int> fill(start.begin(), start.end() - 1);
    for (const auto& [u, v] : dag.edges)
      list[fill[position_[predecessors ? v : u]]++] = position_[predecessors ? u : v];
  };
  csr(true, pred_start_, pred_);
  csr(false, succ_start_, succ_);
  const int instructions = static_cast<int>(dag.instructions.size());
  duration_ = durations;
  option_.resize(instructions);
  time_at_.assign(num_nodes_, 0);
  for (int i = 0; i < instructions; ++i) {
    option_[i] = &problem.spec_of(i).options.option_for(durations[i]);
    time_at_[position_[i]] = option_[i]->real_time;
  }
  finish_.assign(num_nodes_, 0);
  dirty_.assign((num_nodes_ + 63) / 64, ~std::uint64_t{0});
  if (num_nodes_ % 64 != 0) dirty_.back() = (std::uint64_t{1} << (num_nodes_ % 64)) - 1;
  first_dirty_ = 0;
  updates_ = kUpdatesBetweenSums;  // sums the first time they are asked for
}

bool ExactTimes::set_duration(int instruction, int duration) {
  duration_[instruction] = duration;
  const ExecutionOption* option = &problem_.spec_of(instruction).options.option_for(duration);
  if (option == option_[instruction]) return false;
  busy_ += option->real_time - option_[instruction]->real_time;
  compute_energy_ += option->energy - option_[instruction]->energy;
  ++updates_;
  option_[instruction] = option;
  const int p = position_[instruction];
  time_at_[p] = option->real_time;
  dirty_[p / 64] |= std::uint64_t{1} << (p % 64);
  first_dirty_ = std::min(first_dirty_, p);
  return true;
}

// End times in topological order from the first changed position on, each computed again only
// where a predecessor's moved (or its own time did).
void ExactTimes::propagate() {
  const int words = static_cast<int>(dirty_.size());
  for (int w = first_dirty_ / 64; w < words; ++w) {
    while (dirty_[w] != 0) {
      const int p = w * 64 + std::countr_zero(dirty_[w]);
      dirty_[w] &= dirty_[w] - 1;
      double start = 0;
      for (int k = pred_start_[p]; k < pred_start_[p + 1]; ++k) start = std::max(start, finish_[pred_[k]]);
      const double finish = start + time_at_[p];
      if (finish == finish_[p]) continue;
      finish_[p] = finish;
      for (int k = succ_start_[p]; k < succ_start_[p + 1]; ++k) {
        const int q = succ_[k];  // later in the order: this scan reaches it
        dirty_[q / 64] |= std::uint64_t{1} << (q % 64);
      }
    }
  }
  first_dirty_ = num_nodes_;
  if (updates_ >= kUpdatesBetweenSums) {
    busy_ = compute_energy_ = 0;
    for (const ExecutionOption* option : option_) {
      busy_ += option->real_time;
      compute_energy_ += option->energy;
    }
    updates_ = 0;
  }
}

double ExactTimes::time() {
  propagate();
  return finish_[sink_position_];
}

double ExactTimes::energy() {
  const double iteration = time();
  return compute_energy_ + (problem_.dag.num_stages * iteration - busy_) * problem_.p_block;
}

std::vector<int> ExactTimes::critical_path() {
  propagate();
  std::vector<int> path;
  const int instructions = static_cast<int>(option_.size());
  for (int p = sink_position_;;) {
    int next = -1;
    double start = 0;
    for (int k = pred_start_[p]; k < pred_start_[p + 1]; ++k)
      if (next < 0 || finish_[pred_[k]] > start) {
        next = pred_[k];
        start = finish_[next];
      }
    if (next < 0) break;
    if (node_at_[next] < instructions) path.push_back(node_at_[next]);
    p = next;
  }
  return path;
}

}  // namespace perseus
