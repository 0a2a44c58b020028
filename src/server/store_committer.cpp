#include "perseus/server/store_committer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

namespace perseus::server {

using SteadyClock = std::chrono::steady_clock;

StoreCommitter::StoreCommitter(JobStore& store) : StoreCommitter(store, Options{}) {}

StoreCommitter::StoreCommitter(JobStore& store, Options options)
    : store_(store), options_(options), delay_(options.first_retry), thread_([this] { run(); }) {}

StoreCommitter::~StoreCommitter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    stop_by_ = SteadyClock::now() + options_.drain_limit;
  }
  wake_.notify_all();
  thread_.join();
}

bool StoreCommitter::submit(Write write, Done done) {
  {
    std::lock_guard lock(mutex_);
    if (waiting_ >= options_.max_waiting) return false;
    ++waiting_;
    queue_.push_back({std::move(write), std::move(done), false, 0, {}, false});
  }
  wake_.notify_one();
  return true;
}

void StoreCommitter::keep(std::string what, std::size_t bytes, Write write) {
  {
    std::lock_guard lock(mutex_);
    if (kept_bytes_ + bytes > options_.max_kept_bytes) {
      ++dropped_;
      if (!dropping_)
        spdlog::error(
            "the job store is {} MB behind (it cannot be written): dropping {} and later writes until it "
            "catches up; a restart resumes affected jobs from their last stored round",
            kept_bytes_ >> 20, what);
      dropping_ = true;
      return;
    }
    dropping_ = false;
    kept_bytes_ += bytes;
    queue_.push_back({std::move(write), {}, true, bytes, std::move(what), false});
  }
  wake_.notify_one();
}

void StoreCommitter::on_recovered(std::function<void()> callback) {
  std::lock_guard lock(mutex_);
  on_recovered_ = std::move(callback);
}

bool StoreCommitter::failing() const {
  std::lock_guard lock(mutex_);
  return failing_;
}

bool StoreCommitter::flush(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  return idle_.wait_for(lock, limit, [&] { return queue_.empty() && !busy_; });
}

std::size_t StoreCommitter::committed() const {
  std::lock_guard lock(mutex_);
  return committed_;
}

std::size_t StoreCommitter::failures() const {
  std::lock_guard lock(mutex_);
  return failures_;
}

std::size_t StoreCommitter::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

// One transaction over `batch`; each op's `ok` says whether it is in it. Runs without the mutex.
bool StoreCommitter::commit(std::deque<Op>& batch) {
  bool writes = std::any_of(batch.begin(), batch.end(), [](const Op& op) { return static_cast<bool>(op.write); });
  if (!writes) {
    for (auto& op : batch) op.ok = true;
    return true;
  }
  bool recovered = false;
  try {
    store_.begin();
    for (auto& op : batch) {
      op.ok = true;
      if (!op.write) continue;
      store_.savepoint();
      try {
        op.write(store_);
        store_.release_savepoint();
      } catch (const StoreError& e) {
        if (e.store_fault()) throw;
        store_.rollback_to_savepoint();
        op.ok = false;
        spdlog::error("job store: a write failed and was left out: {}{}{}", op.what, op.what.empty() ? "" : ": ",
                      e.what());
      } catch (const std::exception& e) {
        store_.rollback_to_savepoint();
        op.ok = false;
        spdlog::error("job store: a write failed and was left out: {}{}{}", op.what, op.what.empty() ? "" : ": ",
                      e.what());
      }
    }
    store_.commit();
    return true;
  } catch (const StoreError& e) {
    store_.rollback();
    {
      std::lock_guard lock(mutex_);
      if (failed_attempts_++ == 0)
        spdlog::error(
            "could not write the job store {}: {}; registrations are refused (503, clients retry) and rounds go "
            "on, their records kept to be written when it works again",
            store_.file().string(), e.what());
    }
    if (e.damaged()) {
      try {
        store_.recover();
        recovered = true;
      } catch (const std::exception& again) {
        spdlog::error("could not recover the job store {}: {}", store_.file().string(), again.what());
      }
    }
  } catch (const std::exception& e) {
    store_.rollback();
    std::lock_guard lock(mutex_);
    if (failed_attempts_++ == 0)
      spdlog::error("could not write the job store {}: {}", store_.file().string(), e.what());
  }
  if (recovered) {
    std::lock_guard lock(mutex_);
    recovered_ = true;  // told once this transaction's writes are answered
  }
  return false;
}

void StoreCommitter::give_up(std::deque<Op>& ops) {
  std::size_t kept = 0;
  for (auto& op : ops) {
    if (op.kept) ++kept;
    if (op.done) op.done(false);
  }
  if (kept > 0) {
    spdlog::error(
        "the server is stopping and the job store still fails: {} writes are lost (their jobs resume from "
        "their last stored round)",
        kept);
    std::lock_guard lock(mutex_);
    dropped_ += kept;
  }
}

void StoreCommitter::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (queue_.empty()) {
      idle_.notify_all();
      if (stopping_) return;
      wake_.wait(lock);
      continue;
    }
    auto now = SteadyClock::now();
    if (failing_) {
      if (stopping_ && now >= stop_by_) {
        std::deque<Op> rest = std::move(queue_);
        queue_.clear();
        waiting_ = 0, kept_bytes_ = 0;
        lock.unlock();
        give_up(rest);
        lock.lock();
        continue;
      }
      // An acknowledged write does not wait out the backoff: its client is waiting for the answer.
      bool acknowledged = std::any_of(queue_.begin(), queue_.end(), [](const Op& op) { return !op.kept; });
      auto until = acknowledged ? std::min(retry_at_, failed_at_ + options_.first_retry) : retry_at_;
      if (stopping_) until = std::min(until, stop_by_);
      if (now < until) {
        wake_.wait_until(lock, until);
        continue;
      }
    }
    std::deque<Op> batch;
    while (!queue_.empty() && batch.size() < options_.max_batch) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    busy_ = true;
    lock.unlock();
    bool ok = commit(batch);
    lock.lock();
    busy_ = false;
    std::vector<std::pair<Done, bool>> answers;
    if (ok) {
      if (failing_)
        spdlog::warn("the job store {} is written again after {} failed attempts", store_.file().string(),
                     failed_attempts_);
      failing_ = false;
      failed_attempts_ = 0;
      delay_ = options_.first_retry;
      for (auto& op : batch) {
        if (op.kept) kept_bytes_ -= op.bytes;
        else --waiting_;
        if (op.ok && op.write) ++committed_;
        if (op.done) answers.emplace_back(std::move(op.done), op.ok);
      }
    } else {
      ++failures_;
      failing_ = true;
      failed_at_ = SteadyClock::now();
      retry_at_ = failed_at_ + delay_;
      delay_ = std::min(delay_ * 2, options_.max_retry);
      // Kept writes go back to the front, in order; acknowledged ones are refused.
      for (auto it = batch.rbegin(); it != batch.rend(); ++it) {
        if (it->kept) {
          queue_.push_front(std::move(*it));
        } else {
          --waiting_;
          if (it->done) answers.emplace_back(std::move(it->done), false);
        }
      }
      std::reverse(answers.begin(), answers.end());
    }
    std::function<void()> recovered;
    if (recovered_) recovered = on_recovered_, recovered_ = false;
    lock.unlock();
    for (auto& [done, committed] : answers) done(committed);
    if (recovered) recovered();
    lock.lock();
  }
}

}  // namespace perseus::server
