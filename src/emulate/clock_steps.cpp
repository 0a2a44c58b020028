#include "perseus/emulate/clock_steps.hpp"

#include <algorithm>
#include <limits>

namespace perseus {

std::vector<RaisableUnit> raisable_on_critical_path(const Emulator& emulator, const EmulationResult& run,
                                                    const std::function<bool(int, std::size_t)>& eligible) {
  std::vector<RaisableUnit> units;
  for (std::size_t s = 0; s < run.instructions.size(); ++s) {
    for (std::size_t k = 0; k < run.instructions[s].size(); ++k) {
      const auto& unit = run.instructions[s][k];
      if (!unit.critical || !eligible(static_cast<int>(s), k)) continue;
      const int top = emulator.clocks(unit.instruction).front();
      if (unit.frequency < top) units.push_back({static_cast<int>(s), k, unit.start, unit.frequency});
    }
  }
  return units;
}

int next_faster_clock(const Emulator& emulator, const Instruction& inst, int clock) {
  const auto& clocks = emulator.clocks(inst);  // fastest first
  return *(std::find(clocks.begin(), clocks.end(), clock) - 1);
}

void raise_lowest(const Emulator& emulator, const std::vector<RaisableUnit>& units,
                  std::vector<std::vector<int>>& frequencies) {
  int lowest = std::numeric_limits<int>::max();
  for (const auto& u : units) lowest = std::min(lowest, u.clock);
  const auto& layout = emulator.layout();
  for (const auto& u : units) {
    if (u.clock == lowest) frequencies[u.stage][u.slot] = next_faster_clock(emulator, layout[u.stage][u.slot], u.clock);
  }
}

}  // namespace perseus
