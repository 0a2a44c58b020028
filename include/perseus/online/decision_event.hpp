#pragma once
// What the turnkey controller decided, one kind per entry of its decision log. The words each kind
// is shown as (status JSON, the log, the web page) are written in one place: to_string.
#include <string_view>

namespace perseus::online {

enum class DecisionEvent {
  // The all-max baseline and the pipelines measured in it.
  baseline,
  baseline_corrected,
  slow_pipeline_in_baseline,
  slow_pipeline_recovered,
  // Profiling and planning.
  profile_reused,
  profiling,
  profiling_conditions_changed,
  profiled,
  planning,
  refining,
  planned,
  no_frontier,
  deadline_below_all_max,
  // Plan choices: the reason a plan was chosen, said when the plans change.
  deployed,
  clock_latency,
  chosen_for_clock_latency,
  stepped_up,
  faster_plan,
  retrying,
  saving_plan_again,
  // Stragglers, detected or told through the API, and the plans that follow them.
  straggler_detected,
  straggler_changed,
  straggler_recovered,
  straggler_told,
  straggler_cleared,
  straggler_api,
  straggler_cleared_api,
  slowed_to_straggler,
  back_to_target_plan,
  faster_pace_for_straggler,
  paced_earlier,  // pipelines paced to others that ended the iteration, with no straggler
  paced_to_new_speeds,
  pipeline_slowed,
  behind_the_straggler,
  // The cluster's power budget.
  paced,
  pace_lifted,
  paced_for_power_budget,
  unpaced,
};

// The words shown for the event; stable: tests, docs and the web page match them.
std::string_view to_string(DecisionEvent event);

}  // namespace perseus::online
