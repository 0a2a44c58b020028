#include "perseus/util/in_order_thread.hpp"

#include <chrono>

namespace perseus {

namespace {

// Until `value` is no longer `old`: spinning for up to two milliseconds (the next item comes well
// within that, and waking a sleeping thread costs tens of microseconds on a VM), then sleeping.
// After the first few microseconds the spin yields the core at each turn, so that on a busy
// machine it does not take time from others.
std::uint32_t await_change(const std::atomic<std::uint32_t>& value, std::uint32_t old, const std::atomic<bool>& quit) {
  const auto started = std::chrono::steady_clock::now();
  for (int spin = 1;; ++spin) {
    const std::uint32_t now = value.load(std::memory_order_acquire);
    if (now != old || quit.load(std::memory_order_relaxed)) return now;
    if (spin < 512) {
      spin_pause();
      continue;
    }
    std::this_thread::yield();
    if (spin % 64 == 0 && std::chrono::steady_clock::now() - started > std::chrono::milliseconds(2)) break;
  }
  for (;;) {
    value.wait(old, std::memory_order_acquire);
    const std::uint32_t now = value.load(std::memory_order_acquire);
    if (now != old || quit.load(std::memory_order_relaxed)) return now;
  }
}

}  // namespace

InOrderThread::InOrderThread(std::function<bool(std::size_t)> work, bool second_thread) : work_(std::move(work)) {
  if (second_thread) thread_ = std::thread([this] { loop(); });
}

InOrderThread::~InOrderThread() {
  if (!thread_.joinable()) return;
  quit_.store(true, std::memory_order_relaxed);
  signal_.fetch_add(1, std::memory_order_release);
  signal_.notify_one();
  thread_.join();  // an item running finishes first; the rest are not started
}

void InOrderThread::publish(std::size_t count) {
  published_.store(count, std::memory_order_release);
  if (!thread_.joinable()) return;
  signal_.fetch_add(1, std::memory_order_release);
  signal_.notify_one();
}

// Runs what is published and not yet run, unless the other side is running items (it runs them
// all: only the publisher adds items, and it does not while it runs them). False when it was.
bool InOrderThread::run_published() {
  if (busy_.load(std::memory_order_relaxed) || busy_.exchange(true, std::memory_order_acquire)) return false;
  std::size_t k = done_.load(std::memory_order_relaxed);
  while (!halted_.load(std::memory_order_relaxed) && !quit_.load(std::memory_order_relaxed) &&
         k < published_.load(std::memory_order_acquire)) {
    bool go_on = false;
    try {
      go_on = work_(k);
    } catch (...) {
      error_ = std::current_exception();
    }
    if (!go_on) halted_.store(true, std::memory_order_release);
    done_.store(++k, std::memory_order_release);
  }
  busy_.store(false, std::memory_order_release);
  return true;
}

void InOrderThread::catch_up(std::size_t count) {
  if (count > published()) count = published();
  for (int spin = 1; done() < count && !halted(); ++spin) {
    if (run_published()) continue;
    // The thread is running them: it has a core, so the wait is short.
    if (spin < 512) spin_pause();
    else std::this_thread::yield();
  }
  rethrow_error();
}

void InOrderThread::rethrow_error() {
  if (halted() && error_) {  // no item runs while halted: error_ is this thread's to read
    const std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

void InOrderThread::restart() {
  while (busy_.load(std::memory_order_acquire)) spin_pause();  // the runner leaving after the halt
  published_.store(done_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  halted_.store(false, std::memory_order_release);
}

void InOrderThread::loop() {
  std::uint32_t seen = 0;
  for (;;) {
    seen = await_change(signal_, seen, quit_);
    if (quit_.load(std::memory_order_relaxed)) return;
    run_published();
  }
}

}  // namespace perseus
