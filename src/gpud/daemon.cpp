#include "perseus/gpud/daemon.hpp"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <istream>
#include <map>
#include <optional>
#include <vector>

#include "perseus/cpu/rapl.hpp"
#include "perseus/gpud/protocol.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/util/error.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus::gpud {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;
using gpu::GpuError;
using gpu::GpuErrorKind;
using nlohmann::json;

namespace {

// What one connection changed on one GPU it owns: what closing the connection must undo.
struct Touched {
  bool graphics = false, memory = false, power_limit = false;
  bool any() const { return graphics || memory || power_limit; }
  unsigned limit_before_mw = 0;  // the power limit before this connection first set one: what it gets back
};

GpuError bad(const std::string& message) { return GpuError(GpuErrorKind::invalid_argument, message); }

}  // namespace

class Connection;

struct Daemon::Impl : std::enable_shared_from_this<Daemon::Impl> {
  Impl(asio::io_context& io, std::shared_ptr<gpu::GpuLibrary> gpu, DaemonOptions options)
      : io(io), acceptor(io), retry(io), gpu(std::move(gpu)), options(std::move(options)) {}

  void listen();
  void set_socket_access();  // mode and group of the socket file
  void accept();
  void accept_failed(const boost::system::error_code& ec);
  // Whether a new connection may stay: room is made under max_connections_per_user (closing that
  // user's longest-idle connection that owns no GPU) and under max_connections (anyone's); only
  // when every candidate owns a GPU is the new one closed. A rank's clock lock is never kept out by
  // connections held open.
  bool admit(const Connection& connection);
  // What this daemon's clients changed and nobody undid yet, per GPU, in <socket>.state, written
  // before each change that adds to it: a daemon started after a crash undoes exactly that
  // (undo_what_a_crash_left) and nothing else, so an administrator's power limit is never lifted.
  void note_changes();
  void undo_what_a_crash_left();
  std::string state_path() const { return options.socket_path + ".state"; }
  // Undoes `touched` on `device`; returns what failed ("" when nothing did).
  std::string reset(unsigned device, const Touched& touched);
  // reset() on behalf of a client, counted in the GPU's resets.
  std::string undo(unsigned device, const Touched& touched);
  void count_request(const std::string& op, std::string_view outcome) { ++requests[{op, std::string(outcome)}]; }
  json handle(Connection& connection, const Request& request);
  void check_device(unsigned device) const {
    if (device >= device_count)
      throw bad(fmt::format("field 'device': GPU {} does not exist (this node has {})", device, device_count));
  }
  void claim(Connection& connection, unsigned device);
  void release(Connection& connection);
  const std::vector<unsigned>& graphics_clocks(unsigned device);
  json rapl_readings();

  asio::io_context& io;
  local::acceptor acceptor;
  asio::steady_timer retry;  // the next accept after one failed for want of descriptors
  int accept_failures = 0;
  std::shared_ptr<gpu::GpuLibrary> gpu;
  DaemonOptions options;
  unsigned device_count = 0;
  std::vector<Connection*> owner;  // per GPU: the connection that owns it
  std::vector<GpuState> state;     // per GPU: locked clocks and resets (owned: from `owner`)
  std::map<std::pair<std::string, std::string>, std::uint64_t> requests;
  std::map<unsigned, std::vector<unsigned>> clocks;  // supported graphics clocks at the top memory clock
  std::vector<std::weak_ptr<Connection>> connections;
  std::unique_ptr<cpu::RaplSource> rapl;  // opened at the first "rapl" request
  std::string noted;                      // the state file's content as last written ("": none)
  std::size_t refused = 0, evicted = 0;
  bool stopped = false;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(local::socket socket, std::shared_ptr<Daemon::Impl> daemon)
      : socket_(std::move(socket)), buffer_(kMaxLineBytes), idle_(socket_.get_executor()), daemon_(std::move(daemon)) {
    ucred cred{};
    socklen_t length = sizeof cred;
    if (getsockopt(socket_.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &length) == 0) {
      pid = cred.pid;
      uid = cred.uid;
    }
  }

  void start() {
    spdlog::debug("connection from pid {} (uid {})", pid, uid);
    read();
  }

  // Closes the connection and undoes what it set.
  void close() {
    if (closed_) return;
    closed_ = true;
    idle_.cancel();
    boost::system::error_code ignored;
    socket_.close(ignored);
    daemon_->release(*this);
  }

