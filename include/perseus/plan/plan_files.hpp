#pragma once
// Plan files: perseus's JSON, the Perseus artifact's `freqs_pipeline_%05d.py` (a Python list
// literal of per-stage clock lists plus comment lines), and Zeus's `freqs_pipeline_%05d.py` (per
// stage a list of ("forward"|"backward", clock) tuples). Reading never evaluates code: a .py
// file is parsed as data, and anything but such a literal and comments is an error.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "perseus/plan/frontier_record.hpp"
#include "perseus/util/pyfloat.hpp"

namespace perseus {

std::string plan_to_json(const Plan& plan);
// One line per stage: `stage 0: F0@1410 F1@1395 ...`.
std::string plan_to_text(const Plan& plan);
std::string plan_to_python(const Plan& plan, std::size_t iteration);
// Zeus's run_optimization.py layout: `[('forward', 1410), ('backward', 1395), ...],` per stage.
std::string plan_to_zeus(const Plan& plan, std::size_t iteration);

// A plan as read back from a file.
struct PlanFile {
  std::vector<std::vector<int>> frequencies;                    // per stage, in schedule order
  std::vector<std::vector<std::string>> instructions;           // Zeus format only: "forward"/"backward" per clock
  std::optional<double> cost_change, total_cost, refined_cost;  // .py comment lines, if present
  std::optional<double> time, energy;                           // JSON; Zeus: energy = "total cost with P2P"
  std::optional<ScheduleKind> schedule;                         // JSON only
  std::vector<int> extra_forwards;                              // JSON only
  int virtual_stages = 1;                                       // JSON only
  std::optional<int> num_microbatches;                          // JSON only
};

PlanFile parse_python_plan(const std::string& text, const std::string& source);
PlanFile parse_json_plan(const std::string& text, const std::string& source);
// Dispatches on the extension (.py or .json).
PlanFile read_plan_file(const std::filesystem::path& path);

}  // namespace perseus
