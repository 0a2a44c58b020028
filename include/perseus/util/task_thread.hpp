#pragma once
// A second thread that runs one task at a time while its caller does other work: the planner's
// frontier points each overlap two halves of ~10-200 us, so the handoff must take microseconds.
// The thread spins briefly before it sleeps, so a task posted right after the last one starts
// without a system call. On a busy machine the thread may not get a core in time: finish() then
// runs the task on the caller's thread instead of waiting, so a second thread never makes a run
// slower than one thread by more than the handoff.
#include <atomic>
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

class TaskThread {
 public:
  TaskThread();
  ~TaskThread();
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  // Offers `task` to the thread; it must stay alive until finish() returns. One task at a time.
  void post(const std::function<void()>& task);
  // Until the posted task has run once: here, if the thread has not taken it yet, else by waiting
  // for the thread. Rethrows what it threw.
  void finish();

 private:
  void loop();

  std::atomic<std::uint32_t> posted_{0};
  std::atomic<bool> taken_{true}, done_{true}, quit_{false};
  const std::function<void()>* task_ = nullptr;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace perseus
