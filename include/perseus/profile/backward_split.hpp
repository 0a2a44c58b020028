#pragma once
// Profiles whose backwards are split into their input-gradient and weight-gradient parts
// (backward_input, backward_weight), as zero-bubble schedules run them.
#include "perseus/profile/profile.hpp"

namespace perseus {

// Whether `stage` has backward_input and backward_weight rows.
bool has_split_backward(const Profile& profile, int stage);

// Every `backward` row becomes a backward_input row with `input_share` of its time and energy and a
// backward_weight row with the rest (same clock): a stand-in for measured split rows when only whole
// backwards were profiled. Stages that already have split rows keep them. Throws Error (ErrorKind::bad_setting)
// unless 0 < input_share < 1.
Profile split_backward(const Profile& profile, double input_share);

// Adds, for every stage with split rows and no `backward` rows, `backward` rows whose time and
// energy are the sum of the two parts at each clock both have: running the parts back to back at
// one clock, as schedules without a split run them. Throws InputError when the parts share no clock.
Profile with_whole_backward(const Profile& profile);

}  // namespace perseus
