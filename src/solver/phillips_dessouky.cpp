#include "perseus/solver/phillips_dessouky.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <memory>
#include <thread>

#include "perseus/solver/bounded_flow_network.hpp"
#include "perseus/solver/exact_times.hpp"
#include "perseus/solver/in_order_sum.hpp"
#include "perseus/solver/pipeline_times.hpp"
#include "perseus/util/error.hpp"
#include "perseus/util/in_order_thread.hpp"
#include "perseus/util/pyfloat.hpp"

namespace perseus {

namespace {

constexpr double kFpError = 1e-6;              // the reference's flow resolution and cost-change tolerance
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
      : problem_(problem),
        options_(options),
        graph_(make_arc_graph(problem.dag)),
        times_(initial_times()),
        exact_(problem, duration_) {
    compact_id_.assign(graph_.num_nodes, -1);
    previous_flow_.assign(graph_.from.size(), 0);
    is_critical_.assign(graph_.from.size(), 0);
    network_index_.assign(graph_.from.size(), -1);
    const bool large = static_cast<int>(problem.dag.instructions.size()) >= SolverOptions::kParallelMinInstructions;
    const bool two_cores = std::thread::hardware_concurrency() >= 2;
    const int threads = options.threads != 0 ? options.threads : (large && two_cores ? 2 : 1);
    records_.resize(threads >= 2 ? kWindow : 1);
    times_worker_ = std::make_unique<InOrderThread>([this](std::size_t k) { return time_record(k); }, threads >= 2);
  }

  // Each point's flow and cut are solved here; its times (the iteration time, the summed cost, and
  // whether the critical arcs stay those the flow network is built on) come from the times worker,
  // one record per point. With a second thread the worker lags a few points behind, and the flows
  // go on as if the critical arcs stayed the same (they do at 99.8% of points); where the worker
  // finds they did not, the points after it are taken back and solved again. Every point is the
  // one-thread frontier's.
  Frontier run() {
    Frontier frontier;
    frontier.start_durations = duration_;
    times_.compute_all();
    frontier.start_quant_time = times_.makespan();
    frontier.start_effective_cost = times_.total_cost();
    exact_time_ = exact_.time();
    exact_energy_ = exact_.energy();
    while (true) {
      take_results(frontier);
      if (options_.stop && options_.stop->load(std::memory_order_relaxed)) {
        keep_confirmed(frontier);
        frontier.interrupted = true;
        frontier.stop_reason = StopReason::interrupted;
        break;
      }
      const std::size_t pending = pushed_ - consumed_;
      if (pending > 0 && (pending >= records_.size() || !may_guess())) {
        times_worker_->catch_up(consumed_ + 1);
        continue;
      }
      if (pending > 0) {  // a guess: the state it starts from may have to be brought back
        Record& last = records_[(pushed_ - 1) % records_.size()];
        network_.checkpoint(last.checkpoint);
        last.checkpointed = true;
        network_.forget_before(records_[consumed_ % records_.size()].checkpoint);
      } else {
        network_.end_checkpoints();
      }
      StopReason reason = StopReason::none;
      std::string instruction;
      if (step(frontier, reason, instruction)) {
        times_worker_->publish(++pushed_);
        continue;
      }
      if (pushed_ > consumed_) {  // the end, on a guess: it stands only where the guess does
        times_worker_->catch_up(pushed_);
        if (!take_results(frontier) || pushed_ > consumed_) continue;
      }
      frontier.stop_reason = reason;
      frontier.stop_instruction = instruction;
      break;
    }
    return frontier;
  }

 private:
  static constexpr std::size_t kWindow = 8;       // points the flows may run ahead of the times
  static constexpr std::size_t kGuessAfter = 16;  // points in a row that kept their critical arcs

