#include "perseus/gpud/client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "perseus/gpu/backends.hpp"
#include "perseus/gpud/protocol.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus::gpud {
namespace {

using gpu::GpuError;
using gpu::GpuErrorKind;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

// The connection broke (the daemon restarted, died or hung): the request may be retried on a new one.
struct Lost {
  std::string why;
};

// What this client set on one GPU: what a new connection to a restarted daemon (which reset every
// GPU when it started) sets again, so the rank goes on where it was.
struct Settings {
  std::optional<std::pair<unsigned, unsigned>> graphics, memory;  // locked [min, max] MHz
  std::optional<unsigned> power_limit_mw;
};

// Plain blocking POSIX I/O with poll() for the deadline: one small request and reply at a time,
// where a timeout must really end the wait (a hung daemon must not hang the training rank).
// A broken connection is replaced by a new one at the next call (at once, then at most every
// kRetryInterval while the daemon does not answer), which first sets again what this client had set.
class GpudLibrary final : public gpu::GpuLibrary, public cpu::RaplSource {
 public:
  GpudLibrary(std::string path, std::chrono::milliseconds timeout) : path_(std::move(path)), timeout_(timeout) {
    if (path_.empty() || path_.size() >= sizeof(sockaddr_un::sun_path))
      throw GpuError(GpuErrorKind::invalid_argument, fmt::format("gpud socket path '{}' is empty or too long", path_));
    open_connection(timeout_);
  }
  ~GpudLibrary() override { close_connection(); }

  unsigned device_count() override { return call({{"op", "device_count"}}).get<unsigned>(); }
  std::string name(unsigned d) override { return on(d, "name").get<std::string>(); }
  std::string uuid(unsigned d) override { return on(d, "uuid").get<std::string>(); }
  std::vector<cpu::RaplReading> read_rapl() override {
    std::vector<cpu::RaplReading> out;
    for (const json& r : call({{"op", "rapl"}}))
      out.push_back({r.at("package").get<unsigned>(), r.at("dram").get<bool>(), r.at("energy_uj").get<std::uint64_t>(),
                     r.at("max_energy_range_uj").get<std::uint64_t>()});
    return out;
  }
  std::vector<unsigned> supported_memory_clocks(unsigned d) override {
    return on(d, "supported_memory_clocks").get<std::vector<unsigned>>();
  }
  std::vector<unsigned> supported_graphics_clocks(unsigned d, unsigned memory) override {
    return call({{"op", "supported_graphics_clocks"}, {"device", d}, {"memory", memory}}).get<std::vector<unsigned>>();
  }
  unsigned current_graphics_clock(unsigned d) override { return on(d, "current_graphics_clock").get<unsigned>(); }
  unsigned current_memory_clock(unsigned d) override { return on(d, "current_memory_clock").get<unsigned>(); }
  void lock_graphics_clock(unsigned d, unsigned low, unsigned high) override {
    call({{"op", "lock_graphics_clock"}, {"device", d}, {"min", low}, {"max", high}}, [&] {
      settings_[d].graphics = std::pair{low, high};
    });
  }
  void reset_graphics_clock(unsigned d) override {
    call({{"op", "reset_graphics_clock"}, {"device", d}}, [&] { settings_[d].graphics.reset(); });
  }
  void lock_memory_clock(unsigned d, unsigned low, unsigned high) override {
    call({{"op", "lock_memory_clock"}, {"device", d}, {"min", low}, {"max", high}}, [&] {
      settings_[d].memory = std::pair{low, high};
    });
  }
  void reset_memory_clock(unsigned d) override {
    call({{"op", "reset_memory_clock"}, {"device", d}}, [&] { settings_[d].memory.reset(); });
  }
  unsigned power_limit_mw(unsigned d) override { return on(d, "power_limit").get<unsigned>(); }
  gpu::PowerLimitRange power_limit_range(unsigned d) override {
    json range = on(d, "power_limit_range");
    return {range.at("min_mw").get<unsigned>(), range.at("max_mw").get<unsigned>(),
            range.value("default_mw", 0u)};  // a gpud that does not say: unknown
  }
  void set_power_limit_mw(unsigned d, unsigned limit) override {
    call({{"op", "set_power_limit"}, {"device", d}, {"mw", limit}}, [&] { settings_[d].power_limit_mw = limit; });
  }
  std::uint64_t total_energy_mj(unsigned d) override { return on(d, "total_energy").get<std::uint64_t>(); }
  unsigned power_usage_mw(unsigned d) override { return on(d, "power_usage").get<unsigned>(); }

