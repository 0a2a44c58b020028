#pragma once
// The rules both request decoders share (nlohmann bodies in models.cpp, simdjson results in
// result_parser.cpp), so that they name a bad field the same way and accept the same integers.
#include <optional>
#include <string>

namespace perseus::protocol {

// Throws RequestError(invalid_request, "field '<field>': <problem>").
[[noreturn]] void bad_field(const std::string& field, const std::string& problem);

// A JSON integer as an int; out of int range is a bad field.
int int_from_integer(long long value, const std::string& field);

// Integral floats such as 4.0 are what a Python client may send for an integer: those, nothing else.
std::optional<int> int_from_float(double value);

}  // namespace perseus::protocol
