#pragma once
// Errors that reach the user. Each carries the kind of failure it is, in the library's terms;
// the command line maps each kind to its exit code in one place (cli/exit_codes.hpp), so that
// scripts can tell bad input from a failed run.
#include <stdexcept>
#include <string>
#include <vector>
#include <utility>

namespace perseus {

enum class ErrorKind {
  failed,        // the computation could not be carried out (e.g. no cost model fits)
  bad_setting,   // a setting (an option, an argument) is out of range, unknown or inconsistent
  bad_input,     // an input file is malformed or inconsistent
  not_found,     // an input file is missing or unreadable
  cannot_write,  // an output could not be written
};

// The library speaks of its settings by their names (`unit_time`, `cost_model`, `schedule`), never
// of a command line's flags: an error whose message names settings lists them, and a front end
// (cli/setting_flags.hpp) says its own spelling of each instead.
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, ErrorKind kind = ErrorKind::failed, std::vector<std::string> settings = {})
      : std::runtime_error(message), kind_(kind), settings_(std::move(settings)) {}
  ErrorKind kind() const { return kind_; }
  // The settings the message names, each written in it as its name (a whole word).
  const std::vector<std::string>& settings() const { return settings_; }

 private:
  ErrorKind kind_;
  std::vector<std::string> settings_;
};

// A setting out of range, unknown or inconsistent with another; the message names each of them.
class SettingError : public Error {
 public:
  SettingError(const char* setting, const std::string& message)
      : Error(message, ErrorKind::bad_setting, {std::string(setting)}) {}
  SettingError(std::vector<std::string> settings, const std::string& message)
      : Error(message, ErrorKind::bad_setting, std::move(settings)) {}
};

// Malformed input: names the file, the line (1-based; 0 when not line-specific) and the field.
class InputError : public Error {
 public:
  InputError(const std::string& file, std::size_t line, const std::string& field, const std::string& problem,
             std::vector<std::string> settings = {});
};

}  // namespace perseus
