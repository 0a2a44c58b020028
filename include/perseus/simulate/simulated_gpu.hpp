#pragma once
// One GPU of `perseus simulate`: it has the clocks of a measured profile, remembers the
// clock a client locked, and its energy counter is what the simulator says it consumed up to the
// simulated time of the reading. It does no timing itself; the simulator asks it which clock is
// in effect and charges time and energy from the profile. A locked clock takes effect `latency`
// seconds of simulated time after the request, as a real GPU's does some time after the call
// (until then it runs at the clock before).
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "perseus/gpu/gpu.hpp"

namespace perseus::simulate {

class SimulatedGpu final : public gpu::GpuLibrary {
 public:
  // `clocks`: the graphics clocks it supports (any order; listed descending); `power_limits`: the
  // power limits it takes (its default limit is the highest).
  SimulatedGpu(std::string name, std::vector<unsigned> clocks, gpu::PowerLimitRange power_limits = {100000, 400000});

  // The simulated time now (seconds) and how long a lock takes to take effect; without a time
  // source a lock takes effect at once.
  void set_clock_latency(std::function<double()> now, double latency);

  // What the simulator drives.
  unsigned locked_clock() const;   // the clock in effect now: the locked one, or the top one when none is
  unsigned clock_at(double time);  // the clock in effect at `time` (not before the last time asked)
  // When the next requested clock takes effect after `time`, if one is pending.
  std::optional<double> next_change_after(double time) const;
  void add_energy(double joules);
  double energy() const;
  int lock_count() const;        // lock_graphics_clock calls so far
  double power_limit_w() const;  // the power limit in force

  unsigned device_count() override { return 1; }
  std::string name(unsigned device) override;
  std::vector<unsigned> supported_memory_clocks(unsigned device) override;
  std::vector<unsigned> supported_graphics_clocks(unsigned device, unsigned memory_clock) override;
  unsigned current_graphics_clock(unsigned device) override;
  unsigned current_memory_clock(unsigned device) override;
  void lock_graphics_clock(unsigned device, unsigned min_mhz, unsigned max_mhz) override;
  void reset_graphics_clock(unsigned device) override;
  void lock_memory_clock(unsigned device, unsigned min_mhz, unsigned max_mhz) override;
  void reset_memory_clock(unsigned device) override;
  unsigned power_limit_mw(unsigned device) override;
  gpu::PowerLimitRange power_limit_range(unsigned device) override;
  void set_power_limit_mw(unsigned device, unsigned limit_mw) override;
  std::uint64_t total_energy_mj(unsigned device) override;
  unsigned power_usage_mw(unsigned device) override;

 private:
  void check_device(unsigned device) const;

  static constexpr unsigned kMemoryClock = 1215;
  std::string name_;
  std::vector<unsigned> clocks_;  // descending
  mutable std::mutex mutex_;
  unsigned locked_ = 0;  // 0: not locked
  struct Pending {
    double at = 0;  // simulated seconds
    unsigned clock = 0;
  };
  std::deque<Pending> pending_;  // requested clocks not in effect yet, in order
  std::function<double()> now_;
  double latency_ = 0;
  void settle(double time);  // applies what took effect by `time`
  gpu::PowerLimitRange power_limits_;
  unsigned power_limit_mw_ = 0;
  double energy_j_ = 0;
  int locks_ = 0;
};

}  // namespace perseus::simulate
