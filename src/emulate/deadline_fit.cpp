#include "perseus/emulate/deadline_fit.hpp"

#include "perseus/emulate/clock_steps.hpp"

namespace perseus {

std::optional<DeadlineFit> fit_to_deadline(const Emulator& emulator, std::vector<std::vector<int>> frequencies,
                                           double deadline) {
  DeadlineFit fit;
  for (;;) {
    const auto run = emulator.run(frequencies);
    if (run.iteration_time <= deadline) {
      fit.time = run.iteration_time;
      fit.energy = run.energy;
      fit.frequencies = std::move(frequencies);
      return fit;
    }
    const auto units = raisable_on_critical_path(emulator, run, [](int, std::size_t) { return true; });
    if (units.empty()) return std::nullopt;  // the path is at top clocks
    raise_lowest(emulator, units, frequencies);
    ++fit.steps;
  }
}

}  // namespace perseus