  // What one step changed, for the times worker, and what the worker found for it.
  struct Change {
    int instruction, duration, old_duration;
    double cost;  // at the new duration
  };
  struct Record {
    std::vector<Change> changes;
    int makespan = 0;
    double cost = 0;
    double exact_time = 0, exact_energy = 0;  // the emulated time and energy of the plan after the step
    bool cost_summed = false;                 // by the flows' thread, which was ahead and had time (see step())
    bool same = false;                        // the critical arcs after the step are those the network is built on
    // The network as the step left it, where the next step's flow was a guess.
    BoundedFlowNetwork::Checkpoint checkpoint;
    bool checkpointed = false;
  };

  PipelineTimes initial_times() {
    for (const auto& spec : problem_.specs) tables_.push_back(spec.model ? make_table(spec) : SpecTable{});
    const auto& insts = problem_.dag.instructions;
    std::vector<double> costs;
    for (std::size_t i = 0; i < insts.size(); ++i) {
      table_of_.push_back(PlanningProblem::spec_index(model_stage(insts[i], problem_.dag.num_stages), insts[i].kind));
      duration_.push_back(tables_[table_of_[i]].max);
      costs.push_back(tables_[table_of_[i]].at(duration_[i]));
    }
    cost_ = InOrderSum(costs);
    return PipelineTimes(problem_.dag, duration_, costs);
  }

  // The times worker's item k: record k's changes applied, their times and check.
  bool time_record(std::size_t k) {
    Record& record = records_[k % records_.size()];
    for (const Change& c : record.changes) times_.set_duration(c.instruction, c.duration, c.cost);
    record.same = times_.update();
    record.makespan = times_.makespan();
    if (!record.cost_summed) record.cost = times_.total_cost();
    // The emulated time and energy, computed again only where the step changed a clock: a few
    // points behind the flows, on the thread whose share of the work is the smaller.
    bool clock_changed = false;
    for (const Change& c : record.changes) clock_changed |= exact_.set_duration(c.instruction, c.duration);
    if (clock_changed) {
      exact_time_ = exact_.time();
      exact_energy_ = exact_.energy();
    }
    record.exact_time = exact_time_;
    record.exact_energy = exact_energy_;
    return record.same;
  }

  // The records the worker has done: their points get their times. Where the critical arcs
  // changed, the points after that one are taken back. False when they were.
  bool take_results(Frontier& frontier) {
    const std::size_t done = times_worker_->done();
    times_worker_->rethrow_error();
    while (consumed_ < done) {
      if (options_.stop && options_.stop->load(std::memory_order_relaxed)) return true;
      const Record& record = records_[consumed_ % records_.size()];
      FrontierPoint& point = frontier.points[consumed_];
      point.quant_time = record.makespan;
      point.effective_cost = record.cost;
      point.exact_time = record.exact_time;
      point.exact_energy = record.exact_energy;
      ++consumed_;
      same_streak_ = record.same ? same_streak_ + 1 : 0;
      if (options_.on_progress) options_.on_progress(consumed_, point.quant_time);
      if (!record.same) {
        take_back_after(frontier, consumed_ - 1);
        return false;
      }
    }
    return true;
  }

  // Back to the state right after point r's step: the flows, durations and points after it go,
  // and the next flow is solved on the critical arcs anew.
  void take_back_after(Frontier& frontier, std::size_t r) {
    const Record& record = records_[r % records_.size()];
    if (record.checkpointed) network_.undo_to(record.checkpoint);
    // The network's bounds of the arcs these steps changed are no longer their durations': read again.
    for (std::size_t k = r; k < pushed_; ++k)
      for (const Change& c : records_[k % records_.size()].changes) changed_.push_back(c.instruction);
    for (std::size_t k = pushed_; k-- > r + 1;) {
      const auto& changes = records_[k % records_.size()].changes;
      for (auto c = changes.rbegin(); c != changes.rend(); ++c) {
        duration_[c->instruction] = c->old_duration;
        cost_.set(c->instruction, tables_[table_of_[c->instruction]].at(c->old_duration));
      }
    }
    const std::size_t changes_end = frontier.changes_end(r);
    frontier.points.resize(r + 1);
    frontier.changes.resize(changes_end);
    pushed_ = r + 1;
    times_worker_->restart();
    rebuild_ = true;
  }

