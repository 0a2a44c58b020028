#include "perseus/online/decision_event.hpp"

namespace perseus::online {

std::string_view to_string(DecisionEvent event) {
  switch (event) {
    case DecisionEvent::baseline:
      return "baseline";
    case DecisionEvent::baseline_corrected:
      return "baseline corrected";
    case DecisionEvent::slow_pipeline_in_baseline:
      return "slow pipeline in the baseline";
    case DecisionEvent::slow_pipeline_recovered:
      return "slow pipeline recovered";
    case DecisionEvent::profile_reused:
      return "profile reused";
    case DecisionEvent::profiling:
      return "profiling";
    case DecisionEvent::profiling_conditions_changed:
      return "profiling conditions changed";
    case DecisionEvent::profiled:
      return "profiled";
    case DecisionEvent::planning:
      return "planning";
    case DecisionEvent::refining:
      return "refining";
    case DecisionEvent::planned:
      return "planned";
    case DecisionEvent::no_frontier:
      return "no frontier";
    case DecisionEvent::deadline_below_all_max:
      return "deadline below all-max";
    case DecisionEvent::deployed:
      return "deployed";
    case DecisionEvent::clock_latency:
      return "clock latency";
    case DecisionEvent::chosen_for_clock_latency:
      return "chosen for the clock latency";
    case DecisionEvent::stepped_up:
      return "stepped up";
    case DecisionEvent::faster_plan:
      return "faster plan";
    case DecisionEvent::retrying:
      return "retrying";
    case DecisionEvent::saving_plan_again:
      return "saving plan again";
    case DecisionEvent::straggler_detected:
      return "straggler detected";
    case DecisionEvent::straggler_changed:
      return "straggler changed";
    case DecisionEvent::straggler_recovered:
      return "straggler recovered";
    case DecisionEvent::straggler_told:
      return "straggler told";
    case DecisionEvent::straggler_cleared:
      return "straggler cleared";
    case DecisionEvent::straggler_api:
      return "straggler (api)";
    case DecisionEvent::straggler_cleared_api:
      return "straggler cleared (api)";
    case DecisionEvent::slowed_to_straggler:
      return "slowed to the straggler";
    case DecisionEvent::back_to_target_plan:
      return "back to the target plan";
    case DecisionEvent::faster_pace_for_straggler:
      return "faster pace for the straggler";
    case DecisionEvent::paced_earlier:
      return "paced earlier";
    case DecisionEvent::paced_to_new_speeds:
      return "paced to the pipelines' new speeds";
    case DecisionEvent::pipeline_slowed:
      return "pipeline slowed";
    case DecisionEvent::behind_the_straggler:
      return "unpaced behind the straggler";
    case DecisionEvent::paced:
      return "paced";
    case DecisionEvent::pace_lifted:
      return "pace lifted";
    case DecisionEvent::paced_for_power_budget:
      return "paced for the power budget";
    case DecisionEvent::unpaced:
      return "unpaced";
  }
  return "?";
}

}  // namespace perseus::online
