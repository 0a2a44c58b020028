#pragma once
// `perseus gpud` as a separate process for fault tests, on the fake NVML: started on a short
// socket path of the test's own, its lines sent and answered over the Unix socket.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include <fmt/format.h>

#include "process_fixture.hpp"

namespace perseus::testing {

inline int unix_connect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends one line to gpud on a fresh connection; its reply line ("" when none).
inline std::string gpud_line(const std::string& path, const std::string& line) {
  int fd = unix_connect(path);
  if (fd < 0) return "";
  timeval limit{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  ::send(fd, line.data(), line.size(), MSG_NOSIGNAL);
  std::string reply;
  char c = 0;
  while (::recv(fd, &c, 1, 0) == 1 && c != '\n') reply.push_back(c);
  ::close(fd);
  return reply;
}

// The test's gpud socket: short, as a Unix socket path must be (108 bytes at most).
inline std::string socket_of(const std::filesystem::path& dir) {
  return (std::filesystem::temp_directory_path() /
          fmt::format("pgd-{}-{}.sock", ::getpid(), std::hash<std::string>{}(dir.string()) % 1000000))
      .string();
}

// The test is over: its processes were told to stop, and whatever they remove as they go may vanish meanwhile.
inline void remove_test_dir(const std::filesystem::path& dir) {
  std::error_code ignored;
  std::filesystem::remove(socket_of(dir), ignored);
  std::filesystem::remove(socket_of(dir) + ".state", ignored);
  std::filesystem::remove_all(dir, ignored);
}

// Starts `perseus gpud` on socket_of(dir) with the fake NVML (its call log in <name>.log), under
// `wrapper` (e.g. prlimit); returns its pid once it listens (or -1).
inline pid_t start_gpud(const std::filesystem::path& dir, const std::string& name, const std::string& flags = "",
                        const std::string& wrapper = "") {
  pid_t pid = spawn(dir,
                    fmt::format("{} env PERSEUS_FAKE_NVML_LOG={}/{}.log {} gpud --socket {} --nvml {} {}", wrapper,
                                dir.string(), name, PERSEUS_BINARY, socket_of(dir), PERSEUS_FAKE_NVML, flags),
                    name);
  bool up = eventually([&] { return read_if_exists(dir / (name + ".out")).find("listening on") != std::string::npos; });
  return up ? pid : -1;
}

}  // namespace perseus::testing
