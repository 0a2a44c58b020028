#pragma once
// The rows a schedule's instructions take their time and energy from.
#include "perseus/pipeline/schedule.hpp"
#include "perseus/profile/profile.hpp"

namespace perseus {

// From a profile keyed by model stage (by_model_stage), the one the schedule's instructions read:
// - every stage needs forward rows and either backward rows or backward_input/backward_weight rows;
// - a schedule that splits the backward (zb-h1, zbv, dualpipev) needs the split rows; it throws
//   InputError saying how to get them otherwise;
// - where the profile has only split rows, `backward` rows are added: the two parts back to back at
//   one clock, their times and energies summed (with_whole_backward) — how schedules that do not
//   split run them, and DualPipeV's whole backwards;
// - a schedule with overlapped pairs gets forward_backward rows for model stage k (the pair whose
//   forward runs on k, its backward on the other chunk of that stage, 2S - 1 - k) as the sum of the
//   two parts at each clock both have, unless the profile has forward_backward rows for k.
// Throws InputError naming the source.
Profile profile_for_schedule(const Profile& model_profile, ScheduleKind kind, int num_stages, int num_model_stages);

}  // namespace perseus
