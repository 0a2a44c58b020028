#pragma once
// A hand-computable profile for emulator and baseline tests.
#include <fmt/format.h>

#include <string>

#include "perseus/profile/profile.hpp"

namespace perseus::fixtures {

// Two clocks per (stage, kind): at 1000 MHz a forward takes 1 s / 10 J and a backward 2 s / 20 J;
// at 500 MHz twice as long for 80% of the energy. `scale` stretches every time of `scaled_stage`.
inline Profile two_clock_profile(int stages, int scaled_stage = -1, double scale = 1) {
  std::string csv = "stage,instruction,frequency,time,energy\n";
  for (int s = 0; s < stages; ++s) {
    const double k = s == scaled_stage ? scale : 1;
    csv += fmt::format("{0},forward,1000,{1},10\n{0},forward,500,{2},8\n", s, 1 * k, 2 * k);
    csv += fmt::format("{0},backward,1000,{1},20\n{0},backward,500,{2},16\n", s, 2 * k, 4 * k);
  }
  return parse_profile(csv, "two-clock.csv");
}

}  // namespace perseus::fixtures
