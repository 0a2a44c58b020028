#pragma once
// What a job's power states mean to its clients: GPU clock frequencies (MHz) or power limits (W).
// On the wire (GET /info's "mode", `perseus serve --mode`, PERSEUS_MODE) they are the artifact's
// texts "frequency" and "power limit".
#include <optional>
#include <string_view>

namespace perseus::protocol {

enum class PowerMode { frequency, power_limit };

std::string_view to_string(PowerMode mode);
// nullopt for any text but "frequency" and "power limit".
std::optional<PowerMode> parse_power_mode(std::string_view text);

}  // namespace perseus::protocol
