#pragma once
// Fitting a plan to a deadline on the measured pipeline. The planner works in floored unit times
// (docs/design.md#execution-options), so a frontier plan can run a little longer than predicted, by up
// to about one unit per instruction on its critical path. Before deploying a plan for "finish by
// T'", perseus raises clocks on the real critical path until it does: each step raises the path's
// non-top units that sit at the path's lowest clock by one profile clock step.
#include <optional>
#include <vector>

#include "perseus/emulate/emulator.hpp"

namespace perseus {

struct DeadlineFit {
  std::vector<std::vector<int>> frequencies;
  double time = 0, energy = 0;  // emulated
  int steps = 0;
};

// nullopt when even raising every unit on the critical path cannot meet `deadline`.
std::optional<DeadlineFit> fit_to_deadline(const Emulator& emulator, std::vector<std::vector<int>> frequencies,
                                           double deadline);

}  // namespace perseus