 private:
  static constexpr std::chrono::milliseconds kRetryInterval{1000};

  json on(unsigned device, const char* op) { return call({{"op", op}, {"device", device}}); }

  // One request, one reply; `done` records what a successful request set. The training thread
  // (clock reads) and the controller thread (locks, energy) share the connection, so requests
  // are serialized.
  json call(
      const json& request, const std::function<void()>& done = [] {}) {
    std::lock_guard lock(mutex_);
    if (fd_ < 0) reconnect(fmt::format("lost the connection to perseus gpud at {}: {}", path_, lost_));
    json reply;
    try {
      reply = exchange(request, timeout_);
    } catch (const Lost& first) {
      close_connection();
      lost_ = first.why;
      reconnect(fmt::format("lost the connection to perseus gpud at {}: {}", path_, first.why));
      try {
        reply = exchange(request, timeout_);  // every request may be sent twice: each sets or reads a value
      } catch (const Lost& second) {
        close_connection();
        lost_ = second.why;
        throw GpuError(GpuErrorKind::other,
                       fmt::format("lost the connection to perseus gpud at {}: {}", path_, second.why));
      }
    }
    json value = result_of(reply);
    done();
    return value;
  }

  // A new connection that sets again what this client had set; throws GpuError (starting with
  // `failure`) when none can be made now, trying again no more often than every kRetryInterval.
  void reconnect(const std::string& failure) {
    auto now = SteadyClock::now();
    if (now < next_attempt_) throw GpuError(GpuErrorKind::other, failure + " (reconnecting)");
    next_attempt_ = now + kRetryInterval;
    try {
      // A restarted daemon answers at once: a short deadline keeps a hung one from stalling the caller.
      open_connection(std::min(timeout_, kRetryInterval));
      for (const auto& [device, set] : settings_) {
        if (set.memory)
          result_of(exchange({{"op", "lock_memory_clock"},
                              {"device", device},
                              {"min", set.memory->first},
                              {"max", set.memory->second}},
                             timeout_));
        if (set.graphics)
          result_of(exchange({{"op", "lock_graphics_clock"},
                              {"device", device},
                              {"min", set.graphics->first},
                              {"max", set.graphics->second}},
                             timeout_));
        if (set.power_limit_mw)
          result_of(exchange({{"op", "set_power_limit"}, {"device", device}, {"mw", *set.power_limit_mw}}, timeout_));
      }
    } catch (const Lost& e) {
      close_connection();
      throw GpuError(GpuErrorKind::other, fmt::format("{} (reconnecting: {})", failure, e.why));
    } catch (const GpuError& e) {  // no daemon yet, or the GPU now belongs to another process
      close_connection();
      throw GpuError(e.kind(), fmt::format("{} (reconnecting: {})", failure, e.what()));
    }
    next_attempt_ = {};  // a later break is retried at once again
    spdlog::info("perseus: reconnected to perseus gpud at {}{}", path_,
                 settings_.empty() ? "" : "; clocks and power limits set again");
  }