  // The points the times have confirmed, on an interrupt.
  void keep_confirmed(Frontier& frontier) const {
    if (consumed_ >= frontier.points.size()) return;
    frontier.changes.resize(frontier.points[consumed_].changes_begin);
    frontier.points.resize(consumed_);
  }

  // A refuted guess costs a whole step's flow, a confirmed one saves only the wait for the times,
  // which are the cheaper side: guess where the critical arcs have stayed put for a while (1F1B:
  // nearly always), not where they keep changing (zero-bubble schedules, whose critical arcs change
  // at most points).
  bool may_guess() const {
    return times_worker_->has_thread() && !options_.max_flow_oracle && !rebuild_ && network_.has_flow() &&
           same_streak_ >= kGuessAfter;
  }

  // One Phillips–Dessouky iteration. Returns false (with the reason) when the frontier ends.
  bool step(Frontier& frontier, StopReason& reason, std::string& instruction) {
    frontier.stop_cut.clear();  // a stop on a guess that was taken back leaves none
    if (!flow_and_cut()) {
      reason = StopReason::no_feasible_flow;
      return false;
    }
    const auto& speed_up = speed_up_;
    const auto& slow_down = slow_down_;
    if (speed_up.empty()) {
      reason = StopReason::no_forward_cut_arc;
      return false;
    }
    double cost_change = 0;
    auto stop_at_cut = [&](StopReason why, int inst) {
      reason = why;
      if (inst >= 0) instruction = describe(inst);
      frontier.stop_cut.clear();
      for (const auto* arcs : {&speed_up, &slow_down})
        for (int a : *arcs)
          if (graph_.instruction[a] >= 0) frontier.stop_cut.push_back(graph_.instruction[a]);
      return false;
    };
    for (int a : speed_up) {
      const int inst = graph_.instruction[a];
      if (inst < 0) return stop_at_cut(StopReason::fixed_dependency_in_cut, -1);
      const SpecTable& t = tables_[table_of_[inst]];
      const int d = duration_[inst];
      if (d - 1 < t.min) return stop_at_cut(StopReason::instruction_at_fastest, inst);
      cost_change += std::fabs(t.at(d - 1) - t.at(d));
    }
    slowed_.clear();
    for (int a : slow_down) {
      const int inst = graph_.instruction[a];
      if (inst < 0) continue;  // dependencies need no slowing down
      const SpecTable& t = tables_[table_of_[inst]];
      const int d = duration_[inst];
      if (d + 1 > t.max) {
        if (options_.reference_stops) return stop_at_cut(StopReason::instruction_at_slowest, inst);
        continue;  // left at its slowest: the paths through it get shorter by one more unit
      }
      cost_change -= std::fabs(t.at(d) - t.at(d + 1));
      slowed_.push_back(a);
    }
    if (options_.reference_stops && std::fabs(cost_change) < kFpError)
      return stop_at_cut(StopReason::negligible_cost_change, -1);

    FrontierPoint point;
    point.changes_begin = frontier.changes.size();
    Record& record = records_[pushed_ % records_.size()];  // free: the worker is done with it
    record.changes.clear();
    record.checkpointed = false;
    auto change = [&](int inst, int by) {
      const int old = duration_[inst];
      duration_[inst] += by;
      frontier.changes.push_back({inst, duration_[inst]});
      const double cost = tables_[table_of_[inst]].at(duration_[inst]);
      cost_.set(inst, cost);
      record.changes.push_back({inst, duration_[inst], old, cost});
    };
    changed_.clear();
    for (int a : speed_up) {
      change(graph_.instruction[a], -1);
      changed_.push_back(a);
    }
    for (int a : slowed_) {
      change(graph_.instruction[a], +1);
      changed_.push_back(a);
    }
    // Where the times are behind (on this stretch they are the slower side), this thread would only
    // wait for them: it sums the cost itself, in instruction order as the times would.
    record.cost_summed = pushed_ > consumed_;
    if (record.cost_summed) record.cost = cost_.sum();
    point.cost_change = cost_change;
    frontier.points.push_back(point);  // its time (and cost) come with the record's results
    return true;
  }

