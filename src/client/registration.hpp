#pragma once
// A rank joining its job, and leaving it. Joining takes four steps: what the server says of itself
// (GET /info: the power mode); the GPU, opened, and its power states in that mode (in frequency mode
// the memory clock is locked at its top and the GPU registered for the clock reset at exit); the
// job, which rank 0 registers with a secret it made and shares with the id through
// broadcast_job_id (when rank 0 could not reach the server it shares only the secret, and whichever
// rank reaches the server first registers the job with it); then this rank. The client's
// constructor takes the steps while the server answers (begin); the exchange thread takes the ones
// left when it did not (complete). `on_registered` runs right after the server accepted the rank.
//
// Threads: nothing here is locked; the registering thread owns the registration and the
// ServerConnection: the constructor's thread in begin(), then the exchange thread in complete()
// until it succeeded. The GPU, its device index, the mode and the states are written only before
// `on_registered` runs; other threads read them only after they saw the client's `connected` flag
// (release/acquire) or joined the registering thread. join_broadcast_after_failure() and leave()
// run on the training thread once no other thread registers.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "perseus/client/client.hpp"
#include "perseus/gpu/gpu.hpp"
#include "perseus/protocol/power_mode.hpp"
#include "server_connection.hpp"

namespace perseus::client {

class Registration {
 public:
  // `options` and `connection` must outlive the registration; `options` is read when each step runs.
  Registration(const ClientOptions& options, ServerConnection& connection, std::function<void()> on_registered);

  // Constructor's thread: opens the connection and takes the steps in order while the server
  // answers. Returns nullopt once registered, else why the server did not answer (only with
  // retry_for > 0: the steps left are complete()'s). Throws what a step throws otherwise.
  std::optional<std::string> begin();
  // Exchange thread: the steps begin() left; throws as begin() does (ServerUnreachable included).
  void complete();

  // A rank that fails before the job-id broadcast still takes part in it, or every other rank would
  // wait in it forever: rank 0 sends "" (no job), the others receive and drop what comes.
  void join_broadcast_after_failure();
  // Tells the server this rank is out (`finished`: training finished), so that the others are not
  // held at the barrier waiting for it. Best effort, briefly, on a connection of its own.
  void leave(const std::string& why, bool finished = false) const;

  gpu::GpuLibrary* gpu() const { return gpu_.get(); }  // null until the GPU is prepared
  unsigned device() const { return device_; }          // the GPU's NVML index once prepared
  protocol::PowerMode mode() const { return mode_; }
  unsigned limit_before_mw() const { return limit_before_mw_; }  // power-limit mode: what the end restores
  // The GPU is registered for the clock reset at exit (clock_reset.hpp) until release_clock_reset().
  bool clock_reset_registered() const { return registered_reset_; }
  void release_clock_reset();

 private:
  void learn_server();
  void prepare_gpu();
  void register_job();
  void register_rank();
  // What rank 0 broadcast: the job id, then its secret after a newline when it has one.
  void receive_job_id(const std::string& shared);

  const ClientOptions& options_;
  ServerConnection& connection_;
  std::function<void()> on_registered_;
  std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  bool server_known_ = false, gpu_ready_ = false;  // the steps done so far
  bool joined_broadcast_ = false;                  // took part in the job-id broadcast (a collective of all ranks)
  std::shared_ptr<gpu::GpuLibrary> gpu_;
  unsigned device_ = 0;
  protocol::PowerMode mode_ = protocol::PowerMode::frequency;
  std::vector<int> states_;  // the GPU's power states in the server's mode
  unsigned limit_before_mw_ = 0;
  bool registered_reset_ = false;
};

}  // namespace perseus::client
