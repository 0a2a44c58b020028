#pragma once
// The two computations a pipeline stage runs per microbatch.
#include <optional>
#include <string_view>

namespace perseus {

enum class InstructionKind { forward, backward };

constexpr std::string_view to_string(InstructionKind kind) {
  return kind == InstructionKind::forward ? "forward" : "backward";
}

// Dense index of a (stage, kind) pair: 2*stage for the forward, 2*stage + 1 for the backward.
// Tables kept per (stage, kind) by the planner and the emulator are laid out this way.
constexpr int operation_index(int stage, InstructionKind kind) {
  return 2 * stage + (kind == InstructionKind::backward ? 1 : 0);
}

inline std::optional<InstructionKind> parse_instruction_kind(std::string_view text) {
  if (text == "forward") return InstructionKind::forward;
  if (text == "backward") return InstructionKind::backward;
  return std::nullopt;
}

}  // namespace perseus