  // The maximum flow on the critical arcs and its minimum cut (speed_up_, slow_down_). False when
  // no flow meets the bounds. On the network of the last point, with new bounds where durations
  // changed, unless the critical arcs changed (rebuild_): then see follow_critical_arcs().
  bool flow_and_cut() {
    bool same_network = true;
    if (!rebuild_) refresh_changed_bounds();
    else same_network = follow_critical_arcs();
    rebuild_ = false;
    if (!solve_flow(same_network)) return false;
    find_cut();
    return true;
  }

  // The arcs the last step changed (or whose bounds a take-back left behind), all in the network:
  // their bounds again (they keep their nodes).
  void refresh_changed_bounds() {
    changed_in_network_.clear();
    for (int a : changed_) refresh_bounds(a);
  }
  void refresh_bounds(int a) {
    const int i = network_index_[a];
    if (i < 0) return;  // not in the network: nothing to bound
    BoundedArc& arc = arcs_[i];
    arc = is_critical_[a] ? bounded(a, arc.from, arc.to) : resting(arc.from, arc.to);
    changed_in_network_.push_back(i);
  }

  // The critical arcs changed. Zero-bubble schedules change them at most points, a few arcs at a
  // time, and mostly arcs that were critical before: so the network keeps every arc that was
  // critical since it was built, an arc that is not critical now resting at a flow of exactly 0
  // (bounds [0, 0]: its residual is closed both ways, so it changes neither the flows nor which
  // nodes the source reaches, and the cut drops it). Arcs coming back or going are then new bounds
  // on the same network. It is built anew where an arc critical for the first time comes in, or
  // where resting arcs would be more than SolverOptions::most_resting of it. Returns whether the network was kept.
  bool follow_critical_arcs() {
    times_.mark_all_critical(next_critical_);
    // Both lists ascend.
    arriving_.clear();
    leaving_.clear();
    std::set_difference(critical_.begin(), critical_.end(), next_critical_.begin(), next_critical_.end(),
                        std::back_inserter(leaving_));
    std::set_difference(next_critical_.begin(), next_critical_.end(), critical_.begin(), critical_.end(),
                        std::back_inserter(arriving_));
    const bool only_known =
        !network_arcs_.empty() && (options_.max_flow_oracle || network_.has_flow()) &&
        std::all_of(arriving_.begin(), arriving_.end(), [&](int a) { return network_index_[a] >= 0; });
    const std::size_t resting_after = network_arcs_.size() - next_critical_.size();
    for (int a : leaving_) is_critical_[a] = 0;
    for (int a : arriving_) is_critical_[a] = 1;
    std::swap(critical_, next_critical_);
    if (only_known && resting_after <= options_.most_resting * network_arcs_.size()) {
      refresh_changed_bounds();
      for (int a : leaving_) refresh_bounds(a);
      for (int a : arriving_) refresh_bounds(a);
      return true;
    }
    build_network_arcs();
    return false;
  }

  BoundedArc resting(int from, int to) const { return {from, to, 0, 0}; }
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

