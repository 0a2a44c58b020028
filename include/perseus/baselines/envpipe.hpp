#pragma once
// EnvPipe (ATC'23) as docs/design.md#baselines-and-the-emulator describes it, planning from a stage profile.
// The outer envelope (every unit of the last stage, and each stage's first forward and last
// backward) runs at the top clock; every other unit starts at its (stage, kind)'s energy-optimal
// clock (least energy per instruction). Then, while the critical path leaves the envelope, the
// path's off-envelope units are sped up one clock step at a time. EnvPipe never lengthens the
// iteration on purpose and cannot use straggler slack.
#include <string>
#include <vector>

#include "perseus/emulate/emulator.hpp"
#include "perseus/plan/frontier_record.hpp"

namespace perseus {

enum class EnvPipePolicy {
  balanced,  // raise every off-envelope path unit at the path's lowest clock by one step
  greedy,    // raise only the latest off-envelope path unit that is not at its top clock
};

struct EnvPipeResult {
  Plan plan;           // time and energy as emulated
  int steps = 0;       // clock raises performed
  bool guard = false;  // stopped because nothing on the critical path could be raised
  std::string stop_reason;
};

// One step is the next higher clock the profile has for that (stage, kind) (15 MHz on the
// shipped A40/A100 profiles, like the Perseus authors' re-implementation).
EnvPipeResult envpipe_plan(const Emulator& emulator, EnvPipePolicy policy);

// True for the envelope units of `emulator`'s layout, per stage and slot.
std::vector<std::vector<bool>> envpipe_envelope(const Emulator& emulator);

// EnvPipe's reordered ("ours") schedule for 1F1B: R_s extra forwards ahead of stage s's first
// backward, R_s = floor(T_B,max(s) * (S - s - 1) / T_F,opt(s)), capped by `memory_cap` (extra
// forwards that fit in memory; negative = no cap) and by M - (S - s), non-increasing down the
// pipe, 0 on the last stage. T_B,max: backward time at the top clock; T_F,opt: forward time at the
// energy-optimal clock.
std::vector<int> envpipe_extra_forwards(const Profile& profile, int num_stages, int num_microbatches,
                                        int memory_cap = -1);

}  // namespace perseus
