#include "perseus/gpud/client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "perseus/gpud/protocol.hpp"

namespace perseus::gpud {
namespace {

using gpu::GpuError;
using gpu::GpuErrorKind;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

// Plain blocking POSIX I/O with poll() for the deadline: one small request and reply at a time,
// where a timeout must really end the wait (a hung daemon must not hang the training rank).
class GpudLibrary final : public gpu::GpuLibrary {
 public:
  GpudLibrary(std::string path, std::chrono::milliseconds timeout) : path_(std::move(path)), timeout_(timeout) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw GpuError(GpuErrorKind::other, fmt::format("socket: {}", std::strerror(errno)));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path_.empty() || path_.size() >= sizeof address.sun_path) {
      ::close(fd_);
      throw GpuError(GpuErrorKind::invalid_argument, fmt::format("gpud socket path '{}' is empty or too long", path_));
    }
    std::memcpy(address.sun_path, path_.c_str(), path_.size() + 1);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      int error = errno;
      ::close(fd_);
      throw GpuError(error == EACCES ? GpuErrorKind::no_permission : GpuErrorKind::library_missing,
                     fmt::format("cannot connect to perseus gpud at {}: {} ({})", path_, std::strerror(error),
                                 error == EACCES ? "this user may not use the socket: see perseus gpud --socket-group"
                                                 : "is `perseus gpud` running on this node?"));
    }
    call({{"op", "hello"}});
  }
  ~GpudLibrary() override { ::close(fd_); }

  unsigned device_count() override { return call({{"op", "device_count"}}).get<unsigned>(); }
  std::string name(unsigned d) override { return on(d, "name").get<std::string>(); }
  std::vector<unsigned> supported_memory_clocks(unsigned d) override {
    return on(d, "supported_memory_clocks").get<std::vector<unsigned>>();
  }
  std::vector<unsigned> supported_graphics_clocks(unsigned d, unsigned memory) override {
    return call({{"op", "supported_graphics_clocks"}, {"device", d}, {"memory", memory}}).get<std::vector<unsigned>>();
  }
  unsigned current_graphics_clock(unsigned d) override { return on(d, "current_graphics_clock").get<unsigned>(); }
  unsigned current_memory_clock(unsigned d) override { return on(d, "current_memory_clock").get<unsigned>(); }
  void lock_graphics_clock(unsigned d, unsigned low, unsigned high) override {
    call({{"op", "lock_graphics_clock"}, {"device", d}, {"min", low}, {"max", high}});
  }
  void reset_graphics_clock(unsigned d) override { on(d, "reset_graphics_clock"); }
  void lock_memory_clock(unsigned d, unsigned low, unsigned high) override {
    call({{"op", "lock_memory_clock"}, {"device", d}, {"min", low}, {"max", high}});
  }
  void reset_memory_clock(unsigned d) override { on(d, "reset_memory_clock"); }
  unsigned power_limit_mw(unsigned d) override { return on(d, "power_limit").get<unsigned>(); }
  gpu::PowerLimitRange power_limit_range(unsigned d) override {
    json range = on(d, "power_limit_range");
    return {range.at("min_mw").get<unsigned>(), range.at("max_mw").get<unsigned>()};
  }
  void set_power_limit_mw(unsigned d, unsigned limit) override {
    call({{"op", "set_power_limit"}, {"device", d}, {"mw", limit}});
  }
  std::uint64_t total_energy_mj(unsigned d) override { return on(d, "total_energy").get<std::uint64_t>(); }
  unsigned power_usage_mw(unsigned d) override { return on(d, "power_usage").get<unsigned>(); }

 private:
  json on(unsigned device, const char* op) { return call({{"op", op}, {"device", device}}); }

  [[noreturn]] void lost(const std::string& why) {
    broken_ = fmt::format("lost the connection to perseus gpud at {}: {}", path_, why);
    throw GpuError(GpuErrorKind::other, broken_);
  }

  // One request, one reply line. The training thread (clock reads) and the controller thread
  // (locks, energy) share the connection, so requests are serialized.
  json call(const json& request) {
    std::lock_guard lock(mutex_);
    if (!broken_.empty()) throw GpuError(GpuErrorKind::other, broken_);
    std::string line = request.dump() + "\n";
    for (std::size_t sent = 0; sent < line.size();) {
      ssize_t n = ::send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) lost(std::strerror(errno));
      sent += static_cast<std::size_t>(n);
    }
    auto deadline = SteadyClock::now() + timeout_;
    std::size_t newline;
    while ((newline = pending_.find('\n')) == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
      if (left.count() <= 0) lost(fmt::format("no answer within {} ms", timeout_.count()));
      pollfd p{fd_, POLLIN, 0};
      int ready = ::poll(&p, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) continue;  // the deadline check above ends it
      char chunk[4096];
      ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) lost("the daemon closed the connection");
      if (n < 0) lost(std::strerror(errno));
      pending_.append(chunk, static_cast<std::size_t>(n));
      if (pending_.size() > (1u << 20)) lost("an answer over 1 MiB");
    }
    json reply;
    try {
      reply = json::parse(pending_.substr(0, newline));
    } catch (const json::parse_error& e) {
      lost(fmt::format("an answer that is not JSON: {}", e.what()));
    }
    pending_.erase(0, newline + 1);
    if (reply.value("ok", false)) return reply.contains("value") ? reply["value"] : json();
    auto kind = error_kind_from_name(reply.value("kind", std::string("other")));
    throw GpuError(kind.value_or(GpuErrorKind::other), fmt::format("perseus gpud: {}", reply.value("error", reply.dump())));
  }

  std::string path_;
  std::chrono::milliseconds timeout_;
  int fd_ = -1;
  std::mutex mutex_;
  std::string pending_;
  std::string broken_;
};

}  // namespace

std::unique_ptr<gpu::GpuLibrary> connect(const std::string& socket_path, std::chrono::milliseconds timeout) {
  return std::make_unique<GpudLibrary>(socket_path, timeout);
}

std::string gpud_socket_from(const std::string& gpud_socket) {
  if (!gpud_socket.empty()) return gpud_socket;
  const char* env = std::getenv(kSocketEnv);
  return env != nullptr ? env : "";
}

std::unique_ptr<gpu::GpuLibrary> open_gpu_library(const std::string& gpud_socket, const std::string& nvml_library) {
  std::string socket = gpud_socket_from(gpud_socket);
  if (!socket.empty()) return connect(socket);
  return gpu::load_nvml(nvml_library);
}

}  // namespace perseus::gpud
