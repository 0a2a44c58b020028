#pragma once
// Planning inside the server: the frontier of a profile measured online, computed on a
// worker thread so that the server's I/O threads keep serving every other job (and this one: its
// ranks keep training at the top clock meanwhile). Each frontier plan, and all-max, is then run on
// the emulator with the measured profile, so that plans are chosen by what they are predicted to
// take there, not by the planner's quantized times.
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "perseus/emulate/emulator.hpp"
#include "perseus/online/background_task.hpp"
#include "perseus/plan/frontier_record.hpp"
#include "perseus/profile/profile.hpp"
#include "perseus/solver/planning.hpp"

namespace perseus::online {

struct PlanCandidate {
  std::optional<std::size_t> point;  // frontier point; none: all-max
  double time = 0;                   // emulated iteration time of one pipeline, seconds
  double energy = 0;                 // emulated energy of one pipeline's iteration, joules (one GPU per stage)
};

// Where the frontier was planned with a second cost model too: what the cheaper plan at the target
// deadline costs under each (energy with blocking until the deadline, joules per pipeline).
struct CostModelComparison {
  CostModelKind kept, other;
  double kept_cost = 0, other_cost = 0;
  double margin = 0;                                     // PlanningInput::compare_margin
  std::map<std::string, std::string> other_cost_models;  // the other frontier's, as PlanningOutput::cost_models
};

struct PlanningOutput {
  FrontierRecord record;
  std::vector<PlanCandidate> candidates;           // frontier points slowest first, then all-max (the last)
  std::map<std::string, std::string> cost_models;  // "stage 0 forward" -> exp | pwl | constant
  double seconds = 0;                              // wall time of planning
  std::shared_ptr<const Emulator> emulator;        // the pipeline of the measured profile
  std::optional<CostModelComparison> comparison;   // set where a second cost model was planned with

  const PlanCandidate& all_max() const { return candidates.back(); }
  // The clocks of a candidate, per stage and slot in schedule order.
  std::vector<std::vector<int>> frequencies(std::size_t candidate) const;
};

// A plan to deploy, with what the emulator predicts for it.
struct ChosenPlan {
  std::optional<std::size_t> point;  // the frontier point it comes from; none: all-max
  int fit_steps =
      0;  // clock steps that fitted it to its deadline (deadline_fit.hpp: raises; under noise, also lowerings)
  std::vector<std::vector<int>> frequencies;
  double time = 0, energy = 0;  // emulated: one pipeline's iteration, seconds and joules
  std::string label() const;
  bool is_all_max() const { return !point && fit_steps == 0; }
};

// The cheapest plan (blocking until the deadline included) that the emulator says finishes by
// `deadline` seconds: a frontier plan as it is, or the planner's pick for that deadline fitted to it
// (as perseus whatif chooses). The fastest plan when none does.
ChosenPlan choose_plan(const PlanningOutput& plans, double deadline);
// What `plan` costs by `deadline` seconds: its energy and its stages' blocking until then (joules,
// one pipeline): what choose_plan minimises.
double cost_until(const PlanningOutput& plans, const ChosenPlan& plan, double deadline);
ChosenPlan fastest_plan(const PlanningOutput& plans);
ChosenPlan all_max(const PlanningOutput& plans);

struct PlanningInput {
  Profile profile;
  PlanningConfig config;
  std::filesystem::path record_dir;  // where the frontier record goes; empty: not written
  // Also plan with this cost model and keep its frontier where its plan at the target deadline costs
  // less by emulation (by the margin below). `auto` fits an exponential wherever the fit passes its
  // checks, and a measured profile can bend where no exponential does (a faster clock that runs
  // slower, a dip): there the piecewise-linear hull finds plans the fit hides, and elsewhere the fit's
  // smoothness wins.
  std::optional<CostModelKind> compare_with;
  // The second model's frontier is kept only where its plan costs less by more than this share: the
  // piecewise-linear hull runs through every measured point, the ones the noise made look cheap
  // too, so that its plans' costs are that much too good where the profile is noisy.
  double compare_margin = 0;
  // The target deadline (seconds, emulated) from all-max's emulated time; needed with compare_with.
  std::function<double(double all_max_time)> target_deadline;
};

// Plans now, on this thread; throws what the planner throws.
PlanningOutput plan_online(const PlanningInput& input, const std::atomic<bool>* stop = nullptr);

// A fiftieth of the shortest top-clock instruction, rounded down to two significant digits,
// between 1 µs and 1 s: fine enough that a step of the frontier is small next to any instruction,
// coarse enough to plan in well under a minute. It follows the measurement smoothly (a change of a
// few percent in the shortest instruction moves it by as much, and the frontier's size with it;
// a rule with steps, such as powers of ten, jumps tenfold when a measurement crosses one).
// `previous`: the unit time planned with before for the same job; kept while it stays within 25%
// of the rule's value, so that re-planning from a re-measured profile keeps the same unit.
double automatic_unit_time(const Profile& profile, std::optional<double> previous = std::nullopt);

class BackgroundPlanner {
 public:
  BackgroundPlanner() = default;
  ~BackgroundPlanner();  // stops the solver and waits for the thread
  BackgroundPlanner(const BackgroundPlanner&) = delete;
  BackgroundPlanner& operator=(const BackgroundPlanner&) = delete;

  // `done` is called on the worker thread when the result is ready (or planning failed).
  void start(
      PlanningInput input, std::function<void()> done = [] {});
  bool ready() const;
  // The result once ready(); rethrows the planner's exception.
  PlanningOutput take();

 private:
  std::atomic<bool> stop_{false};
  BackgroundTask<PlanningOutput> task_;
};

}  // namespace perseus::online
