#include "perseus/profile/backward_split.hpp"

#include <fmt/format.h>

#include <map>
#include <set>

#include "perseus/util/error.hpp"

namespace perseus {

namespace {

bool has_kind(const Profile& profile, int stage, InstructionKind kind) {
  for (const auto& row : profile.rows)
    if (row.stage == stage && row.kind == kind) return true;
  return false;
}

}  // namespace

bool has_split_backward(const Profile& profile, int stage) {
  return has_kind(profile, stage, InstructionKind::backward_input) &&
         has_kind(profile, stage, InstructionKind::backward_weight);
}

Profile split_backward(const Profile& profile, double input_share) {
  if (!(input_share > 0 && input_share < 1))
    throw Error(fmt::format("the input-gradient share of a backward must be in (0, 1), got {}", input_share),
                ErrorKind::bad_setting);
  Profile out = profile;
  out.rows.clear();
  std::set<std::pair<int, int>> split;  // (stage, chunk) with split rows already
  for (const auto& row : profile.rows)
    if (row.kind == InstructionKind::backward_input || row.kind == InstructionKind::backward_weight)
      split.insert({row.stage, row.chunk});
  for (const auto& row : profile.rows) {
    if (row.kind != InstructionKind::backward || split.count({row.stage, row.chunk})) {
      out.rows.push_back(row);
      continue;
    }
    ProfileRow input = row, weight = row;
    input.kind = InstructionKind::backward_input;
    input.time = row.time * input_share;
    input.energy = row.energy * input_share;
    weight.kind = InstructionKind::backward_weight;
    weight.time = row.time - input.time;
    weight.energy = row.energy - input.energy;
    out.rows.push_back(input);
    out.rows.push_back(weight);
  }
  return out;
}

Profile with_whole_backward(const Profile& profile) {
  // (stage, chunk, clock) -> the part's row, per part
  std::map<std::tuple<int, int, int>, const ProfileRow*> inputs, weights;
  std::set<std::pair<int, int>> whole;
  for (const auto& row : profile.rows) {
    if (row.kind == InstructionKind::backward_input) inputs[{row.stage, row.chunk, row.frequency}] = &row;
    if (row.kind == InstructionKind::backward_weight) weights[{row.stage, row.chunk, row.frequency}] = &row;
    if (row.kind == InstructionKind::backward) whole.insert({row.stage, row.chunk});
  }
  Profile out = profile;
  std::set<std::pair<int, int>> added;
  for (const auto& [key, input] : inputs) {
    const auto [stage, chunk, clock] = key;
    if (whole.count({stage, chunk})) continue;
    const auto weight = weights.find(key);
    if (weight == weights.end()) continue;
    ProfileRow row = *input;
    row.kind = InstructionKind::backward;
    row.time += weight->second->time;
    row.energy += weight->second->energy;
    out.rows.push_back(row);
    added.insert({stage, chunk});
  }
  for (const auto& [key, input] : inputs) {
    const auto [stage, chunk, clock] = key;
    if (!whole.count({stage, chunk}) && !added.count({stage, chunk}))
      throw InputError(profile.source, input->line, "frequency",
                       fmt::format("stage {} has backward_input and backward_weight rows at no common clock; a "
                                   "whole backward runs both parts at one clock",
                                   stage));
  }
  return out;
}

}  // namespace perseus
