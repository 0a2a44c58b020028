#include "perseus/baselines/envpipe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "perseus/baselines/all_max.hpp"
#include "perseus/util/error.hpp"

namespace perseus {

namespace {

// Index (into the fastest-first clock list) of the clock with the least energy per instruction;
// ties go to the faster clock.
std::size_t energy_optimal_index(const Emulator& emulator, int stage, InstructionKind kind) {
  const auto& clocks = emulator.clocks(stage, kind);
  std::size_t best = 0;
  for (std::size_t i = 1; i < clocks.size(); ++i) {
    if (emulator.cost(stage, kind, clocks[i])->energy < emulator.cost(stage, kind, clocks[best])->energy) best = i;
  }
  return best;
}

}  // namespace

std::vector<std::vector<bool>> envpipe_envelope(const Emulator& emulator) {
  const auto& layout = emulator.layout();
  const int S = emulator.config().num_stages;
  const int M = emulator.config().num_microbatches;
  std::vector<std::vector<bool>> envelope;
  for (int s = 0; s < S; ++s) {
    std::vector<bool> row;
    for (const auto& inst : layout[s]) {
      row.push_back(s == S - 1 || (inst.kind == InstructionKind::forward && inst.microbatch == 0) ||
                    (inst.kind == InstructionKind::backward && inst.microbatch == M - 1));
    }
    envelope.push_back(std::move(row));
  }
  return envelope;
}

EnvPipeResult envpipe_plan(const Emulator& emulator, EnvPipePolicy policy) {
  const auto& layout = emulator.layout();
  const auto envelope = envpipe_envelope(emulator);
  const int S = emulator.config().num_stages;
  // Clock of each unit as an index into its fastest-first clock list (0 = top clock).
  std::vector<std::vector<std::size_t>> level(S);
  for (int s = 0; s < S; ++s) {
    for (std::size_t k = 0; k < layout[s].size(); ++k) {
      level[s].push_back(envelope[s][k] ? 0 : energy_optimal_index(emulator, s, layout[s][k].kind));
    }
  }
  auto frequencies_of = [&] {
    std::vector<std::vector<int>> f(S);
    for (int s = 0; s < S; ++s) {
      for (std::size_t k = 0; k < layout[s].size(); ++k) {
        f[s].push_back(emulator.clocks(s, layout[s][k].kind)[level[s][k]]);
      }
    }
    return f;
  };

  EnvPipeResult result;
  for (;;) {
    const auto run = emulator.run(frequencies_of());
    // Off-envelope units on the critical path that can still be raised, latest start first.
    struct Unit {
      int stage;
      std::size_t slot;
      double start;
      int clock;
    };
    std::vector<Unit> raisable;
    bool off_envelope = false;
    for (int s = 0; s < S; ++s) {
      for (std::size_t k = 0; k < layout[s].size(); ++k) {
        const auto& unit = run.instructions[s][k];
        if (!unit.critical || envelope[s][k]) continue;
        off_envelope = true;
        if (level[s][k] > 0) raisable.push_back({s, k, unit.start, unit.frequency});
      }
    }
    if (!off_envelope) {
      result.stop_reason = "the critical path lies on the envelope";
      break;
    }
    if (raisable.empty()) {
      result.guard = true;
      result.stop_reason =
          "guard: every off-envelope unit on the critical path is at its top clock (a non-last stage is the "
          "heaviest), so EnvPipe cannot reach its envelope";
      break;
    }
    if (policy == EnvPipePolicy::greedy) {
      const auto latest = std::max_element(raisable.begin(), raisable.end(),
                                           [](const Unit& a, const Unit& b) { return a.start < b.start; });
      --level[latest->stage][latest->slot];
    } else {
      int lowest = std::numeric_limits<int>::max();
      for (const auto& u : raisable) lowest = std::min(lowest, u.clock);
      for (const auto& u : raisable) {
        if (u.clock == lowest) --level[u.stage][u.slot];
      }
    }
    ++result.steps;
  }
  result.plan = emulated_plan(emulator, frequencies_of());
  return result;
}

std::vector<int> envpipe_extra_forwards(const Profile& profile, int num_stages, int num_microbatches,
                                        int memory_cap) {
  EmulatorConfig config;
  config.num_stages = num_stages;
  config.num_microbatches = num_microbatches;
  const Emulator plain(profile, config);
  std::vector<int> extra(num_stages, 0);
  for (int s = 0; s + 1 < num_stages; ++s) {
    const auto& backward_clocks = plain.clocks(s, InstructionKind::backward);
    const double backward_max = plain.cost(s, InstructionKind::backward, backward_clocks.front())->time;
    const auto& forward_clocks = plain.clocks(s, InstructionKind::forward);
    const double forward_opt =
        plain.cost(s, InstructionKind::forward, forward_clocks[energy_optimal_index(plain, s, InstructionKind::forward)])
            ->time;
    double r = forward_opt > 0 ? std::floor(backward_max * (num_stages - s - 1) / forward_opt) : 0.0;
    r = std::min(r, static_cast<double>(std::max(0, num_microbatches - (num_stages - s))));
    if (memory_cap >= 0) r = std::min(r, static_cast<double>(memory_cap));
    if (s > 0) r = std::min(r, static_cast<double>(extra[s - 1]));
    extra[s] = static_cast<int>(r);
  }
  return extra;
}

}  // namespace perseus
