#pragma once
// What running something costs: seconds and joules, named (not a pair of doubles whose order a
// reader has to remember).
namespace perseus {

struct TimeEnergy {
  double time = 0;    // seconds
  double energy = 0;  // joules
};

}  // namespace perseus
