#pragma once
// The one table from the library's settings to the command line's flags: the library's messages
// name a setting ("use a larger unit_time"), and the command line says the flag its user typed
// ("use a larger --unit-time").
#include <string>
#include <string_view>

#include "perseus/util/error.hpp"

namespace perseus::cli {

// The flag that gives `setting`, or "" for a setting no flag gives.
std::string_view flag_of(std::string_view setting);

// The error's message with each setting it names (Error::settings, written as a whole word) said
// as its flag; a setting without a flag keeps its name.
std::string message_with_flags(const Error& error);

}  // namespace perseus::cli
