#pragma once
// The all-max baseline: every instruction at the top clock the profile has for it.
// What training runs today, and what every saving is measured against.
#include "perseus/emulate/emulator.hpp"
#include "perseus/plan/frontier_record.hpp"

namespace perseus {

// A plan for the emulator's pipeline with its time and energy filled in by the emulator.
Plan emulated_plan(const Emulator& emulator, std::vector<std::vector<int>> frequencies);

Plan all_max_plan(const Emulator& emulator);

}  // namespace perseus
