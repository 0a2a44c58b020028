#pragma once
// The planner's output directory: the frontier, and a compact record of every plan
// on it (the starting plan plus, per point, the instructions whose clock changed), from which any
// plan is reconstructed exactly without re-running the solver.
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "perseus/pipeline/schedule.hpp"
#include "perseus/pipeline/shape.hpp"
#include "perseus/solver/phillips_dessouky.hpp"

namespace perseus {

struct RecordedPoint {
  int quant_time = 0;
  double time = 0;    // the planner's: quant_time * unit_time, seconds
  double energy = 0;  // the planner's: effective_cost + S * time * P_block (the reference's refined cost)
  double cost_change = 0;
  double effective_cost = 0;
  double profile_energy = 0;  // measured effective energies of the assigned clocks + S*T*P_block
  // The plan run on the profile, as the emulator runs it: every instruction the time and energy
  // of its clock, unquantized. NaN in a record written without them (an older perseus).
  double emulated_time = std::numeric_limits<double>::quiet_NaN();
  double emulated_energy = std::numeric_limits<double>::quiet_NaN();
  // Another point is at least as fast and as cheap, and faster or cheaper (shown time and energy):
  // no deadline makes this plan the one to choose.
  bool dominated = false;

  bool has_emulated() const { return emulated_time == emulated_time; }  // not NaN
  // What a user sees and chooses by: the emulated time and energy where the record has them.
  double shown_time() const { return has_emulated() ? emulated_time : time; }
  double shown_energy() const { return has_emulated() ? emulated_energy : energy; }
};

struct SlotChange {
  int stage = 0;
  int slot = 0;  // position in the stage's schedule
  int duration = 0;
  int frequency = 0;
};

struct FrontierRecord : PipelineShape {
  std::string profile;
  double unit_time = 0;
  double p_block = 0;
  std::string cost_model;
  bool recompute = false;  // planned with activation recomputation (with_recomputation)
  std::string stop_reason;
  bool interrupted = false;
  bool fastest_fitted = false;                      // Frontier::fastest_fitted
  std::vector<std::vector<int>> start_durations;    // per stage, per slot
  std::vector<std::vector<int>> start_frequencies;  // per stage, per slot
  int start_quant_time = 0;
  std::vector<RecordedPoint> points;             // slowest first
  std::vector<std::vector<SlotChange>> changes;  // per point
  std::vector<std::string> model_descriptions;   // per (stage, kind), for the metadata file
  std::vector<std::string> model_fallbacks;      // per (stage, kind): why auto chose the hull, or empty

  std::vector<std::vector<Instruction>> stage_instructions() const;
};

// One frequency plan: the clock of every forward and backward of every stage, in schedule order.
struct Plan : PipelineShape {
  std::optional<std::size_t> index;                      // frontier point, when it came from a frontier
  double time = 0;                                       // the planner's quantized time (s)
  double energy = 0;                                     // the planner's model energy (J): the reference's refined cost
  std::optional<double> emulated_time, emulated_energy;  // on the profile, unquantized, where known
  std::vector<std::vector<int>> frequencies;

  // Instructions of each stage in schedule order, matching `frequencies`.
  std::vector<std::vector<Instruction>> stage_instructions() const;
  double cost_change = 0, effective_cost = 0;  // for the artifact's .py comments
};

struct RecordInfo {
  std::string profile;
  std::string cost_model;
  bool recompute = false;
};

FrontierRecord make_frontier_record(const PlanningProblem& problem, const Frontier& frontier, const RecordInfo& info);

// Writes frontier.csv, iteration_time_energy.csv, plans.json and plan_changes.csv into `dir`
// (created if missing), each atomically.
void write_frontier_record(const FrontierRecord& record, const std::filesystem::path& dir);
FrontierRecord read_frontier_record(const std::filesystem::path& dir);

Plan plan_at(const FrontierRecord& record, std::size_t index);
// Moves `plan` (currently at a point before `index`) forward to `index` by replaying only the
// changes in between, so that walking the frontier in order stays linear.
void advance_plan(const FrontierRecord& record, Plan& plan, std::size_t index);
// The cheapest point whose time is at most `deadline` seconds; nullopt when none is that fast.
// Times and energies are the emulated ones where the record has them (RecordedPoint::shown_time).
std::optional<std::size_t> cheapest_within(const FrontierRecord& record, double deadline);
// The fastest point (the least shown time; the later on a tie) and the cheapest (the least shown
// energy; the faster on a tie). The record must have a point.
std::size_t fastest_point(const FrontierRecord& record);
std::size_t cheapest_point(const FrontierRecord& record);
// Per (time, energy) point: whether another is at least as fast and as cheap, and faster or cheaper.
// Points that coincide dominate none of each other.
std::vector<bool> dominated_points(const std::vector<std::pair<double, double>>& points);
// Sets every point's `dominated` from its shown time and energy.
void mark_dominated(FrontierRecord& record);

}  // namespace perseus
