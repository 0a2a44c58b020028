#pragma once
// Zeus-style baselines (docs/design.md#baselines-and-the-emulator). Zeus picks a GPU power limit by the cost
//   eta * E + (1 - eta) * MaxPower * T.
// A power limit acts on a GPU by capping its clock: under a limit the GPU settles on the highest
// clock whose power fits. Every limit therefore maps to one clock, and searching limits is
// searching clocks; we search the profile's clocks directly (the energy and time Zeus's JIT
// profiling would measure are the emulator's) and report the chosen clock.
#include "perseus/emulate/emulator.hpp"
#include "perseus/plan/frontier_record.hpp"

namespace perseus {

struct ZeusOptions {
  double eta = 0.5;      // weight of energy against time, in [0, 1]
  double max_power = 0;  // watts per GPU; 0: the highest average power of any profile row
};

// One clock for every GPU (ZeusGlobalPowerLimit): among the clocks every (stage, kind) has,
// minimizes eta * E + (1 - eta) * S * MaxPower * T of the emulated iteration.
Plan zeus_global_plan(const Emulator& emulator, const Profile& profile, const ZeusOptions& options);

// One clock per stage (ZeusLocalPowerState): each stage minimizes its own
// eta * E_s + (1 - eta) * MaxPower * T_s, where E_s and T_s are its compute energy and time of
// one iteration; it cannot see the pipeline, which is what separates it from perseus.
Plan zeus_stage_plan(const Emulator& emulator, const Profile& profile, const ZeusOptions& options);

// The MaxPower default: the highest energy/time of any profile row.
double profile_max_power(const Profile& profile);

}  // namespace perseus
