#pragma once
// Speeding up a plan one profile clock step at a time along the emulated critical path: the
// mechanism shared by EnvPipe's reconfiguration and fitting a plan to a deadline.
#include <cstddef>
#include <functional>
#include <vector>

#include "perseus/emulate/emulator.hpp"

namespace perseus {

struct RaisableUnit {
  int stage = 0;
  std::size_t slot = 0;
  double start = 0;
  int clock = 0;
};

// Units on `run`'s critical path below their top clock that `eligible(stage, slot)` admits.
std::vector<RaisableUnit> raisable_on_critical_path(const Emulator& emulator, const EmulationResult& run,
                                                    const std::function<bool(int, std::size_t)>& eligible);

// The next faster clock the profile has for (stage, kind); `clock` must be profiled and not the top.
int next_faster_clock(const Emulator& emulator, const Instruction& inst, int clock);

// Raises by one step every unit of `units` that sits at the lowest clock among them.
void raise_lowest(const Emulator& emulator, const std::vector<RaisableUnit>& units,
                  std::vector<std::vector<int>>& frequencies);

}  // namespace perseus
