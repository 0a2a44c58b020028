// perseus gpud's whole request -> reply path on arbitrary bytes: a real daemon on the fake NVML,
// serving a Unix socket on its own thread, gets each input's first line and must answer it with
// one JSON object line (ok true or false) and go on serving; a line over kMaxLineBytes may instead
// be answered and closed. No reply, a reply that is not JSON, a hang or a crash is a finding.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <string>
#include <thread>

#include "perseus/gpud/daemon.hpp"
#include "perseus/gpud/protocol.hpp"

namespace {

struct Daemon {
  Daemon() {
    spdlog::set_level(spdlog::level::off);
    auto dir = std::filesystem::temp_directory_path() / ("perseus-fuzz-gpud-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    path = (dir / "gpud.sock").string();
    perseus::gpud::DaemonOptions options{path, 0600, ""};
    options.idle_timeout = std::chrono::milliseconds(0);
    daemon = std::make_unique<perseus::gpud::Daemon>(io, perseus::gpu::load_nvml(PERSEUS_FAKE_NVML), options);
    thread = std::thread([this] { io.run(); });
  }

  void connect() {
    fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
      __builtin_trap();  // the daemon is gone
  }

  // Sends `line` and a newline; returns the reply line, or "" when the daemon closed the connection.
  std::string exchange(const std::string& line) {
    if (fd < 0) connect();
    std::string out = line + "\n";
    for (std::size_t sent = 0; sent < out.size();) {
      ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;  // libFuzzer's timeout alarm (SIGALRM) interrupts system calls
      if (n <= 0) __builtin_trap();           // the daemon closed a connection it should have answered
      sent += static_cast<std::size_t>(n);
    }
    std::string reply;
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      int ready = ::poll(&p, 1, 10000);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) __builtin_trap();  // no answer in 10 s: a hang
      char c = 0;
      ssize_t n = ::recv(fd, &c, 1, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        fd = -1;
        return reply.empty() ? "" : reply;
      }
      if (c == '\n') return reply;
      reply.push_back(c);
    }
  }

  boost::asio::io_context io;
  std::unique_ptr<perseus::gpud::Daemon> daemon;
  std::thread thread;
  std::string path;
  int fd = -1;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Daemon* daemon = new Daemon;  // lives as long as the process, as the real one does
  std::string input(reinterpret_cast<const char*>(data), size);
  std::string line = input.substr(0, std::min(input.find('\n'), perseus::gpud::kMaxLineBytes - 1));
  std::string reply = daemon->exchange(line);
  if (reply.empty()) __builtin_trap();  // every line gets an answer
  nlohmann::json parsed = nlohmann::json::parse(reply, nullptr, false);
  if (!parsed.is_object() || !parsed.contains("ok") || !parsed["ok"].is_boolean()) __builtin_trap();
  if (parsed["ok"] == false && (!parsed.contains("error") || !parsed["error"].is_string())) __builtin_trap();
  return 0;
}
