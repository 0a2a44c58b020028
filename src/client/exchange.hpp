#pragma once
// A rank's exchange with the server: a round's result goes out and the next round's schedule comes
// in on a thread of its own, so that training never waits on the network. The server answers a
// schedule request once every rank asked (its barrier), within the request deadline like every
// request. When the server is away (restarting, paused, unreachable) training keeps its current
// schedule and the exchange tries again, backing off (0.5 s doubling to 10 s, jittered, so that a
// job's ranks do not all knock at once; at once after a request that ran past its deadline), for
// ClientOptions::retry_for; then it gives up, and outcome() says why.
//
// Threads: the exchange owns one thread, from start() until stop() (or the destructor) joins it;
// meanwhile that thread is the ServerConnection's only user, and it runs `register_rest` (see
// start) outside any lock. One mutex guards what the thread shares: the outbox (handed over by the
// controller thread), the inbox and the count of schedules received (taken by the training thread),
// the outcome (read by the training thread once has_news() says so) and the backoff. No call holds
// it while talking to the server.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "perseus/client/client.hpp"
#include "perseus/protocol/models.hpp"
#include "server_connection.hpp"

namespace perseus::client {

class Exchange {
 public:
  using Clock = std::chrono::steady_clock;

  struct Schedule {
    std::vector<int> states;              // a power state per pipe_schedule entry
    std::optional<double> power_limit_w;  // the power budget's backstop while it runs
  };
  struct Arrived {
    Schedule schedule;
    std::uint64_t seq = 0;  // schedules received so far, this one included (they are numbered 1, 2, ...)
  };
  // What ends the exchange: the server says training is done, or the exchange gave up (failure;
  // `unreachable`: because the server stayed away for retry_for).
  struct Outcome {
    std::optional<std::string> done, failure;
    bool unreachable = false;
  };

  // Reads `options`' rank, retry_for and pipe_schedule (a schedule has one state per entry) when it
  // runs; `options` and `connection` must outlive the exchange.
  Exchange(const ClientOptions& options, ServerConnection& connection) : options_(options), connection_(connection) {}
  ~Exchange() { stop(std::chrono::milliseconds(0)); }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // Starts the thread, which asks for the first schedule. `register_rest`: the registration's steps
  // the server did not answer in the constructor, taken on the exchange thread before anything else
  // until they succeed; the outage (retry_for) counts from now. Empty: registered already.
  void start(std::function<void()> register_rest);

  // Controller thread: a round's result to send, then the next schedule to ask for. A result still
  // waiting to go out (the server is away) is kept: it answers the schedule the server runs.
  void hand_over(protocol::ProfilingResult result);

  // Training thread: the schedule that arrived and is not in use yet, if any.
  std::optional<Arrived> take_schedule();
  std::uint64_t received() const;  // schedules received so far

  bool has_news() const { return news_.load(); }  // the outcome is set
  Outcome outcome() const;

  // Waits up to `timeout` until the exchange settled: what was handed over was sent and the next
  // schedule arrived, or the server is away and it backs off, or it ended. True when it did.
  bool wait_settled(std::chrono::milliseconds timeout);
  // The same wait, then the outcome and the schedule that arrived (taken), read together.
  std::pair<Outcome, std::optional<Arrived>> wait_first_schedule(std::chrono::milliseconds timeout);

  // Gives a result still going out a moment (`grace`) to reach the server, then ends the exchange,
  // cutting short a request in progress (a schedule request may wait at the barrier).
  void stop(std::chrono::milliseconds grace);

 private:
  void run();
  Schedule fetch_schedule();
  void server_unreachable(const std::exception& e);  // mutex_ held
  bool settled_now() const;                          // mutex_ held
  Outcome outcome_locked() const;                    // mutex_ held
  std::optional<Arrived> take_locked();              // mutex_ held

  const ClientOptions& options_;
  ServerConnection& connection_;
  std::function<void()> register_rest_;  // exchange thread only

  mutable std::mutex mutex_;
  std::condition_variable wake_, settled_;
  std::optional<protocol::ProfilingResult> outbox_;  // a round's result to send
  bool want_schedule_ = false;                       // ask for the next schedule (after sending outbox_)
  std::optional<Schedule> inbox_;                    // a schedule that arrived and is not in use yet
  std::uint64_t received_ = 0;                       // schedules that arrived
  bool busy_ = false, stop_ = false;
  std::atomic<bool> news_{false};  // done_ or failure_ is set
  std::optional<std::string> done_;
  std::optional<std::string> failure_;
  bool failure_unreachable_ = false;
  std::optional<Clock::time_point> outage_since_;  // the server has been unreachable since
  Clock::time_point next_attempt_;
  std::chrono::milliseconds retry_delay_{500};
  std::minstd_rand random_{std::random_device{}()};
  std::thread thread_;
};

}  // namespace perseus::client
