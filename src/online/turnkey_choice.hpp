#pragma once
// The turnkey controller's plan choices, off the round path: what a choice needs is copied off the
// controller on the job's strand (a ChoiceContext), the choice runs on a thread of its own, and the
// controller takes its result on the strand again (turnkey_controller.cpp). Nothing here reads the
// controller.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "perseus/online/background_planner.hpp"
#include "perseus/online/noise_aware_choice.hpp"
#include "perseus/online/turnkey_controller.hpp"

namespace perseus::online::choice {

// What a choice knows of the job when it was asked for.
struct ChoiceContext {
  const PlanningOutput* plans = nullptr;  // the controller's; planning never replaces them while deployed
  // Per pipeline: its GPUs' speed now per (model stage, kind); `straggling`: with the detected
  // straggler's slowdown on the straggler too; its pace (baseline pace times its change since).
  std::vector<std::map<StageKind, double>> speeds, straggling;
  std::vector<double> paces;
  bool pipelines_known = false;  // the baseline measured each pipeline
  double latency = 0;            // seconds a clock change takes to apply
  double threshold = 0.05;       // the straggler detector's
  Variability variability;       // as measured; plans are chosen under it times caution
  double caution = 1;
  std::optional<ActiveStraggler> straggler;  // told or detected (a told one with its compute time)
  double deadline = 0;                       // the target deadline (model seconds)
  double tolerance = 0.0035;                 // how much slower than the target a plan may measure
  double lead_deadline = 0;                  // the target deadline with the miss to spare (model seconds)
  // A detected straggler followed: how much slower than the model the pipelines ran together (1: as
  // predicted); the others are paced as if the straggler ended that much sooner.
  double pace_miss = 1;
  bool lead_without_allowance = false;  // the followed straggler's own plan measured too slow
  std::optional<double> budget_pace;    // a power budget's pace (model seconds)
  // A pipeline paced to the straggler fell behind it: every pipeline but the straggler runs the target
  // plan until the straggler detector tells what changed.
  bool unpaced = false;
  std::optional<ChosenPlan> target;  // the target plan, when not chosen anew

  Variability cautious() const;
};

NoiseAwareOptions options_for(const ChoiceContext& c, const std::vector<std::size_t>& group, bool straggling);
double time_on(const ChoiceContext& c, std::size_t d, const std::vector<std::vector<int>>& frequencies,
               bool straggling);
// The pipelines that set the pace: the slowest at all-max (`top`), and those whose GPUs run every
// (model stage, kind) at about its `speeds`.
std::vector<std::size_t> lead_pipelines(const std::vector<double>& top,
                                        const std::vector<std::map<StageKind, double>>& speeds);
// The options for the pace setters `lead`: their GPUs, drawn as many times as pipelines finish at
// about the slowest one's pace at all-max (`top`).
NoiseAwareOptions lead_options(const ChoiceContext& c, const std::vector<std::size_t>& lead,
                               const std::vector<double>& top, bool straggling);
// The options the target plan is chosen with: the lead pipelines' GPUs.
NoiseAwareOptions target_options(const ChoiceContext& c);

// A new target plan, and how much more cautious choosing it made the controller (a factor on caution).
struct TargetChoice {
  explicit TargetChoice(ChosenPlan chosen = {}) : plan(std::move(chosen)) {}
  ChosenPlan plan;
  double caution_factor = 1;
  std::optional<double> top_spread;  // at deployment: all-max's iteration time's relative stddev under the noise
  std::string widened;               // what widened the noise's allowance, when it did (empty: it did not)
};

// Every pipeline's plan: index into paced (kTargetPlan: the target plan, kLeadPlan: lead_plan).
struct Assignment {
  static constexpr int kTargetPlan = -1;
  static constexpr int kLeadPlan = -2;
  std::optional<ActiveStraggler> straggler;  // what the plans follow (a slow pipeline of the baseline included)
  std::optional<ChosenPlan> lead_plan;
  std::vector<ChosenPlan> paced;
  std::vector<int> pace_of;
  std::vector<double> predicted;  // per pipeline: its plan's time on its GPUs, no straggler (model seconds)
};

Assignment assign(const ChoiceContext& c, const ChosenPlan& target);

struct ChoiceResult {
  std::optional<TargetChoice> target;
  Assignment assignment;
};

}  // namespace perseus::online::choice
