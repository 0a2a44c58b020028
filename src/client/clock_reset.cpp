#include "clock_reset.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace perseus::client {
namespace {

struct Slot {
  std::atomic<gpu::GpuLibrary*> library{nullptr};
  std::atomic<unsigned> device{0};
  std::atomic<bool> clocks{false};           // reset the clocks
  std::atomic<unsigned> limit_before_mw{0};  // set this power limit again (0: none)
};

constexpr int kSlots = 64;
Slot slots[kSlots];

// Sent by another process: the handler returns at once and the watcher ends the process after
// the reset. Raised by the faulting thread itself: the handler must not return into the fault,
// so it waits (bounded) for the watcher's reset and then dies.
constexpr int kAsynchronous[] = {SIGTERM, SIGHUP, SIGQUIT};
constexpr int kSignals[] = {SIGTERM, SIGHUP, SIGQUIT, SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
constexpr int kSignalCount = sizeof kSignals / sizeof kSignals[0];
struct sigaction previous[kSignalCount];

// A wedged driver can make a reset call block for good; the process still ends this long after
// its signal.
constexpr auto kResetDeadline = std::chrono::seconds(3);

std::once_flag installed;
std::atomic<bool> reset_started{false};
pid_t owner = 0;
int to_watcher[2] = {-1, -1};
int from_watcher[2] = {-1, -1};

bool asynchronous(int signal) {
  for (int s : kAsynchronous)
    if (s == signal) return true;
  return false;
}

void restore_previous(int signal) {
  for (int i = 0; i < kSignalCount; ++i)
    if (kSignals[i] == signal) sigaction(signal, &previous[i], nullptr);
}

void reset_all() {
  if (getpid() != owner) return;  // a forked child: the GPU is its parent's
  for (auto& slot : slots) {
    gpu::GpuLibrary* library = slot.library.exchange(nullptr);
    if (library == nullptr) continue;
    try {
      if (slot.clocks.load()) {
        library->reset_graphics_clock(slot.device);
        library->reset_memory_clock(slot.device);
      }
    } catch (...) {}
    try {
      if (unsigned before = slot.limit_before_mw.load(); before != 0) library->set_power_limit_mw(slot.device, before);
    } catch (...) {}
  }
}

// Ends the process with `signal` as if no handler had been installed.
void die_of(int signal) {
  restore_previous(signal);
  kill(getpid(), signal);
}

void watch() {
  for (;;) {
    int signal = 0;
    ssize_t got = read(to_watcher[0], &signal, sizeof signal);
    if (got < 0 && errno == EINTR) continue;
    if (got != static_cast<ssize_t>(sizeof signal)) return;
    reset_started.store(true);
    if (asynchronous(signal)) {
      std::thread([signal] {
        std::this_thread::sleep_for(kResetDeadline);
        die_of(signal);
      }).detach();
      reset_all();
      die_of(signal);
    } else {
      reset_all();
      char done = 1;
      [[maybe_unused]] ssize_t ignored = write(from_watcher[1], &done, 1);
    }
  }
}

void on_signal(int signal) {
  int saved_errno = errno;
  if (getpid() != owner) {
    restore_previous(signal);
    raise(signal);
    errno = saved_errno;
    return;
  }
  if (write(to_watcher[1], &signal, sizeof signal) == static_cast<ssize_t>(sizeof signal)) {
    if (asynchronous(signal)) {
      errno = saved_errno;
      return;  // the watcher resets and then ends the process
    }
    pollfd reply{from_watcher[0], POLLIN, 0};
    if (poll(&reply, 1, static_cast<int>(std::chrono::milliseconds(kResetDeadline).count())) > 0) {
      char done = 0;
      [[maybe_unused]] ssize_t ignored = read(from_watcher[0], &done, 1);
    }
  }
  restore_previous(signal);
  raise(signal);
  errno = saved_errno;
}

void install() {
  owner = getpid();
  std::atexit(reset_all);
  if (pipe2(to_watcher, O_CLOEXEC) != 0 || pipe2(from_watcher, O_CLOEXEC) != 0) return;  // reset at exit only
  std::thread(watch).detach();
  for (int i = 0; i < kSignalCount; ++i) {
    struct sigaction action {};
    action.sa_handler = on_signal;
    action.sa_flags = SA_RESTART;  // the host's system calls go on undisturbed while the watcher works
    sigemptyset(&action.sa_mask);
    sigaction(kSignals[i], &action, &previous[i]);
    // Leave handlers a host program (Python, say) chose for itself alone, except the defaults.
    if (previous[i].sa_handler != SIG_DFL) sigaction(kSignals[i], &previous[i], nullptr);
  }
}

}  // namespace

bool clock_reset_started() { return reset_started.load(std::memory_order_relaxed); }

namespace {

// The slot of (library, device), taking a free one when it has none; null when all are taken.
Slot* slot_of(gpu::GpuLibrary* library, unsigned device) {
  std::call_once(installed, install);
  for (auto& slot : slots)
    if (slot.library.load() == library && slot.device.load() == device) return &slot;
  for (auto& slot : slots) {
    gpu::GpuLibrary* expected = nullptr;
    if (slot.library.compare_exchange_strong(expected, library)) {
      slot.clocks.store(false);
      slot.limit_before_mw.store(0);
      slot.device.store(device);
      return &slot;
    }
  }
  return nullptr;
}

// Frees the slot once it has nothing left to reset.
void release_if_idle(Slot& slot, gpu::GpuLibrary* library) {
  if (slot.clocks.load() || slot.limit_before_mw.load() != 0) return;
  gpu::GpuLibrary* expected = library;
  slot.library.compare_exchange_strong(expected, nullptr);
}

Slot* registered(gpu::GpuLibrary* library, unsigned device) {
  for (auto& slot : slots)
    if (slot.library.load() == library && slot.device.load() == device) return &slot;
  return nullptr;
}

}  // namespace

void register_clock_reset(gpu::GpuLibrary* library, unsigned device) {
  if (Slot* slot = slot_of(library, device)) slot->clocks.store(true);
}

void unregister_clock_reset(gpu::GpuLibrary* library, unsigned device) {
  if (Slot* slot = registered(library, device)) {
    slot->clocks.store(false);
    release_if_idle(*slot, library);
  }
}

void remember_power_limit(gpu::GpuLibrary* library, unsigned device, unsigned before_mw) {
  if (Slot* slot = slot_of(library, device)) slot->limit_before_mw.store(before_mw);
}

void forget_power_limit(gpu::GpuLibrary* library, unsigned device) {
  if (Slot* slot = registered(library, device)) {
    slot->limit_before_mw.store(0);
    release_if_idle(*slot, library);
  }
}

}  // namespace perseus::client
