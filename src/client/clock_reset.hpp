#pragma once
// Clocks must not stay locked when a training process dies: every client registers its GPU
// here, and the registry resets them at exit and on fatal signals (best effort: NVML is not
// async-signal-safe, but a process about to die has nothing better to do).
#include "perseus/gpu/gpu.hpp"

namespace perseus::client {

void register_clock_reset(gpu::GpuLibrary* library, unsigned device);
void unregister_clock_reset(gpu::GpuLibrary* library, unsigned device);

}  // namespace perseus::client
