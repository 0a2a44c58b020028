#pragma once
// Errors that reach the user. Each carries the exit code the CLI returns for it, so that
// scripts can tell bad input from a failed run.
#include <stdexcept>
#include <string>

namespace perseus {

// Exit codes (BSD sysexits where one fits).
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,       // the computation could not be carried out (e.g. no cost model fits)
  kExitUsage = 64,        // bad command line
  kExitDataError = 65,    // an input file is malformed or inconsistent
  kExitNoInput = 66,      // an input file is missing or unreadable
  kExitCantCreate = 73,   // an output could not be written
  kExitInterrupted = 130  // stopped by SIGINT/SIGTERM after writing a valid partial result
};

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, int exit_code = kExitFailure)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Malformed input: names the file, the line (1-based; 0 when not line-specific) and the field.
class InputError : public Error {
 public:
  InputError(const std::string& file, std::size_t line, const std::string& field, const std::string& problem);
};

}  // namespace perseus