  void open_connection(std::chrono::milliseconds hello_timeout) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw GpuError(GpuErrorKind::other, fmt::format("socket: {}", std::strerror(errno)));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path_.c_str(), path_.size() + 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      int error = errno;
      ::close(fd);
      throw GpuError(
          error == EACCES ? GpuErrorKind::no_permission : GpuErrorKind::library_missing,
          fmt::format("cannot connect to perseus gpud at {}: {} ({})", path_, std::strerror(error),
                      error == EACCES ? "this user may not use the socket: see the socket_group setting of perseus gpud"
                                      : "is `perseus gpud` running on this node?"));
    }
    fd_ = fd;
    pending_.clear();
    try {
      result_of(exchange({{"op", "hello"}}, hello_timeout));
    } catch (const Lost& e) {
      close_connection();
      throw GpuError(GpuErrorKind::library_missing, fmt::format("perseus gpud at {} did not answer: {}", path_, e.why));
    }
  }

  void close_connection() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    pending_.clear();
  }

  // Sends one request line and reads one reply line; throws Lost when the connection fails.
  json exchange(const json& request, std::chrono::milliseconds timeout) {
    if (fd_ < 0) throw Lost{"not connected"};
    std::string line = request.dump() + "\n";
    for (std::size_t sent = 0; sent < line.size();) {
      ssize_t n = ::send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw Lost{std::strerror(errno)};
      sent += static_cast<std::size_t>(n);
    }
    auto deadline = SteadyClock::now() + timeout;
    std::size_t newline;
    while ((newline = pending_.find('\n')) == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
      if (left.count() <= 0) throw Lost{fmt::format("no answer within {} ms", timeout.count())};
      pollfd p{fd_, POLLIN, 0};
      int ready = ::poll(&p, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) continue;  // the deadline check above ends it
      char chunk[4096];
      ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) throw Lost{"the daemon closed the connection"};
      if (n < 0) throw Lost{std::strerror(errno)};
      pending_.append(chunk, static_cast<std::size_t>(n));
      if (pending_.size() > (1u << 20)) throw Lost{"an answer over 1 MiB"};
    }
    std::string text = pending_.substr(0, newline);
    pending_.erase(0, newline + 1);
    try {
      check_json_depth(text);
      return json::parse(text);
    } catch (const std::exception& e) {
      throw Lost{fmt::format("an answer that is not JSON: {}", safe_text(e.what()))};
    }
  }

  // The value of a reply; its error as the GpuError NVML would have raised.
  static json result_of(const json& reply) {
    if (!reply.is_object()) throw GpuError(GpuErrorKind::other, "perseus gpud: a reply that is not a JSON object");
    if (reply.value("ok", false)) return reply.contains("value") ? reply["value"] : json();
    auto kind_it = reply.find("kind");
    auto error_it = reply.find("error");
    auto kind = kind_it != reply.end() && kind_it->is_string() ? error_kind_from_name(kind_it->get<std::string>())
                                                               : std::nullopt;
    std::string error =
        error_it != reply.end() && error_it->is_string() ? error_it->get<std::string>() : safe_dump(reply);
    throw GpuError(kind.value_or(GpuErrorKind::other), fmt::format("perseus gpud: {}", safe_text(error, 1000)));
  }

  std::string path_;
  std::chrono::milliseconds timeout_;
  int fd_ = -1;  // -1: the connection broke; the next call makes a new one
  std::mutex mutex_;
  std::string pending_;
  std::string lost_;  // why the last connection broke
  SteadyClock::time_point next_attempt_{};
  std::map<unsigned, Settings> settings_;
};

}  // namespace

std::unique_ptr<gpu::GpuLibrary> connect(const std::string& socket_path, std::chrono::milliseconds timeout) {
  return std::make_unique<GpudLibrary>(socket_path, timeout);
}

std::unique_ptr<cpu::RaplSource> connect_rapl(const std::string& socket_path, std::chrono::milliseconds timeout) {
  return std::make_unique<GpudLibrary>(socket_path, timeout);
}

std::unique_ptr<cpu::RaplSource> open_rapl(const std::string& gpud_socket) {
  try {
    return cpu::powercap_tree(cpu::powercap_root());
  } catch (const cpu::RaplError& e) {
    std::string socket = gpud_socket_from(gpud_socket);
    if (e.kind() != cpu::RaplErrorKind::unreadable || socket.empty()) throw;
    try {
      auto source = connect_rapl(socket);
      (void)source->read_rapl();
      return source;
    } catch (const std::exception& through_gpud) {
      throw cpu::RaplError(cpu::RaplErrorKind::unreadable,
                           fmt::format("{}; through perseus gpud: {}", e.what(), through_gpud.what()));
    }
  }
}

std::string gpud_socket_from(const std::string& gpud_socket) {
  if (!gpud_socket.empty()) return gpud_socket;
  const char* env = std::getenv(kSocketEnv);
  return env != nullptr ? env : "";
}

std::unique_ptr<gpu::GpuLibrary> open_gpu_library(const std::string& gpud_socket, const std::string& nvml_library) {
  std::string socket = gpud_socket_from(gpud_socket);
  if (!socket.empty()) return connect(socket);
  return gpu::load_gpu_library("", nvml_library);
}

}  // namespace perseus::gpud
