#include "perseus/pipeline/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "perseus/util/error.hpp"
#include "schedules/schedules.hpp"

namespace perseus {

namespace {

// The registry: a schedule is its order function (one file under schedules/) and a line here.
struct ScheduleEntry {
  ScheduleKind kind;
  const char* name;
  std::vector<Instruction> (*order)(int stage, const ScheduleShape& shape, int extra_forwards);
  bool split_backward = false;               // runs backward_input / backward_weight
  bool pairs = false;                        // runs forward_backward pairs
  bool v_shape = false;                      // two chunks per stage in a V
  int min_microbatches_per_model_stage = 0;  // M >= this * S * V
  // Runs the model chunks per stage it is given (>= 2, microbatches a multiple of the stages, as
  // Megatron-LM requires); without v_shape or this, one chunk.
  bool takes_chunks = false;
};

constexpr ScheduleEntry kSchedules[] = {
    {ScheduleKind::one_f_one_b, "1f1b", &schedules::one_f_one_b},
    {ScheduleKind::gpipe, "gpipe", &schedules::gpipe},
    {ScheduleKind::interleaved, "interleaved", &schedules::interleaved, false, false, false, 0, true},
    {ScheduleKind::zb_h1, "zb-h1", &schedules::zb_h1, true},
    {ScheduleKind::zbv, "zbv", &schedules::zbv, true, false, true},
    {ScheduleKind::dualpipev, "dualpipev", &schedules::dualpipev, true, true, true, 1},
};

const ScheduleEntry& entry(ScheduleKind kind) {
  for (const auto& e : kSchedules)
    if (e.kind == kind) return e;
  throw Error("unknown schedule");
}

}  // namespace

std::string to_string(ScheduleKind kind) { return entry(kind).name; }

std::optional<ScheduleKind> parse_schedule_kind(std::string_view text) {
  for (const auto& e : kSchedules)
    if (text == e.name) return e.kind;
  return std::nullopt;
}

bool splits_backward(ScheduleKind kind) { return entry(kind).split_backward; }
bool overlaps_pairs(ScheduleKind kind) { return entry(kind).pairs; }

int schedule_virtual_stages(ScheduleKind kind, int requested) { return entry(kind).v_shape ? 2 : requested; }
bool takes_virtual_stages(ScheduleKind kind) { return entry(kind).takes_chunks; }

std::string short_name(const Instruction& inst, int virtual_stages) {
  auto chunk = [&](int c) { return virtual_stages > 1 || inst.v_placement ? fmt::format("c{}", c) : std::string(); };
  static constexpr char kLetter[] = {'F', 'B', 'I', 'W', 'F'};
  if (inst.kind == InstructionKind::forward_backward)
    return fmt::format("F{}{}+B{}{}", inst.microbatch, chunk(inst.chunk), inst.pair_microbatch, chunk(inst.pair_chunk));
  return fmt::format("{}{}{}", kLetter[static_cast<int>(inst.kind)], inst.microbatch, chunk(inst.chunk));
}

std::string schedule_names() {
  std::string names;
  for (const auto& e : kSchedules) names += (names.empty() ? "" : ", ") + std::string(e.name);
  return names;
}

std::vector<ScheduleKind> all_schedule_kinds() {
  std::vector<ScheduleKind> kinds;
  for (const auto& e : kSchedules) kinds.push_back(e.kind);
  return kinds;
}

void check_schedule_shape(ScheduleKind kind, int num_stages, int num_microbatches, int virtual_stages) {
  if (num_stages < 1 || num_microbatches < 1)
    throw Error("a schedule needs stages >= 1 and microbatches >= 1", ErrorKind::bad_setting);
  const ScheduleEntry& e = entry(kind);
  if (e.v_shape) {
    if (virtual_stages != 1 && virtual_stages != 2)
      throw SettingError("virtual_stages",
                         fmt::format("the {} schedule runs two model chunks per stage in a V; virtual_stages must be 2 "
                                     "(or left out), got {}",
                                     e.name, virtual_stages));
    if (num_microbatches < e.min_microbatches_per_model_stage * 2 * num_stages)
      throw Error(fmt::format("the {} schedule needs at least as many microbatches as model stages (2 x {} stages = "
                              "{}), as PyTorch's ScheduleDualPipeV requires; got {}",
                              e.name, num_stages, 2 * num_stages, num_microbatches),
                  ErrorKind::bad_setting);
    return;
  }
  if (!e.takes_chunks) {
    if (virtual_stages != 1) {
      std::string taking;
      for (const auto& other : kSchedules)
        if (other.takes_chunks) taking += (taking.empty() ? "" : " or ") + std::string(other.name);
      throw SettingError({"virtual_stages", "schedule"},
                         fmt::format("virtual_stages {} needs schedule {} ({} runs one model chunk per stage)",
                                     virtual_stages, taking, e.name));
    }
    return;
  }
  if (virtual_stages < 2)
    throw SettingError("virtual_stages",
                       fmt::format("the {} schedule needs virtual_stages of at least 2 (got {}); with one model "
                                   "chunk per stage use 1f1b",
                                   e.name, virtual_stages));
  if (num_microbatches % num_stages != 0)
    throw Error(fmt::format("the {} schedule needs the microbatches to be a multiple of the stages, as "
                            "Megatron-LM requires ({} microbatches, {} stages)",
                            e.name, num_microbatches, num_stages),
                ErrorKind::bad_setting);
}

std::vector<Instruction> stage_schedule(ScheduleKind kind, int stage, int num_stages, int num_microbatches,
                                        int extra_forwards, int virtual_stages) {
  if (num_stages < 1 || num_microbatches < 1 || stage < 0 || stage >= num_stages) {
    throw Error("schedule needs stages >= 1, microbatches >= 1 and 0 <= stage < stages", ErrorKind::bad_setting);
  }
  check_schedule_shape(kind, num_stages, num_microbatches, virtual_stages);
  return entry(kind).order(stage, {num_stages, num_microbatches, schedule_virtual_stages(kind, virtual_stages)},
                           extra_forwards);
}

void check_extra_forwards(ScheduleKind kind, const std::vector<int>& extra_forwards, int num_stages,
                          int num_microbatches) {
  if (extra_forwards.empty()) return;
  if (kind != ScheduleKind::one_f_one_b) throw Error("extra forwards need the 1f1b schedule", ErrorKind::bad_setting);
  if (static_cast<int>(extra_forwards.size()) != num_stages) {
    throw Error(fmt::format("extra forwards list has {} entries for {} stages", extra_forwards.size(), num_stages),
                ErrorKind::bad_setting);
  }
  for (int s = 0; s < num_stages; ++s) {
    const int r = extra_forwards[s];
    const int cap = std::max(0, num_microbatches - (num_stages - s));
    if (r < 0 || r > cap) {
      throw Error(fmt::format("extra forwards of stage {} is {}; it must be in [0, {}]", s, r, cap),
                  ErrorKind::bad_setting);
    }
    if (s > 0 && r > extra_forwards[s - 1]) {
      throw Error(fmt::format("extra forwards must not increase down the pipe (stage {}: {} > {})", s, r,
                              extra_forwards[s - 1]),
                  ErrorKind::bad_setting);
    }
  }
  if (extra_forwards.back() != 0) throw Error("the last stage cannot run extra forwards", ErrorKind::bad_setting);
}

}  // namespace perseus
