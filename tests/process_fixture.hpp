#pragma once
// `perseus serve` as a separate process, for tests that need real process boundaries (signals,
// resource limits, restarts): started through the shell in `dir`, its ready line read for the port,
// stopped with SIGTERM (or killed) when the test is done with it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "perseus/util/atomic_file.hpp"

namespace perseus::testing {

// A fresh folder for the running test: <tmp>/perseus-faults-<pid>-<suite>-<test>.
inline std::filesystem::path test_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto dir = std::filesystem::temp_directory_path() /
             fmt::format("perseus-faults-{}-{}-{}", ::getpid(), info->test_suite_name(), info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A TCP connection to 127.0.0.1:port; -1 when refused.
inline int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Lines of `text` that contain `needle`.
inline std::size_t count_lines_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

inline std::string read_if_exists(const std::filesystem::path& path) {
  return std::filesystem::exists(path) ? read_file(path) : std::string();
}

struct ServeProcess {
  // `flags`: extra `perseus serve` flags; `prefix`: shell commands run first (e.g. "ulimit -n 64;").
  ServeProcess(const std::filesystem::path& dir, const std::string& scheduler, const std::string& args,
               const std::string& flags = "", const std::string& prefix = "", int port_wanted = 0)
      : dir(dir) {
    std::filesystem::create_directories(dir);
    std::filesystem::remove(dir / "serve.out");
    std::string command = fmt::format(
        "cd '{}' && ({} exec {} serve --port {} --dump-dir dump --scheduler {} --scheduler-args '{}' {} > serve.out "
        "2>> serve.err) & echo $! > '{}/serve.pid'",
        dir.string(), prefix, PERSEUS_BINARY, port_wanted, scheduler, args, flags, dir.string());
    EXPECT_EQ(std::system(command.c_str()), 0);
    pid = std::stoi(read_file(dir / "serve.pid"));
    for (int i = 0; i < 500 && port == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::string out = std::filesystem::exists(dir / "serve.out") ? read_file(dir / "serve.out") : "";
      auto colon = out.find("127.0.0.1:");
      if (colon != std::string::npos) port = std::stoi(out.substr(colon + 10));
    }
    EXPECT_NE(port, 0) << "the server printed no ready line";
  }
  ~ServeProcess() { stop(SIGTERM); }

  // Sends `signal` and waits (up to 10 s: a process killed in the middle of a disk flush on a busy
  // machine goes only when the flush returns, and holds its port until then) for the process to go.
  void stop(int signal) {
    if (pid <= 0) return;
    ::kill(pid, signal);
    for (int i = 0; i < 1000 && alive(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    pid = -1;
  }

  // Running, not a zombie (the shell that started it is gone, so nobody here reaps it).
  static bool alive(pid_t pid) {
    std::string stat = read_if_exists(fmt::format("/proc/{}/stat", pid));
    auto paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
  }

  std::string url() const { return fmt::format("http://127.0.0.1:{}", port); }
  std::string log() const { return read_file(dir / "serve.err"); }

  std::filesystem::path dir;
  pid_t pid = -1;
  int port = 0;
};

// Starts `command` in the background through the shell, in `dir`; returns its pid (exec'd, so
// signals reach the program itself).
inline pid_t spawn(const std::filesystem::path& dir, const std::string& command, const std::string& name) {
  std::string line = fmt::format("cd '{}' && (exec {}) > {}.out 2> {}.err & echo $! > '{}/{}.pid'", dir.string(),
                                 command, name, name, dir.string(), name);
  EXPECT_EQ(std::system(line.c_str()), 0);
  return std::stoi(read_file(dir / (name + ".pid")));
}

// How many random instances a randomized fault test runs: PERSEUS_FAULT_INSTANCES when set (to run
// many more than CI does), else `fallback`.
inline int fault_instances(int fallback) {
  const char* text = std::getenv("PERSEUS_FAULT_INSTANCES");
  return text != nullptr && std::atoi(text) > 0 ? std::atoi(text) : fallback;
}

// Waits up to `limit` for `done()`; returns whether it happened.
template <typename Done>
bool eventually(Done done, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace perseus::testing
