#pragma once
// Pieces of Prometheus' text exposition format (0.0.4) that the server's and gpud's metrics share.
#include <string>
#include <string_view>

namespace perseus {

// A label value as the format writes it between double quotes: backslash, double quote and
// newline escaped, everything else as it is.
std::string prometheus_label_value(std::string_view value);

}  // namespace perseus
