#pragma once
// Errors that reach the user. Each carries the kind of failure it is, in the library's terms;
// the command line maps each kind to its exit code in one place (cli/exit_codes.hpp), so that
// scripts can tell bad input from a failed run.
#include <stdexcept>
#include <string>

namespace perseus {

enum class ErrorKind {
  failed,        // the computation could not be carried out (e.g. no cost model fits)
  bad_setting,   // a setting (an option, an argument) is out of range, unknown or inconsistent
  bad_input,     // an input file is malformed or inconsistent
  not_found,     // an input file is missing or unreadable
  cannot_write,  // an output could not be written
};

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, ErrorKind kind = ErrorKind::failed) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Malformed input: names the file, the line (1-based; 0 when not line-specific) and the field.
class InputError : public Error {
 public:
  InputError(const std::string& file, std::size_t line, const std::string& field, const std::string& problem);
};

}  // namespace perseus
