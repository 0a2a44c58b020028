#pragma once
// Baselines by name, so that the CLI, the what-if report and the plots share one list.
#include <string>
#include <vector>

#include "perseus/baselines/zeus.hpp"
#include "perseus/emulate/emulator.hpp"
#include "perseus/plan/frontier_record.hpp"

namespace perseus {

struct BaselineOptions {
  ZeusOptions zeus;
};

struct BaselineResult {
  std::string name;
  Plan plan;         // time and energy as emulated
  std::string note;  // how it stopped or what it chose, for the user
};

// all-max, envpipe-balanced, envpipe-greedy, zeus-global, zeus-stage
const std::vector<std::string>& baseline_names();
// Throws Error (ErrorKind::bad_setting) for an unknown name.
BaselineResult run_baseline(const std::string& name, const Profile& profile, const Emulator& emulator,
                            const BaselineOptions& options = {});

}  // namespace perseus
