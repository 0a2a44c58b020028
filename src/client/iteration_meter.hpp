#pragma once
// A rank's metering: the time and energy of each instruction and of the whole iteration, from the
// hooks' events and the GPU's energy counter, and whether the iteration is a measurement at all
// (a counter that went backwards, or a read that failed, makes it none).
//
// Threads: one thread only, the one that handles the hooks' events (the controller thread, or the
// training thread with an inline controller); nothing here is locked. The energy reads are GPU
// calls and may throw; the caller then calls read_failed().
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace perseus::client {

class IterationMeter {
 public:
  using Clock = std::chrono::steady_clock;
  // Per instruction name, the values of each time it ran in the iteration.
  using PerName = std::map<std::string, std::vector<double>>;

  struct Iteration {
    double time_s = 0, energy_j = 0;
    PerName time_breakdown, energy_breakdown;
  };

  // `read_energy_j`: the GPU's energy counter in joules.
  explicit IterationMeter(std::function<double()> read_energy_j) : read_energy_j_(std::move(read_energy_j)) {}

  void step_begin(Clock::time_point time);
  void begin(const std::string& name, Clock::time_point time);
  // An end without a begin measures nothing.
  void end(const std::string& name, Clock::time_point time);
  // The iteration, unless it was measured in part or its counter went backwards.
  std::optional<Iteration> step_end(Clock::time_point time);
  // A GPU read failed in this iteration (gpud restarting, say): it is no measurement.
  void read_failed() { failed_ = true; }

 private:
  struct Open {
    Clock::time_point time;
    double energy_j;
  };
  std::function<double()> read_energy_j_;
  std::map<std::string, Open> open_;
  std::optional<Open> step_open_;
  PerName step_time_, step_energy_;
  bool failed_ = false;
};

}  // namespace perseus::client
