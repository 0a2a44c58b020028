#include "perseus/util/task_thread.hpp"

#include <chrono>

namespace perseus {

namespace {

// Until `value` is no longer `old`: spinning for up to two milliseconds (the next point's handoff
// comes well within that, and waking a sleeping thread costs tens of microseconds on a VM), then
// sleeping. After the first few microseconds the spin yields the core at each turn, so that on a
// busy machine it does not take time from others.
template <typename T>
T await_change(const std::atomic<T>& value, T old) {
  const auto started = std::chrono::steady_clock::now();
  for (int spin = 1;; ++spin) {
    const T now = value.load(std::memory_order_acquire);
    if (now != old) return now;
    if (spin < 512) {
      spin_pause();
      continue;
    }
    std::this_thread::yield();
    if (spin % 64 == 0 && std::chrono::steady_clock::now() - started > std::chrono::milliseconds(2)) break;
  }
  for (;;) {
    value.wait(old, std::memory_order_acquire);
    const T now = value.load(std::memory_order_acquire);
    if (now != old) return now;
  }
}

}  // namespace

TaskThread::TaskThread() : thread_([this] { loop(); }) {}

TaskThread::~TaskThread() {
  // A task still posted (its poster left by an exception) is not started; one running is waited for.
  if (taken_.exchange(true, std::memory_order_acq_rel)) await_change(done_, false);
  quit_.store(true, std::memory_order_relaxed);
  posted_.fetch_add(1, std::memory_order_release);
  posted_.notify_one();
  thread_.join();
}

void TaskThread::post(const std::function<void()>& task) {
  task_ = &task;
  error_ = nullptr;
  done_.store(false, std::memory_order_relaxed);
  taken_.store(false, std::memory_order_release);
  posted_.fetch_add(1, std::memory_order_release);
  posted_.notify_one();
}

void TaskThread::finish() {
  if (!taken_.exchange(true, std::memory_order_acq_rel)) {
    done_.store(true, std::memory_order_relaxed);
    (*task_)();  // the thread has not started it: no waiting for a core it may not get
    return;
  }
  await_change(done_, false);
  if (error_) std::rethrow_exception(error_);
}

void TaskThread::loop() {
  std::uint32_t seen = 0;
  for (;;) {
    seen = await_change(posted_, seen);
    if (quit_.load(std::memory_order_relaxed)) return;
    if (taken_.exchange(true, std::memory_order_acq_rel)) continue;  // the poster ran it already
    try {
      (*task_)();
    } catch (...) {
      error_ = std::current_exception();
    }
    done_.store(true, std::memory_order_release);
    done_.notify_one();
  }
}

}  // namespace perseus
