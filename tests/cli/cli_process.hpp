#pragma once
// The `perseus` executable as a user runs it: one command line through the shell, its exit code
// and what it printed.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "perseus/util/atomic_file.hpp"

namespace perseus::testing {

struct CliResult {
  int code;
  std::string output;  // stdout and stderr together
};

// `env`: NAME=value assignments for the command.
inline CliResult run_cli(const std::string& args, const std::string& env = "") {
  namespace fs = std::filesystem;
  const fs::path log = fs::temp_directory_path() / ("perseus_cli_" + std::to_string(::getpid()) + ".log");
  const std::string command = env + " " + std::string(PERSEUS_BINARY) + " " + args + " > " + log.string() + " 2>&1";
  const int status = std::system(command.c_str());
  CliResult result{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(log)};
  fs::remove(log);
  return result;
}

}  // namespace perseus::testing
