#pragma once
// Clocks must not stay locked, nor power limits lowered, when a training process dies: every client
// registers its GPU here, and the registry resets them at exit and on fatal signals.
//
// A signal handler must not call NVML itself: NVML takes locks, and a handler that runs on a
// thread holding one of them would hang the training process for good. The handler only hands
// the signal to a watcher thread (write(2) on a pipe is async-signal-safe); the watcher resets
// the clocks from an ordinary context and then lets the signal take its course. A process forked
// from the one that registered (a data-loader worker, say) never resets its parent's GPU.
#include "perseus/gpu/gpu.hpp"

namespace perseus::client {

void register_clock_reset(gpu::GpuLibrary* library, unsigned device);
void unregister_clock_reset(gpu::GpuLibrary* library, unsigned device);
// A power limit the client set (a power budget's backstop): `before_mw`, the limit the GPU had, is
// set again at exit and on fatal signals, until forget_power_limit (the client restored it itself).
void remember_power_limit(gpu::GpuLibrary* library, unsigned device, unsigned before_mw);
void forget_power_limit(gpu::GpuLibrary* library, unsigned device);

// True once a fatal signal has started the reset: clients stop locking clocks from then on, so
// none is locked again between the reset and the process's end.
bool clock_reset_started();

}  // namespace perseus::client