  // The network's arcs: the critical ones (on a longest path; the times mark them, to tell when
  // they change) and, where few enough, those of the last network that rest, with their flow
  // bounds, on nodes renumbered densely so that the flow and cut work scales with the critical
  // subgraph, not the pipeline. The next critical subgraph is nearly always the same arcs (then
  // refresh_changed_bounds() gives the arcs the last step changed their new bounds, and the
  // network, its contraction and the cut's adjacency are kept).
  void build_network_arcs() {
    // The last flow, per arc of the whole graph, warm-starts the arcs that stay.
    for (std::size_t i = 0; i < network_arcs_.size(); ++i)
      previous_flow_[network_arcs_[i]] = flow_of(static_cast<int>(i));
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
    // The critical arcs and the last network's, both ascending, merged; or the critical ones alone.
    std::swap(network_arcs_, last_network_arcs_);
    network_arcs_.clear();
    std::set_union(last_network_arcs_.begin(), last_network_arcs_.end(), arriving_.begin(), arriving_.end(),
                   std::back_inserter(network_arcs_));
    if (network_arcs_.size() - critical_.size() > options_.most_resting * network_arcs_.size())
      network_arcs_ = critical_;
    for (int a : last_network_arcs_) network_index_[a] = -1;
    arcs_.reserve(network_arcs_.size());
    initial_flow_.reserve(network_arcs_.size());
    for (std::size_t i = 0; i < network_arcs_.size(); ++i) {
      const int a = network_arcs_[i];
      network_index_[a] = static_cast<int>(i);
      const int from = compact(graph_.from[a]), to = compact(graph_.to[a]);
      arcs_.push_back(is_critical_[a] ? bounded(a, from, to) : resting(from, to));
      initial_flow_.push_back(std::clamp(previous_flow_[a], arcs_.back().lower, arcs_.back().upper));
    }
    for (int a : last_network_arcs_) previous_flow_[a] = 0;
    adjacency_stale_ = true;
  }

  // The maximum flow within the bounds on the network's arcs. The Dinic path keeps its network
  // from the last point when the arcs are the same, and re-solves from the last flow.
  bool solve_flow(bool same_arcs) {
    const int source = compact_id_[graph_.source], sink = compact_id_[graph_.sink];
    const int num_nodes = static_cast<int>(compact_nodes_.size());
    if (!options_.max_flow_oracle) {
      return same_arcs ? network_.resolve(arcs_, changed_in_network_, rule())
                       : network_.solve(num_nodes, arcs_, source, sink, &initial_flow_, rule());
    }
    auto flow = options_.max_flow_oracle(num_nodes, arcs_, source, sink, rule());
    if (!flow) return false;
    flow_ = std::move(*flow);
    return true;
  }
  std::int64_t flow_of(int i) const { return !options_.max_flow_oracle ? network_.flow(i) : flow_[i]; }
  Feasibility rule() const {
    return options_.cut_rule == CutRule::reference ? Feasibility::reference : Feasibility::exact;
  }

