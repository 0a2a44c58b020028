#pragma once
// The computations a pipeline stage runs per microbatch: a forward, a backward, or a backward split
// into its input-gradient part (on the path between stages) and its weight-gradient part (local,
// movable), as zero-bubble schedules run them; plus the overlapped forward/backward pair of
// DualPipe-style schedules (one launch, one clock).
#include <optional>
#include <string_view>

namespace perseus {

enum class InstructionKind { forward, backward, backward_input, backward_weight, forward_backward };

inline constexpr int kNumInstructionKinds = 5;
inline constexpr InstructionKind kAllInstructionKinds[] = {
    InstructionKind::forward, InstructionKind::backward, InstructionKind::backward_input,
    InstructionKind::backward_weight, InstructionKind::forward_backward};

constexpr std::string_view to_string(InstructionKind kind) {
  switch (kind) {
    case InstructionKind::forward:
      return "forward";
    case InstructionKind::backward:
      return "backward";
    case InstructionKind::backward_input:
      return "backward_input";
    case InstructionKind::backward_weight:
      return "backward_weight";
    case InstructionKind::forward_backward:
      return "forward_backward";
  }
  return "forward";
}

// Any kind that computes gradients (everything but a plain forward).
constexpr bool is_backward_part(InstructionKind kind) { return kind != InstructionKind::forward; }

// Dense index of a (stage, kind) pair: kNumInstructionKinds * stage + the kind's position.
// Tables kept per (stage, kind) by the planner and the emulator are laid out this way.
constexpr int operation_index(int stage, InstructionKind kind) {
  return kNumInstructionKinds * stage + static_cast<int>(kind);
}

inline std::optional<InstructionKind> parse_instruction_kind(std::string_view text) {
  for (auto kind : kAllInstructionKinds)
    if (text == to_string(kind)) return kind;
  return std::nullopt;
}

}  // namespace perseus
