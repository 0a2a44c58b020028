#pragma once
// A small GPU model that generates stage profiles, so the planner can run (and be tested) where
// no measured profile exists. Per stage and instruction, at SM clock f:
//   time(f)   = t_top * (phi * f_top / f + (1 - phi))      compute-bound share phi slows with f
//   power(f)  = p_idle + p_dyn * (f / f_top) * (V(f) / V_top)^2,  V linear from v_min to v_top
//   energy(f) = power(f) * time(f)
// Stage 0 carries the embedding (+embedding_extra of its work), the last stage the LM head
// (+head_extra); a backward costs backward_ratio forwards; stage_weights, when given, multiply each
// stage's work (uneven partitions). Optional seeded multiplicative noise imitates measurement jitter.
#include <cstdint>
#include <string>
#include <vector>

namespace perseus {

struct SyntheticGpu {
  int num_stages = 4;
  double forward_time = 0.05;  // seconds, one forward of a middle stage at the top clock
  double backward_ratio = 2.0;
  double embedding_extra = 0.15;
  double head_extra = 0.35;
  double compute_share = 0.85;  // phi
  int top_clock = 1410;         // MHz
  int bottom_clock = 900;
  int clock_step = 15;
  double idle_power = 60;      // W
  double dynamic_power = 240;  // W at the top clock and voltage
  double bottom_voltage_ratio = 0.7;
  double noise = 0;  // relative standard deviation of time and energy noise
  std::uint64_t seed = 1;
  std::vector<double> stage_weights;  // per stage, a factor on its work; empty: all 1
};

// CSV text with header stage,instruction,frequency,time,energy, clocks from top to bottom.
std::string synthetic_profile_csv(const SyntheticGpu& gpu);

}  // namespace perseus
