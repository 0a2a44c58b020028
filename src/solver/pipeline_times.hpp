#pragma once
// The times of the pipeline DAG under the planner's current durations (earliest end times, the
// longest way on to the sink, the iteration time), which arcs of its activity-on-arc form are
// critical, and the summed cost. The planner keeps one of these per run; with a second thread it
// lives on that thread, a few steps behind the flows, so it only ever learns durations through
// set_duration() and shares nothing else with the flow side.
#include <cstdint>
#include <vector>

#include "perseus/pipeline/dag.hpp"

namespace perseus {

class PipelineTimes {
 public:
  // `durations` and `costs` per instruction (the source and sink take no time and cost nothing).
  PipelineTimes(const PipelineDag& dag, const std::vector<int>& durations, const std::vector<double>& costs);

  // One instruction's new duration and cost; update() then recomputes what they move.
  void set_duration(int instruction, int duration, double cost);
  void update();
  void compute_all();

  int makespan() const { return makespan_; }
  // Summed in instruction order every time: the same rounding as the reference's sum.
  double total_cost() const;

  // Arcs as the solver's activity-on-arc graph numbers them: arc i < the DAG's node count is node
  // i's own, arc nodes + k is the dependency dag.edges[k]. Critical: on a longest path.
  bool is_critical(int arc) const;
  // The critical set the planner's flow network is built on: cleared, then marked arc by arc.
  void clear_critical();
  void mark_critical(int arc);
  // Whether the arcs critical now are exactly the marked ones.
  bool same_critical() const;

 private:
  void order_by_start_time(const PipelineDag& dag, const std::vector<int>& pred_start, const std::vector<int>& pred,
                           const std::vector<int>& durations);
  void by_position(const std::vector<int>& start, const std::vector<int>& list, std::vector<int>& start_out,
                   std::vector<int>& list_out) const;
  void compute_times(int first, int last);

  static constexpr int kNoWayToTheSink = -(1 << 29);  // never critical
  int num_nodes_ = 0;
  std::vector<int> position_;   // per DAG node: its place in dag_order_
  std::vector<int> dag_order_;  // the DAG's nodes by start time in the slowest plan
  // By position: the DAG's edges (as positions), durations (0 for the source and sink), earliest
  // end times, tails from the end and from the start.
  std::vector<int> pred_start_, pred_, succ_start_, succ_, duration_at_, finish_, tail_end_, tail_start_;
  int sink_position_ = 0, makespan_ = 0;
  int first_changed_ = 0, last_changed_ = -1;  // positions set_duration() touched since the last update
  std::vector<double> cost_;  // per instruction
  std::vector<char> critical_at_;  // per position: whether its node's arc is marked
  // The dependencies in the order same_critical() visits them (by their ends' positions): their
  // ends' positions and whether they are marked; check_slot_: per dependency, its place.
  std::vector<int> check_from_, check_to_, check_slot_;
  std::vector<char> dependency_critical_;
};

}  // namespace perseus
