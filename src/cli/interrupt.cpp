#include "perseus/cli/interrupt.hpp"

#include <csignal>

namespace perseus::cli {

namespace {
std::atomic<bool> g_stop{false};
}  // namespace

extern "C" void perseus_request_stop(int signal_number) {
  g_stop.store(true);
  std::signal(signal_number, SIG_DFL);  // a second Ctrl-C ends the process at once
}

StopOnSignal::StopOnSignal() {
  g_stop.store(false);
  std::signal(SIGINT, perseus_request_stop);
  std::signal(SIGTERM, perseus_request_stop);
}

StopOnSignal::~StopOnSignal() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

const std::atomic<bool>* StopOnSignal::flag() const { return &g_stop; }

}  // namespace perseus::cli
