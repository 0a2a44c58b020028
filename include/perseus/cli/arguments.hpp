#pragma once
// How the `perseus` command checks its arguments and reports what is wrong with them. Every
// subcommand checks values with these validators, and main() reports any parse failure with
// report_parse_error, so that each mistake reads the same way: the flag, what it must be, what was
// given, and for a misspelt command, flag or value the nearest right one.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

namespace perseus::cli {

// The validators' messages say "{kind}" where report_parse_error puts the option's kind of value
// ("integer" or "number", from the option's type), e.g. "must be a positive integer, got 'four'",
// and "{a kind}" where it goes with its article ("an integer").
inline constexpr const char* kKindPlaceholder = "{kind}";
inline constexpr const char* kAKindPlaceholder = "{a kind}";

CLI::Validator positive();
CLI::Validator non_negative();
// From `low` to `high`, both included.
CLI::Validator between_text(const std::string& low, const std::string& high, double low_value, double high_value);
template <class T>
std::string bound_text(T bound) {
  if constexpr (std::is_floating_point_v<T>) {
    if (bound == std::floor(bound) && std::fabs(bound) < 1e15) return fmt::format("{:.0f}", bound);  // 1e9: 1000000000
  }
  return fmt::format("{}", bound);
}
template <class T>
CLI::Validator between(T low, T high) {
  return between_text(bound_text(low), bound_text(high), static_cast<double>(low), static_cast<double>(high));
}
// One of `names`; a misspelt name gets the nearest as a suggestion.
CLI::Validator one_of(std::vector<std::string> names);
CLI::Validator existing_file();

// The name among `candidates` nearest to `given` (edit distance), if it is near enough to be the
// one meant; empty otherwise.
std::string nearest(const std::string& given, const std::vector<std::string>& candidates);

// Prints help or the version (exit 0), or every problem of the command line at once on stderr:
// unknown commands and options with the nearest known one, the value that failed its check, and
// all missing required arguments (exit kExitUsage).
int report_parse_error(CLI::App& app, const CLI::ParseError& error);

}  // namespace perseus::cli
