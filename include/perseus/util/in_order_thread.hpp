#pragma once
// Numbered work items run in order, each once, a few items behind the thread that publishes
// them: the planner's flows run ahead while a second thread computes each point's times and
// confirms (or refutes) the guess the flows went on. Items are run by the second thread, or by the
// publisher when it has to wait for one the thread has not taken (on a busy machine the thread
// may not get a core in time, and then waiting would make two threads slower than one). Never
// two at once: an item may use what the ones before it left.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>

namespace perseus {

// One step of a spin-wait: tells the core this thread is waiting on another.
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class InOrderThread {
 public:
  // `work(k)` runs item k; when it returns false, the items after k wait for restart().
  // `second_thread` false: no thread, catch_up() runs every item.
  explicit InOrderThread(std::function<bool(std::size_t)> work, bool second_thread = true);
  ~InOrderThread();
  InOrderThread(const InOrderThread&) = delete;
  InOrderThread& operator=(const InOrderThread&) = delete;

  // Items below `count` may run: what the publisher wrote for them before is visible to them.
  void publish(std::size_t count);
  std::size_t published() const { return published_.load(std::memory_order_relaxed); }
  bool has_thread() const { return thread_.joinable(); }
  // Items that have run, in order; their effects are visible to the caller.
  std::size_t done() const { return done_.load(std::memory_order_acquire); }
  // Whether the last item run returned false (done() - 1 is that item).
  bool halted() const { return halted_.load(std::memory_order_acquire); }
  // Until `count` (at most published()) items have run or one returned false, running them here
  // where the thread has not taken them. Rethrows what an item threw (that item counts as run and
  // halts the rest).
  void catch_up(std::size_t count);
  // Rethrows what an item threw, if one did (it halted the rest).
  void rethrow_error();
  // After a halt: withdraws the published items from done() on, and lets new ones run.
  void restart();

 private:
  bool run_published();
  void loop();

  std::function<bool(std::size_t)> work_;
  // What the publisher writes and what the runner writes on cache lines of their own, so that a
  // side waiting on one does not slow the other's writes.
  alignas(64) std::atomic<std::size_t> published_{0};
  std::atomic<std::uint32_t> signal_{0};  // bumped on every publish: what the thread sleeps on
  std::atomic<bool> quit_{false};
  alignas(64) std::atomic<std::size_t> done_{0};
  std::atomic<bool> busy_{false}, halted_{false};
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace perseus