  bool is_open() const { return !closed_; }

  std::map<unsigned, Touched> owned;  // GPUs this connection owns, and what it changed on each
  pid_t pid = 0;
  uid_t uid = 0;
  std::chrono::steady_clock::time_point last_request = std::chrono::steady_clock::now();

 private:
  void read() {
    // A connection that owns no GPU and sends nothing is closed after a while, so that idle ones
    // cannot pile up; an owner keeps its connection as long as it lives (closing it resets its GPU).
    if (owned.empty() && daemon_->options.idle_timeout.count() > 0) {
      idle_.expires_after(daemon_->options.idle_timeout);
      idle_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
        auto self = weak.lock();
        if (ec || !self || !self->owned.empty()) return;
        spdlog::debug("pid {}: idle connection closed", self->pid);
        self->close();
      });
    } else {
      idle_.cancel();
    }
    asio::async_read_until(
        socket_, buffer_, '\n',
        [self = shared_from_this()](boost::system::error_code ec, std::size_t n) { self->on_read(ec, n); });
  }

  void on_read(boost::system::error_code ec, std::size_t n) {
    if (ec == asio::error::not_found) {  // a line longer than any request: not a perseus client
      daemon_->count_request("malformed", "invalid_argument");
      return write(safe_dump(json{{"ok", false},
                                  {"kind", "invalid_argument"},
                                  {"error", fmt::format("request longer than {} bytes", kMaxLineBytes)}}) +
                       "\n",
                   true);
    }
    if (ec) return close();
    last_request = std::chrono::steady_clock::now();
    std::string line(asio::buffers_begin(buffer_.data()),
                     asio::buffers_begin(buffer_.data()) + static_cast<std::ptrdiff_t>(n));
    buffer_.consume(n);
    write(answer(line) + "\n", false);
  }

  // The reply line to one request line, whatever its bytes: an error quotes them cut and with
  // invalid UTF-8 replaced, so serialising it cannot throw.
  std::string answer(std::string_view line) {
    json reply;
    std::string op = "malformed";
    try {
      Request request = parse_request(line);
      op = request.op;
      reply = {{"ok", true}, {"value", daemon_->handle(*this, request)}};
    } catch (const GpuError& e) {
      reply = {{"ok", false}, {"kind", error_kind_name(e.kind())}, {"error", safe_text(e.what(), kMaxErrorBytes)}};
    } catch (const std::exception& e) {
      spdlog::error("pid {}: request failed: {}", pid, safe_text(e.what()));
      reply = {{"ok", false}, {"kind", "other"}, {"error", safe_text(e.what(), kMaxErrorBytes)}};
    }
    daemon_->count_request(op, reply["ok"].get<bool>() ? "ok" : reply["kind"].get_ref<const std::string&>());
    return safe_dump(reply);
  }

  void write(std::string text, bool then_close) {
    out_ = std::move(text);
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this(), then_close](boost::system::error_code ec, std::size_t) {
                        if (ec || then_close) return self->close();
                        self->read();
                      });
  }

  static constexpr std::size_t kMaxErrorBytes = 1000;
  local::socket socket_;
  asio::streambuf buffer_;
  asio::steady_timer idle_;
  std::string out_;
  std::shared_ptr<Daemon::Impl> daemon_;
  bool closed_ = false;
};

void Daemon::Impl::listen() {
  namespace fs = std::filesystem;
  const std::string& path = options.socket_path;
  if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path))
    throw SettingError("socket_path", fmt::format("socket_path '{}': a Unix socket path must have 1 to {} characters",
                                                  path, sizeof(sockaddr_un::sun_path) - 1));
  std::error_code fs_error;
  if (fs::path parent = fs::path(path).parent_path(); !parent.empty()) fs::create_directories(parent, fs_error);
  if (auto status = fs::symlink_status(path, fs_error); fs::exists(status)) {
    if (status.type() != fs::file_type::socket)
      throw SettingError("socket_path",
                         fmt::format("socket_path '{}' exists and is not a socket: refusing to replace it (give a path "
                                     "that does not exist or a stale socket)",
                                     path));
    local::socket probe(io);
    boost::system::error_code ec;
    probe.connect(local::endpoint(path), ec);
    if (!ec) throw Error(fmt::format("another perseus gpud is already listening on {}", path), ErrorKind::failed);
    fs::remove(path, fs_error);  // a stale socket from a daemon that died
  }
  boost::system::error_code ec, ignored;
  bool bound = false;  // the socket file is ours to remove
  acceptor.open(local(), ec);
  if (!ec) acceptor.bind(local::endpoint(path), ec), bound = !ec;
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    acceptor.close(ignored);
    if (bound) fs::remove(path, fs_error);
    throw Error(fmt::format("cannot listen on {}: {}", path, ec.message()), ErrorKind::failed);
  }
  try {
    set_socket_access();
  } catch (...) {  // no socket left behind by a daemon that did not start
    acceptor.close(ignored);
    fs::remove(path, fs_error);
    throw;
  }
}

