#pragma once
// The times of the pipeline DAG under the planner's current durations (earliest end times, the
// longest way on to the sink, the iteration time), which arcs of its activity-on-arc form are
// critical, and the summed cost. The planner keeps one of these per run; with a second thread it
// lives on that thread, a few steps behind the flows, so it only ever learns durations through
// set_duration() and shares nothing else with the flow side.
#include <cstdint>
#include <vector>

#include "perseus/pipeline/dag.hpp"
#include "perseus/solver/in_order_sum.hpp"

namespace perseus {

class PipelineTimes {
 public:
  // `durations` and `costs` per instruction (the source and sink take no time and cost nothing).
  PipelineTimes(const PipelineDag& dag, const std::vector<int>& durations, const std::vector<double>& costs);

  // One instruction's new duration and cost; update() then recomputes what they move, and returns
  // whether the arcs critical now are exactly the marked ones (checked in the same passes).
  void set_duration(int instruction, int duration, double cost);
  bool update();
  void compute_all();

  int makespan() const { return makespan_; }
  // Summed in instruction order (InOrderSum): the same rounding as the reference's sum.
  double total_cost() const;

  // Arcs as the solver's activity-on-arc graph numbers them: arc i < the DAG's node count is node
  // i's own, arc nodes + k is the dependency dag.edges[k]. Critical: on a longest path.
  bool is_critical(int arc) const;
  // The critical set the planner's flow network is built on: cleared, then marked arc by arc.
  void clear_critical();
  void mark_critical(int arc);
  // The same in one pass: every critical arc, ascending, into `out`, and the marks set to them.
  void mark_all_critical(std::vector<int>& out);

 private:
  void order_by_start_time(const PipelineDag& dag, const std::vector<int>& pred_start, const std::vector<int>& pred,
                           const std::vector<int>& durations);
  void by_position(const std::vector<int>& start, const std::vector<int>& list, std::vector<int>& pairs_out,
                   std::vector<int>& extra_start_out, std::vector<int>& extra_out) const;
  bool compute_times(int first, int last);

  static constexpr int kNoWayToTheSink = -(1 << 29);  // never critical
  int num_nodes_ = 0;
  std::vector<int> position_;   // per DAG node: its place in dag_order_
  std::vector<int> dag_order_;  // the DAG's nodes by start time in the slowest plan
  // By position: each node's predecessors and successors as a pair of positions (pipeline nodes
  // have at most two of each: the passes take a max of two without a loop), the missing padded
  // with the position num_nodes_, whose end time (0) and tail (none) leave a max unchanged; a node
  // with more has ~k first, k its list in extra_*. Durations (0 for the source and sink), earliest
  // end times, tails from the end and from the start.
  std::vector<int> pred_pair_, succ_pair_, extra_pred_start_, extra_pred_, extra_succ_start_, extra_succ_;
  std::vector<int> extra_succ_positions_;  // the positions of nodes with a successor list, ascending
  std::vector<int> duration_at_, finish_, tail_end_, tail_start_;
  int sink_position_ = 0, makespan_ = 0;
  int first_changed_ = 0, last_changed_ = -1;  // positions set_duration() touched since the last update
  mutable InOrderSum cost_;                    // per instruction; summed again only from the first change
  // Marks: per position, whether its node's arc is marked; per successor slot (succ_pair_, then
  // extra_succ_), whether the dependency to that successor is. Per dependency k (dag.edges[k]):
  // its ends' positions, and its slot (>= 0 in succ_pair_, ~i for extra_succ_[i]).
  std::vector<char> critical_at_, succ_critical_, extra_succ_critical_;
  std::vector<int> dependency_from_, dependency_to_, dependency_slot_;
};

}  // namespace perseus
