#pragma once
// A rank's heartbeat: every interval it tells the server that the rank lives and how far its
// training got (the count of hooks called), so that the server can tell a rank that stopped from
// one in a long step.
//
// Threads: the heartbeat owns one thread, started by the constructor and joined by stop() or the
// destructor. It reads `progress` (written by the training thread) atomically and opens its own
// HTTP connection from a copy of the endpoint; its mutex guards only the stop flag. `on_reply` runs
// on the heartbeat's thread.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "server_connection.hpp"

namespace perseus::client {

struct HeartbeatOptions {
  Endpoint endpoint;  // each beat waits at most its request_timeout, or two intervals
  std::chrono::milliseconds interval{5000};
};

class Heartbeat {
 public:
  // Called with the body of each answer the server gave with 200.
  using OnReply = std::function<void(const std::string& body)>;

  // Starts beating at once; `progress` must outlive the heartbeat.
  Heartbeat(HeartbeatOptions options, const std::atomic<std::uint64_t>& progress, OnReply on_reply);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Ends the beats (a beat in flight finishes first); the server stops hearing from this rank.
  void stop();

 private:
  void run(const HeartbeatOptions& options, const std::atomic<std::uint64_t>& progress, const OnReply& on_reply);

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace perseus::client
