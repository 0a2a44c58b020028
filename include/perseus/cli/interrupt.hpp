#pragma once
// Ctrl-C (SIGINT) and SIGTERM for commands that stop cleanly: while a StopOnSignal lives, the first
// signal sets stop() (the work checks it and ends with a valid result), a second one ends the
// process at once. The handlers are put back when it goes.
#include <atomic>

namespace perseus::cli {

class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  const std::atomic<bool>* flag() const;
  bool stopped() const { return flag()->load(); }
};

}  // namespace perseus::cli
