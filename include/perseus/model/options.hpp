#pragma once
// Execution options of one (stage, instruction): the Pareto-optimal clocks of the
// profile, their quantized times and effective energies.
#include <string>
#include <vector>

#include "perseus/profile/profile.hpp"

namespace perseus {

struct ExecutionOption {
  int frequency = 0;
  double real_time = 0;         // seconds
  double energy = 0;            // measured joules
  int quant_time = 0;           // floor(real_time / unit_time), Python semantics
  double effective_energy = 0;  // energy - P_block * quant_time * unit_time
};

struct OptionsConfig {
  double unit_time = 0.001;    // seconds
  double p_block = 0;          // watts drawn while blocking on communication
  double noise_factor = 0.95;  // used when the strict Pareto filter leaves 3 or fewer options
};

class OperationOptions {
 public:
  OperationOptions() = default;
  // `options` sorted by quant_time descending, quant_times unique.
  explicit OperationOptions(std::vector<ExecutionOption> options, bool used_noise_factor = false);

  const std::vector<ExecutionOption>& options() const { return options_; }
  int max_quant() const { return options_.front().quant_time; }
  int min_quant() const { return options_.back().quant_time; }
  bool used_noise_factor() const { return used_noise_factor_; }

  // The slowest option whose quant_time <= duration; the fastest if duration is below all.
  const ExecutionOption& option_for(int duration) const;
  int knob_for(int duration) const { return option_for(duration).frequency; }

 private:
  std::vector<ExecutionOption> options_;
  bool used_noise_factor_ = false;
};

// Drops options that another beats strictly in both time and energy (scaled by noise_factor
// for the candidate), keeps the largest energy per quantized time, sorts slowest first.
std::vector<ExecutionOption> pareto_options(const std::vector<ProfileRow>& rows, double unit_time, double noise_factor);

// The full §2.2 pipeline for one (stage, instruction), including the noise-factor fallback and
// the effective-energy shift. `rows` must not be empty.
OperationOptions build_options(const std::vector<ProfileRow>& rows, const OptionsConfig& config);

// The options without those that a faster option matches or beats in effective energy: a plan
// never gains by running them (slower and no cheaper). The noise-factor filter keeps such options,
// and a cost model through them rises with time, which the solver's flow bounds cannot express.
// The strict Pareto filter alone never leaves one (a slower option there costs less energy, and
// so less effective energy). The exponential reference mode plans with every option.
OperationOptions without_costlier_slower(const OperationOptions& options);

// The options with each one replaced by the fastest row of the same quantized time that costs no
// more energy, where there is one: the noise-factor filter may keep a slower and costlier row for
// a quantized time, and the planner's exact times (and its fastest plan: every instruction at its
// top clock where that is the fastest) follow the clock it keeps. On strictly Pareto options the
// row kept for a quantized time is its fastest already.
OperationOptions faster_within_quanta(const OperationOptions& options, const std::vector<ProfileRow>& rows,
                                      const OptionsConfig& config);

}  // namespace perseus
