#include "perseus/server/background_writer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

namespace perseus::server {

BackgroundWriter::BackgroundWriter() : BackgroundWriter(Options{}) {}

BackgroundWriter::BackgroundWriter(Options options) : options_(options), thread_([this] { run(); }) {}

BackgroundWriter::~BackgroundWriter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    stop_by_ = std::chrono::steady_clock::now() + options_.drain_limit;
  }
  wake_.notify_all();
  thread_.join();
}

bool BackgroundWriter::post(std::string what, std::size_t bytes, std::function<void()> write) {
  {
    std::lock_guard lock(mutex_);
    if (!queue_.empty() && queued_bytes_ + bytes > options_.max_queued_bytes) {
      ++dropped_;
      if (!dropping_)
        spdlog::error(
            "the disk cannot keep up ({} MB of writes queued): dropping {} and later writes until it "
            "catches up; a restart resumes affected jobs from their last complete round",
            queued_bytes_ >> 20, what);
      dropping_ = true;
      return false;
    }
    if (dropping_) spdlog::warn("writes are queued again after {} were dropped", dropped_);
    dropping_ = false;
    queued_bytes_ += bytes;
    queue_.push_back({std::move(what), bytes, std::move(write)});
  }
  wake_.notify_one();
  return true;
}

bool BackgroundWriter::flush(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  return idle_.wait_for(lock, limit, [&] { return queue_.empty() && !busy_; });
}

std::size_t BackgroundWriter::failures() const {
  std::lock_guard lock(mutex_);
  return failures_;
}

std::size_t BackgroundWriter::written() const {
  std::lock_guard lock(mutex_);
  return written_;
}

std::size_t BackgroundWriter::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

// One write, retried until it succeeds or the writer is stopping and out of time. The mutex is
// not held while writing.
bool BackgroundWriter::attempt(Task& task) {
  auto delay = options_.first_retry;
  std::size_t failed = 0;
  for (;;) {
    try {
      task.write();
      if (failed > 0) spdlog::warn("{}: written after {} failed attempts", task.what, failed);
      std::lock_guard lock(mutex_);
      ++written_;
      return true;
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex_);
      ++failures_;
      // Once per streak at error level, so that a disk full for an hour is one line, not thousands.
      if (failed == 0)
        spdlog::error("could not write {}: {}; retrying until it works (training is not affected)", task.what,
                      e.what());
      else spdlog::debug("could not write {} (attempt {}): {}", task.what, failed + 1, e.what());
    }
    ++failed;
    std::unique_lock lock(mutex_);
    if (stopping_ && std::chrono::steady_clock::now() >= stop_by_) return false;
    auto until = std::chrono::steady_clock::now() + delay;
    if (stopping_) until = std::min(until, stop_by_);
    wake_.wait_until(lock, until, [&] { return stopping_ && std::chrono::steady_clock::now() >= stop_by_; });
    delay = std::min(delay * 2, options_.max_retry);
  }
}

void BackgroundWriter::run() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    bool written = attempt(task);
    {
      std::lock_guard lock(mutex_);
      queued_bytes_ -= task.bytes;
      busy_ = false;
      if (!written) {
        spdlog::error("the server is stopping and the disk still fails: {} and {} later writes are lost", task.what,
                      queue_.size());
        queue_.clear();
        queued_bytes_ = 0;
      }
    }
    idle_.notify_all();
  }
}

}  // namespace perseus::server
