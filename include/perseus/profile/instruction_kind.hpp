#pragma once
// The two computations a pipeline stage runs per microbatch.
#include <optional>
#include <string_view>

namespace perseus {

enum class InstructionKind { forward, backward };

constexpr std::string_view to_string(InstructionKind kind) {
  return kind == InstructionKind::forward ? "forward" : "backward";
}

inline std::optional<InstructionKind> parse_instruction_kind(std::string_view text) {
  if (text == "forward") return InstructionKind::forward;
  if (text == "backward") return InstructionKind::backward;
  return std::nullopt;
}

}  // namespace perseus