void Daemon::Impl::set_socket_access() {
  const std::string& path = options.socket_path;
  if ((options.socket_mode & 0002) != 0)
    spdlog::warn(
        "socket_mode {:04o}: every user of this node may change its GPUs' clocks and power limits "
        "(0660 with a socket_group is the usual choice)",
        options.socket_mode);
  if (::chmod(path.c_str(), options.socket_mode) != 0)
    throw Error(fmt::format("cannot set the mode of {} to {:o}: {}", path, options.socket_mode, std::strerror(errno)),
                ErrorKind::failed);
  if (!options.socket_group.empty()) {
    const group* g = ::getgrnam(options.socket_group.c_str());
    if (g == nullptr)
      throw SettingError("socket_group", fmt::format("socket_group '{}': no such group", options.socket_group));
    if (::chown(path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0)
      throw Error(fmt::format("cannot give {} to group {}: {}", path, options.socket_group, std::strerror(errno)),
                  ErrorKind::failed);
  }
}

void Daemon::Impl::accept() {
  acceptor.async_accept([self = shared_from_this()](boost::system::error_code ec, local::socket socket) {
    if (self->stopped || ec == asio::error::operation_aborted) return;
    if (!ec) {
      auto connection = std::make_shared<Connection>(std::move(socket), self);
      std::erase_if(self->connections, [](const auto& c) {
        auto open = c.lock();
        return !open || !open->is_open();
      });
      if (!self->admit(*connection)) {
        connection->close();
        return self->accept();
      }
      self->connections.push_back(connection);
      connection->start();
      if (self->accept_failures > 0) spdlog::warn("accept works again after {} failed attempts", self->accept_failures);
      self->accept_failures = 0;
    } else {
      return self->accept_failed(ec);
    }
    self->accept();
  });
}

bool Daemon::Impl::admit(const Connection& connection) {
  // The longest-idle open connection that owns no GPU, of `uid` (or of anyone), and how many `uid` holds.
  auto idlest = [&](std::optional<uid_t> uid, std::size_t* held) {
    std::shared_ptr<Connection> found;
    for (const auto& weak : connections) {
      auto other = weak.lock();
      if (!other || !other->is_open() || (uid && other->uid != *uid)) continue;
      if (held) ++*held;
      if (other->owned.empty() && (!found || other->last_request < found->last_request)) found = other;
    }
    return found;
  };
  auto make_room = [&](const std::shared_ptr<Connection>& victim) {
    victim->close();
    std::erase_if(connections, [&](const auto& c) { return c.lock() == victim; });
  };
  std::size_t mine = 0;
  auto own_idlest = idlest(connection.uid, &mine);
  if (options.max_connections_per_user != 0 && mine >= options.max_connections_per_user) {
    if (!own_idlest) {
      if (refused++ % 1000 == 0)
        spdlog::warn(
            "uid {} holds {} connections, each owning a GPU (max_connections_per_user): closing new ones "
            "({} so far)",
            connection.uid, mine, refused);
      return false;
    }
    if (evicted++ % 1000 == 0)
      spdlog::warn(
          "uid {} holds {} connections (max_connections_per_user): closing its longest idle one that owns "
          "no GPU to make room ({} so far)",
          connection.uid, mine, evicted);
    make_room(own_idlest);
  }
  if (options.max_connections != 0 && connections.size() >= options.max_connections) {
    auto any_idlest = idlest(std::nullopt, nullptr);
    if (!any_idlest) {
      if (refused++ % 1000 == 0)
        spdlog::warn("{} connections, each owning a GPU (max_connections): closing new ones ({} so far)",
                     connections.size(), refused);
      return false;
    }
    if (evicted++ % 1000 == 0)
      spdlog::warn(
          "{} connections (max_connections): closing the longest idle one that owns no GPU to make room "
          "({} so far)",
          connections.size(), evicted);
    make_room(any_idlest);
  }
  return true;
}

// Out of descriptors, the pending connection stays queued and accept fails again at once: retrying
// at once would spin and flood the log. Wait, doubling up to a second, and say so once per outage.
void Daemon::Impl::accept_failed(const boost::system::error_code& ec) {
  bool resources = ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
                   ec == asio::error::no_memory || ec.value() == ENFILE;
  if (!resources) {
    spdlog::debug("accept: {}", ec.message());
    return accept();
  }
  if (accept_failures++ == 0)
    spdlog::error(
        "accept: {}; new connections wait until one closes (retrying up to every second; raise the "
        "open-file limit, ulimit -n)",
        ec.message());
  retry.expires_after(
      std::min(std::chrono::milliseconds(1000), std::chrono::milliseconds(5 << std::min(accept_failures, 8))));
  retry.async_wait([self = shared_from_this()](boost::system::error_code wait_ec) {
    if (!wait_ec && !self->stopped) self->accept();
  });
}

std::string Daemon::Impl::reset(unsigned device, const Touched& touched) {
  std::vector<std::string> failed;
  auto attempt = [&](bool needed, const char* what, auto action) {
    if (!needed) return;
    try {
      action();
    } catch (const std::exception& e) {
      failed.push_back(fmt::format("{}: {}", what, e.what()));
    }
  };
  attempt(touched.graphics, "graphics clock", [&] {
    gpu->reset_graphics_clock(device);
    state[device].locked_graphics_mhz = 0;
  });
  attempt(touched.memory, "memory clock", [&] {
    gpu->reset_memory_clock(device);
    state[device].locked_memory_mhz = 0;
  });
  attempt(touched.power_limit, "power limit", [&] {
    gpu->set_power_limit_mw(
        device, touched.limit_before_mw != 0 ? touched.limit_before_mw : gpu->power_limit_range(device).reset_mw());
  });
  return fmt::format("{}", fmt::join(failed, "; "));
}

std::string Daemon::Impl::undo(unsigned device, const Touched& touched) {
  if (!touched.any()) return "";
  std::string failed = reset(device, touched);
  ++state[device].resets;
  if (!failed.empty()) ++state[device].reset_failures;
  return failed;
}

void Daemon::Impl::note_changes() {
  json gpus = json::object();
  for (unsigned d = 0; d < device_count; ++d) {
    if (owner[d] == nullptr) continue;
    auto it = owner[d]->owned.find(d);
    if (it == owner[d]->owned.end() || !it->second.any()) continue;
    const Touched& t = it->second;
    gpus[std::to_string(d)] = {{"graphics_clock_locked", t.graphics},
                               {"memory_clock_locked", t.memory},
                               {"power_limit_before_mw", t.power_limit ? json(t.limit_before_mw) : json(nullptr)}};
  }
  std::string text = gpus.empty() ? "" : json{{"changed", gpus}}.dump() + "\n";
  if (text == noted) return;
  std::error_code ignored;
  try {
    if (text.empty()) std::filesystem::remove(state_path(), ignored);
    else write_file_atomic(state_path(), text);
    noted = text;
  } catch (const std::exception& e) {
    spdlog::warn("could not write {} (a daemon started after a crash would not know what to undo): {}", state_path(),
                 e.what());
  }
}

void Daemon::Impl::undo_what_a_crash_left() {
  std::error_code ec;
  if (!std::filesystem::exists(state_path(), ec)) return;
  try {
    json state = json::parse(read_file(state_path()));
    for (const auto& [key, change] : state.at("changed").items()) {
      unsigned device = static_cast<unsigned>(std::stoul(key));
      if (device >= device_count) continue;
      Touched touched;
      touched.graphics = change.at("graphics_clock_locked").get<bool>();
      touched.memory = change.at("memory_clock_locked").get<bool>();
      touched.power_limit = !change.at("power_limit_before_mw").is_null();
      if (touched.power_limit) touched.limit_before_mw = change.at("power_limit_before_mw").get<unsigned>();
      std::string failed = reset(device, touched);
      if (failed.empty())
        spdlog::info("GPU {}: undid what the clients of an earlier perseus gpud set (it did not stop cleanly)", device);
      else spdlog::warn("GPU {}: could not undo all an earlier perseus gpud's clients set: {}", device, failed);
    }
  } catch (const std::exception& e) {
    spdlog::warn("{} cannot be read ({}): what an earlier perseus gpud's clients set is left as it is", state_path(),
                 e.what());
  }
  std::filesystem::remove(state_path(), ec);
}

const std::vector<unsigned>& Daemon::Impl::graphics_clocks(unsigned device) {
  auto it = clocks.find(device);
  if (it != clocks.end()) return it->second;
  auto memory = gpu->supported_memory_clocks(device);
  std::vector<unsigned> list;
  if (!memory.empty()) list = gpu->supported_graphics_clocks(device, *std::max_element(memory.begin(), memory.end()));
  return clocks.emplace(device, std::move(list)).first->second;
}

void Daemon::Impl::claim(Connection& connection, unsigned device) {
  Connection* current = owner[device];
  if (current == &connection) return;
  if (current != nullptr)
    throw GpuError(GpuErrorKind::busy, fmt::format("GPU {} is owned by another process (pid {}, uid {}) until it "
                                                   "disconnects: one rank per GPU",
                                                   device, current->pid, current->uid));
  owner[device] = &connection;
  connection.owned.emplace(device, Touched{});
  spdlog::info("GPU {}: owned by pid {} (uid {})", device, connection.pid, connection.uid);
}

void Daemon::Impl::release(Connection& connection) {
  for (const auto& [device, touched] : connection.owned) {
    auto start = std::chrono::steady_clock::now();
    std::string failed = undo(device, touched);
    auto took = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
    if (failed.empty())
      spdlog::info("GPU {}: pid {} disconnected; what it set is reset ({} µs)", device, connection.pid, took.count());
    else spdlog::error("GPU {}: pid {} disconnected; reset failed: {}", device, connection.pid, failed);
    if (owner[device] == &connection) owner[device] = nullptr;
  }
  connection.owned.clear();
  note_changes();
}

json Daemon::Impl::handle(Connection& connection, const Request& request) {
  const std::string& op = request.op;
  if (op == "hello") return {{"version", kProtocolVersion}, {"devices", device_count}, {"pid", ::getpid()}};
  if (op == "device_count") return device_count;
  if (op == "rapl") return rapl_readings();

  const unsigned device = request.device;
  check_device(device);
  if (op == "name") return gpu->name(device);
  if (op == "uuid") return gpu->uuid(device);
  if (op == "supported_memory_clocks") return gpu->supported_memory_clocks(device);
  if (op == "supported_graphics_clocks") return gpu->supported_graphics_clocks(device, request.memory);
  if (op == "current_graphics_clock") return gpu->current_graphics_clock(device);
  if (op == "current_memory_clock") return gpu->current_memory_clock(device);
  if (op == "power_limit") return gpu->power_limit_mw(device);
  if (op == "power_limit_range") {
    auto range = gpu->power_limit_range(device);
    return {{"min_mw", range.min_mw}, {"max_mw", range.max_mw}, {"default_mw", range.default_mw}};
  }
  if (op == "total_energy") return gpu->total_energy_mj(device);
  if (op == "power_usage") return gpu->power_usage_mw(device);

  // Everything below changes the GPU: the connection must own it.
  if (op == "claim") {
    claim(connection, device);
    return nullptr;
  }
  if (op == "release") {
    if (owner[device] != &connection) throw bad(fmt::format("GPU {} is not owned by this connection", device));
    Touched touched = connection.owned[device];
    connection.owned.erase(device);
    owner[device] = nullptr;
    std::string failed = undo(device, touched);
    note_changes();
    if (!failed.empty()) throw GpuError(GpuErrorKind::other, failed);
    return nullptr;
  }
  bool lock_graphics = op == "lock_graphics_clock", lock_memory = op == "lock_memory_clock";
  // Validate before claiming: a refused request changes nothing, ownership included.
  if (lock_graphics || lock_memory) {
    unsigned low = request.min, high = request.max;
    if (low > high) throw bad(fmt::format("field 'min': {} MHz is above 'max' {} MHz", low, high));
    std::vector<unsigned> memory;
    const auto& supported = lock_graphics ? graphics_clocks(device) : (memory = gpu->supported_memory_clocks(device));
    for (unsigned c : {low, high})
      if (std::find(supported.begin(), supported.end(), c) == supported.end())
        throw bad(fmt::format("GPU {} does not support a {} clock of {} MHz", device,
                              lock_graphics ? "graphics" : "memory", c));
    claim(connection, device);
    Touched& touched = connection.owned[device];
    if (lock_graphics) {
      touched.graphics = true;  // before the call: a partial failure must still be undone
      note_changes();
      gpu->lock_graphics_clock(device, low, high);
      state[device].locked_graphics_mhz = high;
    } else {
      touched.memory = true;
      note_changes();
      gpu->lock_memory_clock(device, low, high);
      state[device].locked_memory_mhz = high;
    }
    return nullptr;
  }
  if (op == "set_power_limit") {
    unsigned limit = request.mw;
    auto range = gpu->power_limit_range(device);
    if (limit < range.min_mw || limit > range.max_mw)
      throw bad(fmt::format("GPU {}: a power limit of {} mW is outside its range {} .. {} mW", device, limit,
                            range.min_mw, range.max_mw));
    claim(connection, device);
    Touched& touched = connection.owned[device];
    if (!touched.power_limit) touched.limit_before_mw = gpu->power_limit_mw(device);
    touched.power_limit = true;
    note_changes();
    gpu->set_power_limit_mw(device, limit);
    return nullptr;
  }
  if (op == "reset_graphics_clock" || op == "reset_memory_clock") {
    claim(connection, device);
    Touched& touched = connection.owned[device];
    if (op == "reset_graphics_clock") {
      gpu->reset_graphics_clock(device);  // errors keep NVML's kind (no_permission, ...)
      touched.graphics = false;
      state[device].locked_graphics_mhz = 0;
    } else {
      gpu->reset_memory_clock(device);
      touched.memory = false;
      state[device].locked_memory_mhz = 0;
    }
    note_changes();
    return nullptr;
  }
  if (op == "reset") {  // everything, whoever set it: asked for by hand (perseus gpu reset)
    claim(connection, device);
    connection.owned[device] = Touched{};
    note_changes();
    std::string failed = undo(device, Touched{true, true, true});
    if (!failed.empty()) throw GpuError(GpuErrorKind::other, failed);
    return nullptr;
  }
  throw bad(fmt::format("field 'op': unknown operation '{}'", op));  // parse_request knows no other
}

json Daemon::Impl::rapl_readings() {
  if (!options.serve_rapl)
    throw GpuError(GpuErrorKind::no_permission, "this perseus gpud does not serve RAPL readings");
  try {
    if (!rapl) rapl = cpu::powercap_tree(options.powercap_root.empty() ? cpu::powercap_root() : options.powercap_root);
    json out = json::array();
    for (const auto& r : rapl->read_rapl())
      out.push_back({{"package", r.package},
                     {"dram", r.dram},
                     {"energy_uj", r.energy_uj},
                     {"max_energy_range_uj", r.max_energy_range_uj}});
    return out;
  } catch (const cpu::RaplError& e) {
    rapl.reset();  // the tree may appear (a module loaded) or become readable later
    throw GpuError(e.kind() == cpu::RaplErrorKind::absent ? GpuErrorKind::not_supported : GpuErrorKind::no_permission,
                   e.what());
  }
}

Daemon::Daemon(asio::io_context& io, std::shared_ptr<gpu::GpuLibrary> gpu, DaemonOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(gpu), std::move(options))) {
  impl_->device_count = impl_->gpu->device_count();
  impl_->owner.assign(impl_->device_count, nullptr);
  impl_->state.assign(impl_->device_count, GpuState{});
  impl_->listen();
  impl_->undo_what_a_crash_left();
  impl_->accept();
}

Daemon::~Daemon() { stop(); }

DaemonStats Daemon::stats() const {
  DaemonStats out;
  out.gpus = impl_->state;
  for (unsigned d = 0; d < impl_->device_count; ++d) out.gpus[d].owned = impl_->owner[d] != nullptr;
  for (const auto& weak : impl_->connections)
    if (auto connection = weak.lock()) out.connections += connection->is_open();
  out.requests = impl_->requests;
  return out;
}

void Daemon::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  boost::system::error_code ignored;
  impl_->acceptor.close(ignored);
  impl_->retry.cancel();
  // Each connection's close undoes what it set; nothing else is touched.
  for (auto& weak : impl_->connections)
    if (auto connection = weak.lock()) connection->close();
  impl_->connections.clear();
  impl_->note_changes();
  std::error_code fs_error;
  std::filesystem::remove(impl_->options.socket_path, fs_error);
}

}  // namespace perseus::gpud
