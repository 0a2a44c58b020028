#pragma once
// Rounds without processes: a cluster of identical pipelines simulated from a profile (each
// instruction the profile's time and energy at its clock, times a factor per pipeline and round,
// times log-normal noise), measured as the server measures a round. For testing the turnkey
// controller directly.
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "perseus/online/turnkey_controller.hpp"
#include "perseus/pipeline/makespan.hpp"
#include "perseus/profile/profile.hpp"
#include "perseus/profile/synthetic.hpp"
#include "perseus/profile/time_energy.hpp"

namespace perseus::testing {

struct SyntheticCluster {
  Profile profile;
  int stages = 4, microbatches = 6, pipelines = 2;
  double p_block = 60;
  double noise = 0;
  int iterations = 4;  // kept iterations per round
  std::uint64_t seed = 1;
  // Time and energy factor of pipeline d in round r (1: as profiled); iteration k of the round too.
  std::function<double(int d, int r, int k)> factor = [](int, int, int) { return 1.0; };
  // Time factor of an instruction at `clock` (1: as profiled): a profile that is wrong below the top.
  std::function<double(int clock)> clock_error = [](int) { return 1.0; };
  // Seconds added to every iteration of round r that no instruction shows (a slower gradient
  // synchronisation): every GPU blocks meanwhile.
  std::function<double(int r)> overhead = [](int) { return 0.0; };
  // Time and energy factor of the GPU of pipeline d, stage s for the whole run (GPUs of one cluster
  // are not equally fast).
  std::function<double(int d, int s)> speed = [](int, int) { return 1.0; };
  // Seconds a locked clock takes to apply: an instruction whose clock differs from the one before it
  // on its stage (the first: the iteration before's last) runs that long at the clock before.
  double latency = 0;

  online::JobShape shape() const {
    online::JobShape s;
    s.num_stages = stages, s.num_microbatches = microbatches, s.pipelines = pipelines;
    for (const auto& row : profile.rows)
      if (row.stage == 0 && row.kind == InstructionKind::forward) s.clocks.push_back(row.frequency);
    std::sort(s.clocks.rbegin(), s.clocks.rend());
    return s;
  }

  // One round at `clocks` (none: every instruction at the top clock).
  online::RoundMeasurement run(const online::RoundClocks& clocks, int round) {
    if (cost_.empty())
      for (const auto& row : profile.rows) cost_[{row.stage, row.kind, row.frequency}] = {row.time, row.energy};
    std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(round));
    std::lognormal_distribution<double> jitter(0.0, noise > 0 ? noise : 1e-300);
    const int top = shape().clocks.front();
    std::vector<std::vector<Instruction>> orders;
    for (int s = 0; s < stages; ++s)
      orders.push_back(stage_schedule(ScheduleKind::one_f_one_b, s, stages, microbatches));
    online::RoundMeasurement m;
    const auto D = static_cast<std::size_t>(pipelines), S = static_cast<std::size_t>(stages);
    m.pipeline_time.assign(D, 0);
    m.pipeline_energy.assign(D, 0);
    m.slot_time.assign(D, std::vector<std::vector<double>>(S));
    m.pipeline_instructions.assign(D, {});
    std::map<online::StageKind, TimeEnergy> sums;
    std::map<online::StageKind, int> counts;
    std::vector<std::vector<std::vector<double>>> busy_energy(D, std::vector<std::vector<double>>(S));
    for (int k = 0; k < iterations; ++k) {
      double iteration = 0, energy = 0, busy_time = 0;
      for (std::size_t d = 0; d < D; ++d) {
        std::vector<std::vector<double>> durations(S);
        for (std::size_t s = 0; s < S; ++s) {
          const double f = factor(static_cast<int>(d), round, k) * speed(static_cast<int>(d), static_cast<int>(s));
          auto& slots = m.slot_time[d][s];
          slots.resize(orders[s].size(), 0);
          for (std::size_t slot = 0; slot < orders[s].size(); ++slot) {
            InstructionKind kind = orders[s][slot].kind;
            int clock = clocks ? (*clocks)[d][s][slot] : top;
            auto [t, e] = cost_.at({static_cast<int>(s), kind, clock});
            const std::size_t before = slot > 0 ? slot - 1 : orders[s].size() - 1;
            const int old_clock = clocks ? (*clocks)[d][s][before] : top;
            if (latency > 0 && old_clock != clock) {
              const auto [t_old, e_old] = cost_.at({static_cast<int>(s), kind, old_clock});
              const double share = std::min(1.0, latency / t_old);  // of the work done at the clock before
              t = share * t_old + (1 - share) * t, e = share * e_old + (1 - share) * e;
            }
            double n = noise > 0 ? jitter(rng) : 1.0;
            double time = t * f * n * clock_error(clock), en = e * f * n;
            durations[s].push_back(time);
            slots[slot] += time / iterations;
            energy += en;
            busy_time += time;
            auto& sum = sums[{static_cast<int>(s), kind}];
            sum.time += time, sum.energy += en, ++counts[{static_cast<int>(s), kind}];
            auto& mine = m.pipeline_instructions[d][{static_cast<int>(s), kind}];
            mine.time += time / (iterations * microbatches), mine.energy += en / (iterations * microbatches);
            m.pipeline_energy[d] += en / iterations;
            auto& occ = m.occurrences[{static_cast<int>(s), kind}];
            occ.resize(D);
            occ[d].push_back(time);
          }
        }
        iteration = std::max(iteration, pipeline_makespan(orders, microbatches, durations));
      }
      iteration += overhead(round);
      double idle = iteration * double(S * D) - busy_time;
      energy += p_block * idle;
      for (std::size_t d = 0; d < D; ++d) m.pipeline_energy[d] += p_block * idle / double(D) / iterations;
      m.iteration_time += iteration / iterations;
      m.energy += energy / iterations;
    }
    for (const auto& [key, sum] : sums) m.instructions[key] = {sum.time / counts[key], sum.energy / counts[key]};
    for (std::size_t d = 0; d < D; ++d) m.pipeline_time[d] = pipeline_makespan(orders, microbatches, m.slot_time[d]);
    m.blocking_power = p_block;
    m.iterations = iterations;
    return m;
  }

 private:
  std::map<std::tuple<int, InstructionKind, int>, TimeEnergy> cost_;
};

// The controller tests' cluster: the synthetic GPU's 4-stage profile, 6 microbatches, blocking at its idle power.
inline SyntheticCluster small_synthetic_cluster(int pipelines = 2) {
  SyntheticGpu gpu;
  gpu.num_stages = 4;
  SyntheticCluster c;
  c.profile = parse_profile(synthetic_profile_csv(gpu), "synthetic");
  c.stages = 4;
  c.microbatches = 6;
  c.pipelines = pipelines;
  c.p_block = gpu.idle_power;
  return c;
}

// Runs `controller` against `cluster` for `rounds` rounds; every measurement, in order.
inline std::vector<online::RoundMeasurement> run_rounds(online::TurnkeyController& controller,
                                                        SyntheticCluster& cluster, int rounds) {
  std::vector<online::RoundMeasurement> out;
  for (int r = 0; r < rounds; ++r) {
    while (!controller.ready()) std::this_thread::yield();
    auto clocks = controller.next_round();
    out.push_back(cluster.run(clocks, r));
    controller.observe(out.back());
  }
  while (!controller.ready()) std::this_thread::yield();  // a choice the last round asked for, in place
  return out;
}

}  // namespace perseus::testing
