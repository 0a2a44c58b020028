#include "perseus/protocol/power_mode.hpp"

namespace perseus::protocol {

std::string_view to_string(PowerMode mode) { return mode == PowerMode::power_limit ? "power limit" : "frequency"; }

std::optional<PowerMode> parse_power_mode(std::string_view text) {
  if (text == "frequency") return PowerMode::frequency;
  if (text == "power limit") return PowerMode::power_limit;
  return std::nullopt;
}

}  // namespace perseus::protocol
