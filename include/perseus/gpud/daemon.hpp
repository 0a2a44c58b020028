#pragma once
// `perseus gpud`: the one privileged process per node that owns NVML. Training ranks
// talk to it over a Unix socket (protocol.hpp) and need no root. A connection that changes a GPU
// owns it until the connection closes; a second connection trying to change it is refused (busy).
// When a connection closes, for any reason — exit, exception, SIGKILL, OOM kill — the daemon
// resets at once what that connection set: the NVIDIA driver keeps locked clocks after the
// process that locked them is gone, so only something that outlives the rank can undo them.
// The daemon changes nothing no client asked for: when it stops, it undoes what its clients set
// (their connections close); what they set is also noted in <socket>.state, so that a daemon
// started after a crash undoes exactly that. A power limit no client of it set (an administrator's
// cap) is never touched.
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "perseus/gpu/gpu.hpp"

namespace perseus::gpud {

struct DaemonOptions {
  std::string socket_path;
  unsigned socket_mode = 0660;  // who may connect: the owner and socket_group
  std::string socket_group;     // "" keeps the daemon's group
  // A connection that owns no GPU is closed after this long without a request (0: never).
  std::chrono::milliseconds idle_timeout = std::chrono::seconds(60);
  // Connections one user (SO_PEERCRED uid) may hold at once: at the cap that user's longest-idle
  // connection that owns no GPU is closed to make room (the new one only when each owns a GPU), so
  // one user's sockets can keep neither another user's ranks nor its own out. 0: no cap.
  std::size_t max_connections_per_user = 0;
  // Connections in all; at the bound the longest-idle connection that owns no GPU is closed to
  // make room for a new one (only when every one owns a GPU is the new one closed). 0: no bound.
  std::size_t max_connections = 0;
  // The powercap tree whose RAPL counters the "rapl" operation serves ("": $PERSEUS_POWERCAP_ROOT,
  // else /sys/class/powercap); serve_rapl false refuses it (no_permission).
  std::string powercap_root{};
  bool serve_rapl = true;
};

// What the daemon knows of one GPU beyond what NVML reports: what its clients set on it.
struct GpuState {
  bool owned = false;                // a live connection owns it
  unsigned locked_graphics_mhz = 0;  // the SM clock a client locked it to (the top of the range); 0: not locked
  unsigned locked_memory_mhz = 0;
  // Resets of what a client set, when it disconnected, released the GPU or asked for a reset (not
  // the daemon's own resets at start and stop), and how many of them failed in part.
  std::uint64_t resets = 0, reset_failures = 0;
};

// A snapshot for the daemon's metrics (metrics_endpoint.hpp).
struct DaemonStats {
  std::vector<GpuState> gpus;   // by NVML index
  std::size_t connections = 0;  // open client connections
  // Requests answered, by operation ("malformed" for a line that is not a request) and outcome
  // ("ok" or the GpuErrorKind's name): both from fixed lists, so the map stays small.
  std::map<std::pair<std::string, std::string>, std::uint64_t> requests;
};

class Daemon {
 public:
  // Listens on options.socket_path (a stale socket file is replaced; a live daemon on it, or a path
  // that is not a socket, is an error; on any error no socket is left), after undoing what an
  // earlier daemon's clients left set (its <socket>.state). Serves on `io`, which must run on one thread.
  Daemon(boost::asio::io_context& io, std::shared_ptr<gpu::GpuLibrary> gpu, DaemonOptions options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Closes every connection (undoing what each set) and removes the socket file. Call on io's
  // thread (or with io stopped); the destructor calls it too.
  void stop();

  // Call on io's thread.
  DaemonStats stats() const;

 private:
  friend class Connection;  // one client's connection (daemon.cpp)
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace perseus::gpud
