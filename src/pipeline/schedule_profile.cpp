#include "perseus/pipeline/schedule_profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>

#include "perseus/profile/backward_split.hpp"
#include "perseus/util/error.hpp"

namespace perseus {

namespace {

std::map<int, const ProfileRow*> by_clock(const Profile& profile, int stage, InstructionKind kind) {
  std::map<int, const ProfileRow*> rows;
  for (const auto& row : profile.rows)
    if (row.stage == stage && row.kind == kind) rows[row.frequency] = &row;
  return rows;
}

// forward_backward rows of model stage k from its forward and its partner's whole backward.
void add_pair_rows(Profile& profile, int k, int partner) {
  if (!by_clock(profile, k, InstructionKind::forward_backward).empty()) return;
  const auto forwards = by_clock(profile, k, InstructionKind::forward);
  const auto backwards = by_clock(profile, partner, InstructionKind::backward);
  std::vector<ProfileRow> rows;
  for (const auto& [clock, forward] : forwards) {
    const auto backward = backwards.find(clock);
    if (backward == backwards.end()) continue;
    ProfileRow row = *forward;
    row.kind = InstructionKind::forward_backward;
    row.time += backward->second->time;
    row.energy += backward->second->energy;
    rows.push_back(row);
  }
  if (rows.empty())
    throw InputError(profile.source, forwards.begin()->second->line, "frequency",
                     fmt::format("stage {}'s forward and stage {}'s backward share no clock, so their overlapped pair "
                                 "has no row; add forward_backward rows for stage {}",
                                 k, partner, k));
  profile.rows.insert(profile.rows.end(), rows.begin(), rows.end());
}

// A profile of another number of model stages than the pipeline runs: said in the pipeline's terms
// (the stage counts, and the model stages per pipeline stage a schedule with chunks runs), not as
// the first stage without rows.
void check_model_stage_count(const Profile& profile, ScheduleKind kind, int num_stages, int num_model_stages) {
  int profiled = 0;
  for (const auto& row : profile.rows) profiled = std::max(profiled, row.stage + 1);
  if (profiled == num_model_stages || profile.rows.empty()) return;
  const int per_stage = num_stages > 0 ? num_model_stages / num_stages : 1;
  std::string needs =
      per_stage == 1
          ? fmt::format("a pipeline of {} stages needs {}", num_stages, num_model_stages)
          : fmt::format("the {} schedule runs {} model stages on every pipeline stage{}, so {} stages need {}",
                        to_string(kind), per_stage, per_stage == 2 && !takes_virtual_stages(kind) ? " (a V)" : "",
                        num_stages, num_model_stages);
  std::string fits =
      profiled % per_stage == 0
          ? fmt::format("; this profile fits {} pipeline stages", profiled / per_stage)
          : fmt::format("; this profile fits no {} pipeline (not a multiple of {})", to_string(kind), per_stage);
  throw InputError(
      profile.source, 0, "stage",
      fmt::format("the profile has {} model stages (0..{}), but {}{}", profiled, profiled - 1, needs, fits));
}

}  // namespace

Profile profile_for_schedule(const Profile& model_profile, ScheduleKind kind, int num_stages, int num_model_stages) {
  check_model_stage_count(model_profile, kind, num_stages, num_model_stages);
  check_profile_covers(model_profile, num_model_stages);
  if (splits_backward(kind)) {
    for (int k = 0; k < num_model_stages; ++k)
      if (!has_split_backward(model_profile, k))
        throw InputError(model_profile.source, 0, "instruction",
                         fmt::format("the {} schedule splits every backward into backward_input and backward_weight, "
                                     "but stage {} has only whole backward rows; profile the two parts, or split the "
                                     "backwards (synth-profile with split_backward 0.5)",
                                     to_string(kind), k),
                         {"split_backward"});
  }
  Profile profile = with_whole_backward(model_profile);
  if (overlaps_pairs(kind))
    for (int k = 0; k < num_model_stages; ++k) add_pair_rows(profile, k, 2 * num_stages - 1 - k);
  return profile;
}

}  // namespace perseus
