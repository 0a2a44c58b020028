#include "perseus/baselines/envpipe.hpp"

#include <algorithm>
#include <cmath>

#include "perseus/baselines/all_max.hpp"
#include "perseus/emulate/clock_steps.hpp"

namespace perseus {

namespace {

// Index (into the fastest-first clock list) of the clock with the least energy per instruction;
// ties go to the faster clock.
std::size_t energy_optimal_index(const Emulator& emulator, int stage, InstructionKind kind) {  // model stage
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
      // The last stage, every first forward and every last backward (its input or weight part, or an
      // overlapped pair holding either).
      const bool first_forward = inst.microbatch == 0 && (inst.kind == InstructionKind::forward ||
                                                          inst.kind == InstructionKind::forward_backward);
      const int backward_microbatch = inst.kind == InstructionKind::forward_backward ? inst.pair_microbatch
                                      : is_backward_part(inst.kind)                  ? inst.microbatch
                                                                                     : -1;
      row.push_back(s == S - 1 || first_forward || backward_microbatch == M - 1);
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
  std::vector<std::vector<int>> frequencies(S);
  for (int s = 0; s < S; ++s) {
    for (std::size_t k = 0; k < layout[s].size(); ++k) {
      const auto& inst = layout[s][k];
      const auto& clocks = emulator.clocks(inst);
      frequencies[s].push_back(
          envelope[s][k] ? clocks.front() : clocks[energy_optimal_index(emulator, model_stage(inst, S), inst.kind)]);
    }
  }
  const auto off_envelope = [&](int s, std::size_t k) { return !envelope[s][k]; };

  EnvPipeResult result;
  for (;;) {
    const auto run = emulator.run(frequencies);
    bool path_leaves_envelope = false;
    for (int s = 0; s < S; ++s) {
      for (std::size_t k = 0; k < layout[s].size(); ++k) {
        path_leaves_envelope |= run.instructions[s][k].critical && off_envelope(s, k);
      }
    }
    if (!path_leaves_envelope) {
      result.stop_reason = "the critical path lies on the envelope";
      break;
    }
    const auto raisable = raisable_on_critical_path(emulator, run, off_envelope);
    if (raisable.empty()) {
      result.guard = true;
      result.stop_reason =
          "guard: every off-envelope unit on the critical path is at its top clock (a non-last stage is the "
          "heaviest), so EnvPipe cannot reach its envelope";
      break;
    }
    if (policy == EnvPipePolicy::greedy) {
      const auto latest = std::max_element(raisable.begin(), raisable.end(),
                                           [](const auto& a, const auto& b) { return a.start < b.start; });
      auto& clock = frequencies[latest->stage][latest->slot];
      clock = next_faster_clock(emulator, layout[latest->stage][latest->slot], clock);
    } else {
      raise_lowest(emulator, raisable, frequencies);
    }
    ++result.steps;
  }
  result.plan = emulated_plan(emulator, std::move(frequencies));
  return result;
}

std::vector<int> envpipe_extra_forwards(const Profile& profile, int num_stages, int num_microbatches, int memory_cap) {
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
        plain
            .cost(s, InstructionKind::forward, forward_clocks[energy_optimal_index(plain, s, InstructionKind::forward)])
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
