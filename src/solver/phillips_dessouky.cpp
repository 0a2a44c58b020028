#include "perseus/solver/phillips_dessouky.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <thread>

#include "perseus/solver/bounded_flow_network.hpp"
#include "perseus/util/error.hpp"
#include "perseus/util/pyfloat.hpp"
#include "perseus/util/task_thread.hpp"

namespace perseus {

namespace {

constexpr double kFpError = 1e-6;  // the reference's flow resolution and cost-change tolerance
constexpr double kInfiniteCapacity = 10000.0;  // the reference's "infinite" arc capacity (J)

// Per (stage, kind): cost model values and flow bounds in 1e-6 units for every duration.
struct SpecTable {
  int min = 0, max = 0;
  std::vector<double> cost;                // cost[d - min]
  std::vector<std::int64_t> lower, upper;  // bounds of an arc at duration d
  double at(int d) const { return cost[d - min]; }
};

std::int64_t to_units(double joules) { return static_cast<std::int64_t>(py_floordiv(joules, kFpError)); }

SpecTable make_table(const OperationSpec& spec) {
  SpecTable t;
  t.min = spec.options.min_quant();
  t.max = spec.options.max_quant();
  const CostModel& model = *spec.model;
  for (int d = t.min; d <= t.max; ++d) t.cost.push_back(model(d));
  const std::int64_t infinite = to_units(kInfiniteCapacity);
  for (int d = t.min; d <= t.max; ++d) {
    double lb, ub;
    if (t.min == t.max) {
      lb = 0, ub = kInfiniteCapacity;
    } else if (d - 1 < t.min) {  // cannot be sped up
      lb = std::fabs(model(d) - model(d + 1));
      ub = kInfiniteCapacity;
    } else if (d + 1 > t.max) {  // cannot be slowed down
      lb = 0;
      ub = std::fabs(model(d - 1) - model(d));
    } else {  // the extra 1e-6 leaves room when the model is almost linear
      lb = std::fabs(model(d) - model(d + 1));
      ub = std::fabs(model(d - 1) - model(d)) + kFpError;
    }
    const std::int64_t lower = to_units(lb);
    const std::int64_t upper = ub == kInfiniteCapacity ? infinite : to_units(ub);
    t.lower.push_back(lower);
    t.upper.push_back(std::max(upper, lower));  // a non-convex model must not yield ub < lb
  }
  return t;
}

// Activity-on-arc form, where the flow and the cut live: AON node i becomes arc i, left(i)=2i ->
// right(i)=2i+1; AON edge (u, v) becomes a zero-duration arc right(u) -> left(v). (Times are
// computed on the AON DAG itself.)
struct ArcGraph {
  int num_nodes = 0;
  std::vector<int> from, to;
  std::vector<int> instruction;  // per arc: instruction index, or -1 for dummies
  int source = 0, sink = 0;
};

ArcGraph make_arc_graph(const PipelineDag& dag) {
  ArcGraph g;
  const int n = dag.num_nodes();
  const int num_instructions = static_cast<int>(dag.instructions.size());
  g.num_nodes = 2 * n;
  for (int i = 0; i < n; ++i) {
    g.from.push_back(2 * i);
    g.to.push_back(2 * i + 1);
    g.instruction.push_back(i < num_instructions ? i : -1);
  }
  for (const auto& [u, v] : dag.edges) {
    g.from.push_back(2 * u + 1);
    g.to.push_back(2 * v);
    g.instruction.push_back(-1);
  }
  g.source = 2 * dag.source;
  g.sink = 2 * dag.sink + 1;
  return g;
}

class Solver {
 public:
  Solver(const PlanningProblem& problem, const SolverOptions& options)
      : problem_(problem), options_(options), graph_(make_arc_graph(problem.dag)) {
    for (const auto& spec : problem.specs) tables_.push_back(make_table(spec));
    const auto& insts = problem.dag.instructions;
    table_of_.resize(insts.size());
    for (std::size_t i = 0; i < insts.size(); ++i) {
      table_of_[i] = PlanningProblem::spec_index(model_stage(insts[i], problem.dag.num_stages), insts[i].kind);
      duration_.push_back(tables_[table_of_[i]].max);
      cost_.push_back(tables_[table_of_[i]].at(duration_[i]));
    }
    const int num_nodes = problem.dag.num_nodes();
    auto adjacency = [&](bool forward, std::vector<int>& start, std::vector<int>& list) {
      start.assign(num_nodes + 1, 0);
      for (const auto& [u, v] : problem.dag.edges) ++start[(forward ? v : u) + 1];
      for (int v = 0; v < num_nodes; ++v) start[v + 1] += start[v];
      list.resize(problem.dag.edges.size());
      std::vector<int> fill(start.begin(), start.end() - 1);
      for (const auto& [u, v] : problem.dag.edges) list[fill[forward ? v : u]++] = forward ? u : v;
    };
    std::vector<int> pred_start, pred, succ_start, succ;  // by DAG node
    adjacency(true, pred_start, pred);
    adjacency(false, succ_start, succ);
    order_by_start_time(problem.dag, pred_start, pred);
    by_position(pred_start, pred, pred_start_, pred_);
    by_position(succ_start, succ, succ_start_, succ_);
    duration_at_.resize(num_nodes);
    for (int p = 0; p < num_nodes; ++p) duration_at_[p] = duration_of(dag_order_[p]);
    finish_.resize(num_nodes);
    tail_end_.resize(num_nodes);
    tail_start_.resize(num_nodes);
    sink_position_ = position_[problem.dag.sink];
    // Dependencies (end of u -> start of v) by their ends' positions, the order the critical-arc
    // check visits them in, near the times it reads.
    const int num_dependencies = static_cast<int>(graph_.from.size()) - num_nodes;
    auto ends = [&](int k) {
      return std::pair(position_[graph_.from[num_nodes + k] / 2], position_[graph_.to[num_nodes + k] / 2]);
    };
    std::vector<int> by_ends(num_dependencies);
    for (int k = 0; k < num_dependencies; ++k) by_ends[k] = k;
    std::sort(by_ends.begin(), by_ends.end(), [&](int x, int y) { return ends(x) < ends(y); });
    check_slot_.resize(num_dependencies);
    for (int j = 0; j < num_dependencies; ++j) {
      check_slot_[by_ends[j]] = j;
      check_from_.push_back(ends(by_ends[j]).first);
      check_to_.push_back(ends(by_ends[j]).second);
    }
    compact_id_.assign(graph_.num_nodes, -1);
    previous_flow_.assign(graph_.from.size(), 0);
    const bool large = static_cast<int>(insts.size()) >= SolverOptions::kParallelMinInstructions;
    const bool two_cores = std::thread::hardware_concurrency() >= 2;
    const int threads = options.threads != 0 ? options.threads : (large && two_cores ? 2 : 1);
    if (threads >= 2) helper_ = std::make_unique<TaskThread>();
  }

