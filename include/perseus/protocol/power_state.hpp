#pragma once
// A power state in its unit. On the wire a plan's power state is a bare integer whose unit is the
// job's PowerMode: a GPU clock in MHz or a power limit in W; the GPU libraries take limits in mW.
// Each unit is its own type: a clock cannot be set as a limit, and watts reach a GPU only through
// to_milliwatts.
#include <variant>

#include "perseus/protocol/power_mode.hpp"

namespace perseus::protocol {

struct Megahertz {
  unsigned value = 0;
  bool operator==(const Megahertz&) const = default;
};

struct Watts {
  unsigned value = 0;
  bool operator==(const Watts&) const = default;
};

struct Milliwatts {
  unsigned value = 0;
  bool operator==(const Milliwatts&) const = default;
};

constexpr Milliwatts to_milliwatts(Watts limit) { return {limit.value * 1000u}; }
// Fractional watts (a power budget's limit), truncated to whole milliwatts; non-negative.
constexpr Milliwatts to_milliwatts(double watts) { return {static_cast<unsigned>(watts * 1000)}; }
constexpr double to_watts(Milliwatts limit) { return limit.value / 1000.0; }
// The whole watts within a range of milliwatts: its top rounded down, its bottom rounded up.
constexpr Watts watts_at_most(Milliwatts limit) { return {limit.value / 1000u}; }
constexpr Watts watts_at_least(Milliwatts limit) { return {(limit.value + 999u) / 1000u}; }

// A plan's power state read in the job's mode.
using PowerState = std::variant<Megahertz, Watts>;

constexpr PowerState power_state(PowerMode mode, unsigned state) {
  if (mode == PowerMode::power_limit) return Watts{state};
  return Megahertz{state};
}

}  // namespace perseus::protocol
