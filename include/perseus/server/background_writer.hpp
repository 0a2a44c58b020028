#pragma once
// The server's disk writes (job store and record files) run here, on one thread of their own, in
// the order they were queued, so that a slow, full or locked disk never slows a job's round: the
// job's strand only queues. A write that fails (throws) is logged once and retried with backoff
// until it succeeds, and the writes behind it wait, so the store never gets a gap from a passing
// fault. The queue is bounded (bytes): when it is full a new write is dropped, logged once per
// streak (a restart then resumes the affected job from its last complete round).
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace perseus::server {

class BackgroundWriter {
 public:
  struct Options {
    std::size_t max_queued_bytes = std::size_t{256} << 20;
    std::chrono::milliseconds first_retry{50};
    std::chrono::milliseconds max_retry{2000};
    // On destruction: how long to keep retrying a failing write before giving the rest up.
    std::chrono::milliseconds drain_limit{5000};
  };

  BackgroundWriter();
  explicit BackgroundWriter(Options options);
  ~BackgroundWriter();  // writes what is queued (within drain_limit when writes fail), then stops
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  // `what` names the write in log lines; `bytes` is its size for the queue bound. Returns false
  // when the queue is full and the write was dropped.
  bool post(std::string what, std::size_t bytes, std::function<void()> write);

  // Waits until every write queued so far is done or `limit` passes; true when done.
  bool flush(std::chrono::milliseconds limit);

  std::size_t failures() const;  // failed attempts so far (retries included)
  std::size_t written() const;   // writes done so far
  std::size_t dropped() const;   // writes dropped because the queue was full

 private:
  struct Task {
    std::string what;
    std::size_t bytes = 0;
    std::function<void()> write;
  };
  void run();
  bool attempt(Task& task);

  Options options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<Task> queue_;
  std::size_t queued_bytes_ = 0;
  std::size_t failures_ = 0, dropped_ = 0, written_ = 0;
  bool busy_ = false, stopping_ = false, dropping_ = false;
  std::chrono::steady_clock::time_point stop_by_;
  std::thread thread_;
};

}  // namespace perseus::server
