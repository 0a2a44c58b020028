#pragma once
// The command line's exit codes (BSD sysexits where one fits), and the one place that says which
// kind of library error ends a command with which.
#include "perseus/util/error.hpp"

namespace perseus::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,       // the computation could not be carried out (e.g. no cost model fits)
  kExitUsage = 64,        // bad command line
  kExitDataError = 65,    // an input file is malformed or inconsistent
  kExitNoInput = 66,      // an input file is missing or unreadable
  kExitCantCreate = 73,   // an output could not be written
  kExitInterrupted = 130  // stopped by SIGINT/SIGTERM after writing a valid partial result
};

constexpr ExitCode exit_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::failed:
      return kExitFailure;
    case ErrorKind::bad_setting:
      return kExitUsage;
    case ErrorKind::bad_input:
      return kExitDataError;
    case ErrorKind::not_found:
      return kExitNoInput;
    case ErrorKind::cannot_write:
      return kExitCantCreate;
  }
  return kExitFailure;
}

}  // namespace perseus::cli