  // The critical arcs the minimum cut crosses forward (speed_up_) and backward (slow_down_), in
  // arc order. Its source side: nodes reachable from the source through unsaturated arcs.
  void find_cut() {
    if (!options_.max_flow_oracle) {
      network_.min_cut(arcs_, rule(), cut_forward_, cut_backward_);
    } else {
      find_cut_from_the_arcs();
    }
    speed_up_.clear();
    slow_down_.clear();
    // Resting arcs are closed both ways: the cut crosses those at its edge, but they are no part of
    // the critical subgraph.
    for (int i : cut_forward_)
      if (is_critical_[network_arcs_[i]]) speed_up_.push_back(network_arcs_[i]);
    for (int i : cut_backward_)
      if (is_critical_[network_arcs_[i]]) slow_down_.push_back(network_arcs_[i]);
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
        const bool open =
            forward ? residual_open(arc.upper, flow_[i], rule()) : residual_open(flow_[i], arc.lower, rule());
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
    for (std::size_t i = 0; i < network_arcs_.size(); ++i) {
      ++adj_start_[arcs_[i].from + 1];
      ++adj_start_[arcs_[i].to + 1];
    }
    for (int v = 0; v < num_nodes; ++v) adj_start_[v + 1] += adj_start_[v];
    adj_.resize(2 * network_arcs_.size());
    fill_.assign(adj_start_.begin(), adj_start_.end() - 1);
    for (std::size_t i = 0; i < network_arcs_.size(); ++i) {
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
  InOrderSum cost_;      // per instruction, at duration_
  PipelineTimes times_;  // the times worker's: see run()
  ExactTimes exact_;     // the times worker's too, as are the last time and energy it found
  double exact_time_ = 0, exact_energy_ = 0;
  std::vector<int> critical_, next_critical_;  // the critical arcs the times are marked with, ascending
  std::vector<char> is_critical_;              // per arc: in critical_
  std::vector<int> arriving_, leaving_;        // arcs that came into / left critical_ at its last change
  // The network's arcs, ascending: the critical ones and, where it kept them, resting ones.
  std::vector<int> network_arcs_, last_network_arcs_;
  std::vector<int> network_index_;  // per arc: its index in network_arcs_ (and arcs_), or -1
  std::vector<int> changed_;        // arcs whose duration the last step changed (or a take-back restored)
  bool adjacency_stale_ = true;
  std::vector<BoundedArc> arcs_;
  std::vector<std::int64_t> initial_flow_, previous_flow_;
  std::vector<std::int64_t> flow_;  // per network arc, from the oracle (the Dinic path keeps it in network_)
  BoundedFlowNetwork network_;
  std::vector<int> changed_in_network_;                 // indices into arcs_ of arcs with new bounds
  std::vector<int> speed_up_, slow_down_;               // arcs the cut crosses forward / backward
  std::vector<int> slowed_;                             // the instruction arcs of slow_down_ a step slows
  std::vector<char> in_cut_;                            // per compact node: on the source side of the cut
  std::vector<int> side_, cut_forward_, cut_backward_;  // per cut: its source side, and the arcs it crosses
  std::vector<int> compact_id_, compact_nodes_;
  const std::int64_t infinite_units_ = to_units(kInfiniteCapacity);
  std::vector<int> adj_start_, adj_, fill_;
  // One record per point not yet taken: [consumed_, pushed_) are the times worker's.
  std::vector<Record> records_;
  std::size_t pushed_ = 0, consumed_ = 0;
  std::size_t same_streak_ = 0;  // the last points taken that kept their critical arcs
  bool rebuild_ = true;          // the next flow is solved on the critical arcs found anew
  // Declared last, so that its thread stops before the members its items use go.
  std::unique_ptr<InOrderThread> times_worker_;
};

}  // namespace

std::string to_string(StopReason reason, const std::string& instruction) {
  switch (reason) {
    case StopReason::none:
      return "not solved";
    case StopReason::interrupted:
      return "interrupted";
    case StopReason::no_feasible_flow:
      return "no feasible flow on the critical subgraph";
    case StopReason::no_forward_cut_arc:
      return "no arc crosses the minimum cut forward";
    case StopReason::fixed_dependency_in_cut:
      return "the minimum cut crosses a fixed dependency: the iteration cannot get shorter";
    case StopReason::instruction_at_fastest:
      return fmt::format("instruction {} already runs at its fastest clock", instruction);
    case StopReason::instruction_at_slowest:
      return fmt::format("instruction {} already runs at its slowest clock", instruction);
    case StopReason::negligible_cost_change:
      return "shortening further changes the cost by less than 1e-6";
  }
  return "unknown";
}

std::vector<int> Frontier::durations_at(std::size_t point) const {
  std::vector<int> durations = start_durations;
  if (point == static_cast<std::size_t>(-1)) return durations;
  for (std::size_t i = 0; i < changes_end(point); ++i) durations[changes[i].instruction] = changes[i].duration;
  return durations;
}

Frontier solve_frontier(const PlanningProblem& problem, const SolverOptions& options) {
  for (const auto& inst : problem.dag.instructions) {
    const auto index =
        static_cast<std::size_t>(PlanningProblem::spec_index(model_stage(inst, problem.dag.num_stages), inst.kind));
    if (index >= problem.specs.size() || !problem.specs[index].model)
      throw Error(fmt::format("planning problem has no {} spec for model stage {}", to_string(inst.kind),
                              model_stage(inst, problem.dag.num_stages)));
  }
  if (options.threads < 0 || options.threads > 2)
    throw Error("solver threads must be 0 (automatic), 1 or 2", ErrorKind::bad_setting);
  if (!(options.most_resting >= 0 && options.most_resting < 1))
    throw Error("the solver's share of resting arcs must be at least 0 and below 1", ErrorKind::bad_setting);
  Solver solver(problem, options);
  return solver.run();
}

}  // namespace perseus
