#pragma once
// Pipeline schedules: the order in which each stage runs its forwards and
// backwards. Each schedule is one file under src/pipeline/schedules/ plus a line in the registry
// (src/pipeline/schedule.cpp).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perseus/profile/instruction_kind.hpp"

namespace perseus {

// One forward or backward of one microbatch on one stage (pipeline rank). `chunk` is the model
// chunk the stage runs it on: 0 unless the schedule has several chunks per stage. Interleaved
// schedules place them round-robin (stage s's chunk c is the model's virtual stage c * S + s);
// V-shape schedules (`v_placement`) hold two chunks, chunk 0 = model stage s and chunk 1 = model
// stage 2S - 1 - s. A forward_backward instruction is an overlapped pair: the forward of
// (`chunk`, `microbatch`) and the full backward of (`pair_chunk`, `pair_microbatch`).
struct Instruction {
  int stage = 0;
  InstructionKind kind = InstructionKind::forward;
  int microbatch = 0;
  int chunk = 0;
  bool v_placement = false;
  int pair_chunk = 0;
  int pair_microbatch = -1;
  bool operator==(const Instruction&) const = default;
};

// The model stage of chunk `chunk` on stage `stage`.
inline int model_stage_of(int stage, int chunk, bool v_placement, int num_stages) {
  if (v_placement && chunk == 1) return 2 * num_stages - 1 - stage;
  return chunk * num_stages + stage;
}
// The model stage (profile stage) an instruction runs: its virtual stage (for a pair, its forward's).
inline int model_stage(const Instruction& inst, int num_stages) {
  return model_stage_of(inst.stage, inst.chunk, inst.v_placement, num_stages);
}
// "F3", "B0", "I2", "W1"; with model chunks (virtual_stages > 1) "F3c1": forward of microbatch 3,
// chunk 1; a pair "F3c0+B1c1".
std::string short_name(const Instruction& inst, int virtual_stages);

enum class ScheduleKind { one_f_one_b, gpipe, interleaved, zb_h1, zbv, dualpipev };

std::string to_string(ScheduleKind kind);
std::optional<ScheduleKind> parse_schedule_kind(std::string_view text);
std::string schedule_names();                    // "1f1b, gpipe, interleaved, ...", for help and errors
std::vector<ScheduleKind> all_schedule_kinds();  // the registry's, in its order

// Whether the schedule runs backwards split into backward_input and backward_weight (it then needs
// a profile with split backward rows).
bool splits_backward(ScheduleKind kind);
// Whether the schedule runs overlapped forward/backward pairs (forward_backward instructions).
bool overlaps_pairs(ScheduleKind kind);
// Model chunks per stage the schedule runs: 2 for the V-shape schedules whatever `requested` (1 or
// 2), `requested` for the others.
int schedule_virtual_stages(ScheduleKind kind, int requested);
// Whether the schedule runs as many model chunks per stage as it is given (`--virtual-stages`, at
// least 2: interleaved); the others run a number of their own (1, or 2 in a V).
bool takes_virtual_stages(ScheduleKind kind);

// What a schedule's order depends on.
struct ScheduleShape {
  int num_stages = 1;
  int num_microbatches = 1;
  int virtual_stages = 1;  // model chunks per stage (see takes_virtual_stages)
};

// Instructions of one stage in execution order.
// 1f1b: DeepSpeed's synchronous TrainSchedule (stage s runs S - s warm-up forwards, then
// alternates backward and forward; Megatron-LM's non-interleaved 1F1B is the same order);
// gpipe: all forwards, then all backwards; interleaved: Megatron-LM's interleaved 1F1B over
// V model chunks per stage; zb_h1: Zero Bubble's ZB-H1 (backwards split into input and weight
// parts, the weight parts filling the cool-down bubble); zbv: ZB-V, split backwards over two chunks
// per stage in a V; dualpipev: DeepSeek's DualPipe in a V, with overlapped forward/backward pairs.
// Each is PyTorch's order for the same schedule (src/pipeline/schedules/ says which and how).
// `extra_forwards` (1f1b only) pulls that many more forwards ahead of the stage's first
// backward: EnvPipe's reordered schedule. Zero gives DeepSpeed's order exactly.
std::vector<Instruction> stage_schedule(ScheduleKind kind, int stage, int num_stages, int num_microbatches,
                                        int extra_forwards = 0, int virtual_stages = 1);

// Checks the shape for the schedule: stages and microbatches >= 1; interleaved needs
// virtual_stages >= 2 and microbatches a multiple of the stages (as Megatron-LM requires); zbv and
// dualpipev take virtual_stages 1 or 2 (they always run 2) and dualpipev needs microbatches >= 2S
// (as PyTorch's ScheduleDualPipeV requires); the others virtual_stages == 1. Throws Error
// (ErrorKind::bad_setting) saying which.
void check_schedule_shape(ScheduleKind kind, int num_stages, int num_microbatches, int virtual_stages);

// Checks a per-stage extra-forward list (empty means none): one entry per stage, each
// 0 <= R_s <= M - (S - s), non-increasing down the pipe, 0 on the last stage, 1f1b only.
// Throws Error (ErrorKind::bad_setting) naming the stage.
void check_extra_forwards(ScheduleKind kind, const std::vector<int>& extra_forwards, int num_stages,
                          int num_microbatches);

}  // namespace perseus