  Frontier run() {
    Frontier frontier;
    frontier.start_durations = duration_;
    compute_all_times();
    frontier.start_quant_time = makespan_;
    frontier.start_effective_cost = total_cost();
    while (true) {
      if (options_.stop && options_.stop->load(std::memory_order_relaxed)) {
        frontier.interrupted = true;
        frontier.stop_reason = "interrupted";
        break;
      }
      std::string reason;
      if (!step(frontier, reason)) {
        frontier.stop_reason = reason;
        break;
      }
      if (options_.on_progress) options_.on_progress(frontier.points.size(), frontier.points.back().quant_time);
    }
    return frontier;
  }

 private:
  int duration_of(int node) const { return node < static_cast<int>(duration_.size()) ? duration_[node] : 0; }

  // Earliest end times and tails (the longest way on to the sink, from a node's end and from its
  // start) of every node of the pipeline DAG, kept by position in dag_order_ (sorted by start
  // time) with the DAG's edges as positions, so that the passes read memory nearly in order. In
  // the arc graph, node i's arc runs from 2i (its start) to 2i+1 (its end). A step that changed
  // instructions between positions `first` and `last` only moves end times from `first` on and
  // tails up to `last`.
  void compute_times(int first, int last) {
    const int num_nodes = static_cast<int>(dag_order_.size());
    const int *pred_start = pred_start_.data(), *pred = pred_.data(), *duration = duration_at_.data();
    int* finish = finish_.data();
    for (int p = first; p < num_nodes; ++p) {
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
  void compute_all_times() { compute_times(0, static_cast<int>(dag_order_.size()) - 1); }

  // After a step: only from the earliest changed instruction on, and up to the latest.
  void update_times() {
    int first = static_cast<int>(dag_order_.size()), last = -1;
    for (int a : changed_) {
      first = std::min(first, position_[a]);  // an instruction's arc has the instruction's index
      last = std::max(last, position_[a]);
    }
    compute_times(first, last);
  }

  // The pipeline DAG in an order where every edge goes forward, sorted by start time in the
  // slowest plan (ties in topological order): consecutive frontier points change instructions
  // that run at about the same time.
  void order_by_start_time(const PipelineDag& dag, const std::vector<int>& pred_start, const std::vector<int>& pred) {
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
  void by_position(const std::vector<int>& start, const std::vector<int>& list, std::vector<int>& start_out,
                   std::vector<int>& list_out) const {
    start_out.assign(1, 0);
    list_out.clear();
    for (int i : dag_order_) {
      for (int k = start[i]; k < start[i + 1]; ++k) list_out.push_back(position_[list[k]]);
      start_out.push_back(static_cast<int>(list_out.size()));
    }
  }

  // Summed in instruction order every time (the same rounding as the reference's sum), over costs
  // kept per instruction and updated where a step changed a duration.
  double total_cost() const {
    double sum = 0;
    for (double c : cost_) sum += c;
    return sum;
  }
  // What follows an instruction's duration: its cost, and its duration by position.
  void duration_changed(int inst) {
    cost_[inst] = tables_[table_of_[inst]].at(duration_[inst]);
    duration_at_[position_[inst]] = duration_[inst];
  }

  // One Phillips–Dessouky iteration. Returns false (with the reason) when the frontier ends.
  bool step(Frontier& frontier, std::string& reason) {
    if (!flow_and_cut()) {
      reason = "no feasible flow on the critical subgraph";
      return false;
    }
    const auto& speed_up = speed_up_;
    const auto& slow_down = slow_down_;
    if (speed_up.empty()) {
      reason = "no arc crosses the minimum cut forward";
      return false;
    }
    double cost_change = 0;
    for (int a : speed_up) {
      const int inst = graph_.instruction[a];
      if (inst < 0) {
        reason = "the minimum cut crosses a fixed dependency: the iteration cannot get shorter";
        return false;
      }
      const SpecTable& t = tables_[table_of_[inst]];
      const int d = duration_[inst];
      if (d - 1 < t.min) {
        reason = fmt::format("instruction {} already runs at its fastest clock", describe(inst));
        return false;
      }
      cost_change += std::fabs(t.at(d - 1) - t.at(d));
    }
    for (int a : slow_down) {
      const int inst = graph_.instruction[a];
      if (inst < 0) continue;  // dependencies need no slowing down
      const SpecTable& t = tables_[table_of_[inst]];
      const int d = duration_[inst];
      if (d + 1 > t.max) {
        reason = fmt::format("instruction {} already runs at its slowest clock", describe(inst));
        return false;
      }
      cost_change -= std::fabs(t.at(d) - t.at(d + 1));
    }
    if (std::fabs(cost_change) < kFpError) {
      reason = "shortening further changes the cost by less than 1e-6";
      return false;
    }

    FrontierPoint point;
    point.changes_begin = frontier.changes.size();
    for (int a : speed_up) {
      const int inst = graph_.instruction[a];
      frontier.changes.push_back({inst, --duration_[inst]});
    }
    for (int a : slow_down) {
      const int inst = graph_.instruction[a];
      if (inst >= 0) frontier.changes.push_back({inst, ++duration_[inst]});
    }
    changed_.clear();
    for (int a : speed_up) changed_.push_back(a);
    for (int a : slow_down)
      if (graph_.instruction[a] >= 0) changed_.push_back(a);
    for (int a : changed_) duration_changed(graph_.instruction[a]);
    advance();
    point.quant_time = makespan_;
    point.cost_change = cost_change;
    point.effective_cost = point_cost_;
    frontier.points.push_back(point);
    return true;
  }

  // The maximum flow on the critical arcs and its minimum cut (speed_up_, slow_down_). False when
  // no flow meets the bounds. Where advance() already solved it on the last point's critical arcs
  // and they are still the critical ones, that flow and cut are this point's.
  bool flow_and_cut() {
    if (speculated_ && next_same_) {
      speculated_ = false;
      network_.keep_trial();
      return speculative_ok_;
    }
    if (speculated_) network_.undo_trial();
    speculated_ = false;
    const bool same_arcs = collect_critical_arcs();
    if (!solve_flow(same_arcs)) return false;
    find_cut();
    return true;
  }

  // The times of the durations a step has just changed. With a second thread: those times and the
  // check whether the critical arcs stay the same run there, while this thread solves the next
  // point's flow and cut on the same arcs (they are in 99.8% of points), which the next step keeps
  // or takes back. Either way the next point's flow and cut are exactly the sequential ones.
  void advance() {
    const bool speculate = helper_ && options_.algorithm == MaxFlowAlgorithm::dinic && !critical_.empty() &&
                           network_.has_flow();
    if (!speculate) {
      update_times();
      point_cost_ = total_cost();
      return;
    }
    helper_->post(times_task_);
    network_.begin_trial();
    refresh_changed_bounds();
    speculative_ok_ = network_.resolve(arcs_, changed_critical_, rule());
    if (speculative_ok_) find_cut();
    point_cost_ = total_cost();  // while the times are computed, not after
    helper_->finish();
    speculated_ = true;
  }

  // The arcs the last step changed, still critical: their new bounds (they keep their nodes).
  void refresh_changed_bounds() {
    changed_critical_.clear();
    for (int a : changed_) {
      BoundedArc& arc = arcs_[critical_index_[a]];
      arc = bounded(a, arc.from, arc.to);
      changed_critical_.push_back(critical_index_[a]);
    }
  }

  // On a longest path: starts as early as it can and the way on to the sink is as long as it can
  // be. Arc i < the DAG's node count is node i's own (2i -> 2i+1); the rest are zero-duration
  // dependencies.
  bool is_critical(int a) const {
    const int num_dag_nodes = static_cast<int>(dag_order_.size());
    if (a < num_dag_nodes) return finish_[position_[a]] + tail_end_[position_[a]] == makespan_;
    const int k = check_slot_[a - num_dag_nodes];
    return finish_[check_from_[k]] + tail_start_[check_to_[k]] == makespan_;
  }

  // Whether the critical arcs are still those of critical_: is_critical on every arc, by position
  // and without branches (the compiler vectorizes the node arcs' part, which reads memory in order).
  bool same_critical_arcs() const {
    const int num_dag_nodes = static_cast<int>(dag_order_.size());
    const int num_dependencies = static_cast<int>(check_from_.size());
    const int *finish = finish_.data(), *tail_end = tail_end_.data(), *tail_start = tail_start_.data();
    const char* was = critical_at_.data();
    const int makespan = makespan_;
    int differ = 0;
    for (int p = 0; p < num_dag_nodes; ++p) differ |= (finish[p] + tail_end[p] == makespan) != was[p];
    const int *from = check_from_.data(), *to = check_to_.data();
    const char* dependency_was = dependency_critical_.data();
    for (int k = 0; k < num_dependencies; ++k)
      differ |= (finish[from[k]] + tail_start[to[k]] == makespan) != dependency_was[k];
    return differ == 0;
  }

  BoundedArc bounded(int a, int from, int to) const {
    BoundedArc arc{from, to, 0, infinite_units_};
    const int inst = graph_.instruction[a];
    if (inst >= 0) {
      const SpecTable& t = tables_[table_of_[inst]];
      arc.lower = t.lower[duration_[inst] - t.min];
      arc.upper = t.upper[duration_[inst] - t.min];
    }
    return arc;
  }

  // Critical arcs (on a longest path) with their flow bounds, on nodes renumbered
  // densely so that the flow and cut work scales with the critical subgraph, not the pipeline.
  // The flow starts from the last point's: the next critical subgraph is nearly always the same
  // arcs (then only the arcs the last step changed get new bounds, listed in changed_critical_,
  // and the network, its contraction and the cut's adjacency are kept). Returns whether the
  // arcs are the last point's.
  bool collect_critical_arcs() {
    const int num_arcs = static_cast<int>(graph_.from.size());
    if (!critical_.empty() && same_critical_arcs()) {
      refresh_changed_bounds();
      return true;
    }
    // The last flow, per arc of the whole graph, warm-starts the arcs that stay critical.
    for (std::size_t i = 0; i < critical_.size(); ++i) previous_flow_[critical_[i]] = flow_of(static_cast<int>(i));
    for (int v : compact_nodes_) compact_id_[v] = -1;
    compact_nodes_.clear();
    arcs_.clear();
    initial_flow_.clear();
    auto compact = [&](int v) {
      if (compact_id_[v] < 0) {
        compact_id_[v] = static_cast<int>(compact_nodes_.size());
        compact_nodes_.push_back(v);
      }
      return compact_id_[v];
    };
    compact(graph_.source);
    compact(graph_.sink);
    std::swap(critical_, last_critical_);
    critical_.clear();
    critical_index_.assign(num_arcs, -1);
    critical_at_.assign(dag_order_.size(), 0);
    dependency_critical_.assign(check_from_.size(), 0);
    for (int a = 0; a < num_arcs; ++a) {
      if (!is_critical(a)) continue;
      critical_index_[a] = static_cast<int>(critical_.size());
      const int num_dag_nodes = static_cast<int>(dag_order_.size());
      (a < num_dag_nodes ? critical_at_[position_[a]] : dependency_critical_[check_slot_[a - num_dag_nodes]]) = 1;
      critical_.push_back(a);
      const int from = compact(graph_.from[a]);
      arcs_.push_back(bounded(a, from, compact(graph_.to[a])));
      initial_flow_.push_back(std::clamp(previous_flow_[a], arcs_.back().lower, arcs_.back().upper));
    }
    for (int a : last_critical_) previous_flow_[a] = 0;
    adjacency_stale_ = true;
    return false;
  }

  // The maximum flow within the bounds on the critical arcs. The Dinic path keeps its network
  // from the last point when the arcs are the same, and re-solves from the last flow.
  bool solve_flow(bool same_arcs) {
    const int source = compact_id_[graph_.source], sink = compact_id_[graph_.sink];
    const int num_nodes = static_cast<int>(compact_nodes_.size());
    if (options_.algorithm == MaxFlowAlgorithm::dinic) {
      return same_arcs ? network_.resolve(arcs_, changed_critical_, rule())
                       : network_.solve(num_nodes, arcs_, source, sink, &initial_flow_, rule());
    }
    return bounded_max_flow_into(num_nodes, arcs_, source, sink, options_.algorithm, nullptr, rule(), flow_);
  }
  std::int64_t flow_of(int i) const {
    return options_.algorithm == MaxFlowAlgorithm::dinic ? network_.flow(i) : flow_[i];
  }
  Feasibility rule() const {
    return options_.cut_rule == CutRule::reference ? Feasibility::reference : Feasibility::exact;
  }

  // The critical arcs the minimum cut crosses forward (speed_up_) and backward (slow_down_), in
  // arc order. Its source side: nodes reachable from the source through unsaturated arcs.
  void find_cut() {
    if (options_.algorithm == MaxFlowAlgorithm::dinic) {
      network_.min_cut(arcs_, rule(), cut_forward_, cut_backward_);
    } else {
      find_cut_from_the_arcs();
    }
    speed_up_.clear();
    slow_down_.clear();
    for (int i : cut_forward_) speed_up_.push_back(critical_[i]);
    for (int i : cut_backward_) slow_down_.push_back(critical_[i]);
  }

  // The same, searched arc by arc (the oracle's flows, which the network does not hold).
  void find_cut_from_the_arcs() {
    const int num_nodes = static_cast<int>(compact_nodes_.size());
    in_cut_.assign(num_nodes, 0);
    if (adjacency_stale_) build_cut_adjacency();
    const int source = compact_id_[graph_.source];
    side_.assign(1, source);
    in_cut_[source] = 1;
    for (std::size_t next = 0; next < side_.size(); ++next) {
      const int u = side_[next];
      for (int k = adj_start_[u]; k < adj_start_[u + 1]; ++k) {
        const int i = adj_[k];
        const BoundedArc& arc = arcs_[i];
        const bool forward = arc.from == u;
        const int v = forward ? arc.to : arc.from;
        const bool open = forward ? residual_open(arc.upper, flow_[i], rule()) : residual_open(flow_[i], arc.lower, rule());
        if (open && !in_cut_[v]) {
          in_cut_[v] = 1;
          side_.push_back(v);
        }
      }
    }
    cut_forward_.clear();
    cut_backward_.clear();
    for (std::size_t i = 0; i < arcs_.size(); ++i) {
      const bool from_in = in_cut_[arcs_[i].from], to_in = in_cut_[arcs_[i].to];
      if (from_in && !to_in) cut_forward_.push_back(static_cast<int>(i));
      if (!from_in && to_in) cut_backward_.push_back(static_cast<int>(i));
    }
  }

  // Adjacency of the critical subgraph, in both directions.
  void build_cut_adjacency() {
    const int num_nodes = static_cast<int>(compact_nodes_.size());
    adj_start_.assign(num_nodes + 1, 0);
    for (std::size_t i = 0; i < critical_.size(); ++i) {
      ++adj_start_[arcs_[i].from + 1];
      ++adj_start_[arcs_[i].to + 1];
    }
    for (int v = 0; v < num_nodes; ++v) adj_start_[v + 1] += adj_start_[v];
    adj_.resize(2 * critical_.size());
    fill_.assign(adj_start_.begin(), adj_start_.end() - 1);
    for (std::size_t i = 0; i < critical_.size(); ++i) {
      adj_[fill_[arcs_[i].from]++] = static_cast<int>(i);
      adj_[fill_[arcs_[i].to]++] = static_cast<int>(i);
    }
    adjacency_stale_ = false;
  }

  std::string describe(int inst) const {
    const auto& i = problem_.dag.instructions[inst];
    return fmt::format("{}(stage {}, microbatch {})", to_string(i.kind), i.stage, i.microbatch);
  }

  const PlanningProblem& problem_;
  const SolverOptions& options_;
  ArcGraph graph_;
  std::vector<SpecTable> tables_;
  std::vector<int> table_of_;
  std::vector<int> duration_;
  std::vector<double> cost_;  // per instruction: its cost model at its duration
  static constexpr int kNoWayToTheSink = std::numeric_limits<int>::min() / 4;  // never critical
  std::vector<int> position_;  // per DAG node: its place in dag_order_
  std::vector<int> dag_order_;  // the pipeline DAG's nodes by start time
  // By position: the DAG's edges (as positions), durations (0 for the source and sink), earliest
  // end times, tails from the end and from the start.
  std::vector<int> pred_start_, pred_, succ_start_, succ_, duration_at_, finish_, tail_end_, tail_start_;
  int sink_position_ = 0, makespan_ = 0;
  std::vector<char> critical_at_;  // per position: whether its node's arc is in critical_
  // The dependencies in the order the critical-arc check visits them (by their ends' positions):
  // their ends' positions and whether they are in critical_; check_slot_: per dependency, its place.
  std::vector<int> check_from_, check_to_, check_slot_;
  std::vector<char> dependency_critical_;
  std::vector<int> critical_, last_critical_;
  std::vector<int> critical_index_;  // per arc: its index in critical_, or -1
  std::vector<int> changed_;         // arcs whose duration the last step changed
  bool adjacency_stale_ = true;
  std::vector<BoundedArc> arcs_;
  std::vector<std::int64_t> initial_flow_, previous_flow_;
  std::vector<std::int64_t> flow_;  // per critical arc, from the oracle (the Dinic path keeps it in network_)
  BoundedFlowNetwork network_;
  std::vector<int> changed_critical_;  // indices into arcs_ of the arcs the last step changed
  std::vector<int> speed_up_, slow_down_;  // arcs the cut crosses forward / backward
  std::vector<char> in_cut_;  // per compact node: on the source side of the cut
  std::vector<int> side_, cut_forward_, cut_backward_;  // per cut: its source side, and the arcs it crosses
  std::vector<int> compact_id_, compact_nodes_;
  const std::int64_t infinite_units_ = to_units(kInfiniteCapacity);
  std::vector<int> adj_start_, adj_, fill_;
  // What advance() leaves for the next step, and the second thread (null: one thread), declared
  // last so that it stops before the members its task uses go.
  std::function<void()> times_task_ = [this] {
    update_times();
    next_same_ = same_critical_arcs();
  };
  bool speculated_ = false, speculative_ok_ = false, next_same_ = false;
  double point_cost_ = 0;  // total_cost() of the durations advance() was called for
  std::unique_ptr<TaskThread> helper_;
};

}  // namespace

std::vector<int> Frontier::durations_at(std::size_t point) const {
  std::vector<int> durations = start_durations;
  if (point == static_cast<std::size_t>(-1)) return durations;
  for (std::size_t i = 0; i < changes_end(point); ++i) durations[changes[i].instruction] = changes[i].duration;
  return durations;
}

Frontier solve_frontier(const PlanningProblem& problem, const SolverOptions& options) {
  if (problem.specs.size() != static_cast<std::size_t>(2 * problem.dag.num_model_stages())) {
    throw Error("planning problem needs forward and backward specs for every stage");
  }
  if (options.threads < 0 || options.threads > 2)
    throw Error("solver threads must be 0 (automatic), 1 or 2", kExitUsage);
  Solver solver(problem, options);
  return solver.run();
}

}  // namespace perseus
