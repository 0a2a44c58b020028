#include "perseus/baselines/all_max.hpp"

namespace perseus {

Plan emulated_plan(const Emulator& emulator, std::vector<std::vector<int>> frequencies) {
  const auto& config = emulator.config();
  Plan plan;
  plan.shape() = config.shape();
  const auto [time, energy] = emulator.time_and_energy(frequencies);
  plan.time = time;
  plan.energy = energy;
  plan.frequencies = std::move(frequencies);
  return plan;
}

Plan all_max_plan(const Emulator& emulator) {
  std::vector<std::vector<int>> frequencies;
  for (const auto& stage : emulator.layout()) {
    std::vector<int> clocks;
    for (const auto& inst : stage) clocks.push_back(emulator.clocks(inst).front());
    frequencies.push_back(std::move(clocks));
  }
  return emulated_plan(emulator, std::move(frequencies));
}

}  // namespace perseus
