#pragma once
// Zeus's GlobalPowerLimitOptimizer (docs/design.md#zeus-compatibility): one power limit for
// every GPU of the monitor, found by just-in-time profiling during training. Power limits go from
// the GPUs' maximum down in pl_step watts, never below their minimum; each is warmed up for
// warmup_steps steps and measured for profile_steps; an epoch end in between starts that limit
// over. The selector then picks the limit kept for the rest of training; the maximum is restored
// when the optimizer goes away. A GPU that refuses limits never stops training: the optimizer
// warns once and does nothing more (unless fail_open is off).
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "perseus/zeus/energy_monitor.hpp"

namespace perseus::zeus {

struct PowerLimitMeasurement {
  int power_limit = 0;  // watts
  double energy = 0;    // joules over the profiling steps, all GPUs (and data-parallel ranks)
  double time = 0;      // seconds over the profiling steps
  bool operator==(const PowerLimitMeasurement&) const = default;
};

class OptimumSelector {
 public:
  virtual ~OptimumSelector() = default;
  // The chosen limit (W); measurements is never empty.
  virtual int select(const std::vector<PowerLimitMeasurement>& measurements) const = 0;
};

class EnergySelector final : public OptimumSelector {  // Zeus's Energy: least energy
 public:
  int select(const std::vector<PowerLimitMeasurement>& measurements) const override;
};

class TimeSelector final : public OptimumSelector {  // Zeus's Time: least time
 public:
  int select(const std::vector<PowerLimitMeasurement>& measurements) const override;
};

// Zeus's ZeusCost: least eta*E + (1-eta)*MaxPower*T, MaxPower = the highest limit x world_size.
class ZeusCostSelector final : public OptimumSelector {
 public:
  explicit ZeusCostSelector(double eta_knob, int world_size = 1);  // throws std::invalid_argument
  int select(const std::vector<PowerLimitMeasurement>& measurements) const override;
  double eta_knob() const { return eta_; }
  int world_size() const { return world_size_; }

 private:
  double eta_;
  int world_size_;
};

// Zeus's MaxSlowdownConstraint: the lowest limit whose time is within factor x the highest limit's.
class MaxSlowdownConstraintSelector final : public OptimumSelector {
 public:
  explicit MaxSlowdownConstraintSelector(double factor);  // throws std::invalid_argument below 1
  int select(const std::vector<PowerLimitMeasurement>& measurements) const override;
  double factor() const { return factor_; }

 private:
  double factor_;
};

struct PowerLimitOptimizerOptions {
  std::shared_ptr<const OptimumSelector> selector;  // default: ZeusCost(0.5, number of GPUs)
  int wait_steps = 1;       // steps passed by before anything happens
  int warmup_steps = 10;    // per power limit
  int profile_steps = 40;   // per power limit
  int pl_step = 25;         // watts between the limits explored
  std::string profile_path;  // existing: load it and skip profiling; else profile and save it there
  // Combines one rank's measurement with the other data-parallel ranks' (energy summed, time the
  // longest), e.g. an all-reduce; called on every rank at the same step.
  std::function<void(double& energy, double& time)> combine;
  bool fail_open = true;  // a GPU refusing limits: warn and do nothing, instead of throwing
};

enum class PowerLimitState { ready, warmup, profiling, done };
const char* to_string(PowerLimitState state);

class GlobalPowerLimitOptimizer {
 public:
  // Throws std::invalid_argument for bad options, perseus::Error for an unreadable profile.
  GlobalPowerLimitOptimizer(EnergyMonitor& monitor, PowerLimitOptimizerOptions options = {});
  ~GlobalPowerLimitOptimizer();  // restores the highest limit
  GlobalPowerLimitOptimizer(const GlobalPowerLimitOptimizer&) = delete;
  GlobalPowerLimitOptimizer& operator=(const GlobalPowerLimitOptimizer&) = delete;

  void on_step_begin();
  void on_step_end() {}
  void on_epoch_end();
  // Restores the highest limit and stops (the destructor does it too); later hooks do nothing.
  void close();

  PowerLimitState state() const { return state_; }
  int current_power_limit() const { return current_w_; }  // watts; 0 before the first is set
  std::optional<int> optimal_power_limit() const { return optimal_w_; }
  const std::vector<int>& power_limits() const { return limits_w_; }  // watts, descending
  const std::vector<PowerLimitMeasurement>& measurements() const { return measurements_; }
  bool enabled() const { return enabled_; }

 private:
  void set_limit(int watts);
  void finish_profiling();
  std::string window_name() const;

  EnergyMonitor& monitor_;
  PowerLimitOptimizerOptions options_;
  std::vector<int> limits_w_;
  std::vector<PowerLimitMeasurement> measurements_;
  PowerLimitState state_ = PowerLimitState::ready;
  std::size_t next_ = 0;  // index into limits_w_ of the limit being (or next to be) profiled
  int steps_left_ = 0, waited_ = 0, current_w_ = 0;
  std::optional<int> optimal_w_;
  bool enabled_ = true;
};

// Zeus's profile file: {"measurements": [{"power_limit", "energy", "time"}, ...]}.
std::vector<PowerLimitMeasurement> read_power_limit_profile(const std::string& path);
void write_power_limit_profile(const std::string& path, const std::vector<PowerLimitMeasurement>& measurements);

}  // namespace perseus::zeus
