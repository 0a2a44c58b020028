#pragma once
// A recorded power trace the fake NVML can replay instead of its clock model, so that every
// process that loads it (a training process, Zeus's power-polling children, a `perseus gpud`)
// sees the same GPU at the same wall-clock instant: the trace is keyed on absolute time.
//
// PERSEUS_FAKE_NVML_REPLAY names a CSV file `time,gpu,power` (a header line, then rows): from
// `time` (seconds since 1970, Python's time.time()) GPU `gpu` draws `power` W until its next row;
// before its first row, the first row's power. Its energy counter is the trace integrated from its
// first row. GPUs the trace does not name follow the clock model. The file is read at the first
// reading that finds it, so a test can start its processes first and write the trace (to another
// name, then renamed into place) once they are ready; until then every GPU follows the model.
#include <optional>

namespace perseus::gpu::fake {

struct ReplayedReading {
  double power_w = 0;
  double energy_mj = 0;
};

// GPU `index`'s power now and energy drawn since its first row; nullopt when no trace covers it.
// A malformed trace is reported once on stderr and ignored.
std::optional<ReplayedReading> replayed(long index);

}  // namespace perseus::gpu::fake
