// A fake libnvidia-ml for tests and demos: simulated GPUs that export the NVML functions perseus
// uses. Every call is appended to $PERSEUS_FAKE_NVML_LOG (one line: nanoseconds since load,
// function, device, arguments, result), and the energy counter advances with wall time at a
// power that depends on the locked clock, so tests can check which clocks were set when and
// what was measured.
//
// Settings (environment, read at nvmlInit):
//   PERSEUS_FAKE_NVML_GPUS        number of GPUs (default 1)
//   PERSEUS_FAKE_NVML_LOG         call log path; "%p" becomes the process id
//   PERSEUS_FAKE_NVML_DENY        1: every set/reset call fails with NO_PERMISSION
//   PERSEUS_FAKE_NVML_LATENCY_US  sleep this long in every set/reset call, like a real driver
//   PERSEUS_FAKE_NVML_CLOCK_LATENCY_US  a locked graphics clock takes effect this long after the
//                                 call (GetClockInfo and the power drawn follow it then), as real
//                                 GPUs apply a locked clock some time after the call
//   PERSEUS_FAKE_NVML_LOCKED_US   hold the library's lock this long in every set/reset call (a
//                                 driver call in progress), so a signal handler that called
//                                 NVML on that thread would deadlock
//   PERSEUS_FAKE_NVML_LOG_READS   1: log energy-counter reads too (value in mJ), so a test can tell
//                                 which clock every measured instruction ran at
//   PERSEUS_FAKE_NVML_STATE       a file holding what the driver keeps across processes, as a real
//                                 one does: each GPU's locked clocks and power limit, one line per
//                                 GPU, "gpu I graphics MHZ memory MHZ power_limit_mw MW" (0 MHz: not
//                                 locked). Read before every call that reads or sets them, written
//                                 after every change: a test sets an administrator's power limit
//                                 in one process and checks it in another
//   PERSEUS_FAKE_NVML_POWER_W     a constant power in W instead of the clock-dependent one (a floor that
//                                 a simulation adds its own energy on top of, see below)
//   PERSEUS_FAKE_NVML_REPLAY      power and energy from a recorded trace instead (replay.hpp)
//   PERSEUS_FAKE_NVML_DEFAULT_LIMIT_W  the default power limit the driver reports (default: the top
//                                 of the range, 400 W, which is also every GPU's limit at start)
//
// Beyond NVML, for a simulation that models what its GPUs compute (examples/pytorch_pipelining):
// perseusFakeNvmlAddEnergy(index, joules) adds energy to a GPU's counter.
// The functions only NVIDIA's Python bindings call (for Zeus) are in fake_nvml_pynvml.cpp.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "perseus/gpu/nvml_api.hpp"
#include "replay.hpp"

namespace {

namespace nv = perseus::gpu::nvml;
using Clock = std::chrono::steady_clock;

constexpr unsigned kMaxGraphics = 1410, kMinGraphics = 210, kGraphicsStep = 15;
constexpr unsigned kMemoryClocks[] = {1593, 1215};
constexpr unsigned kMinLimit = 150000, kMaxLimit = 400000;

struct FakeGpu {
  double constant_power_w = -1;  // >= 0: the power whatever the clock (PERSEUS_FAKE_NVML_POWER_W)
  unsigned locked_graphics = 0;  // 0: not locked, runs at the top clock
  struct Pending {
    Clock::time_point at;
    unsigned clock = 0;
  };
  std::vector<Pending> pending;  // locked clocks not in effect yet, in order
  unsigned locked_memory = 0;
  unsigned power_limit = kMaxLimit;
  double energy_mj = 0;
  Clock::time_point last = Clock::now();

  // Static power plus a cubic dynamic part: 300 W at the top clock.
  static double power_at(unsigned clock) {
    double ratio = double(clock) / kMaxGraphics;
    return 60.0 + 240.0 * ratio * ratio * ratio;
  }
  // The SM clock runs at its lock (or the top), capped by the power limit at the highest clock
  // whose power fits, as the driver's power capping does: time and energy respond to limits.
  unsigned graphics() const {
    unsigned clock = locked_graphics ? locked_graphics : kMaxGraphics;
    while (clock > kMinGraphics && power_at(clock) > power_limit / 1000.0) clock -= kGraphicsStep;
    return clock;
  }
  double power_w() const { return constant_power_w >= 0 ? constant_power_w : power_at(graphics()); }
  // Energy up to now, each pending clock taking effect at its time.
  void advance() {
    auto now = Clock::now();
    std::size_t applied = 0;
    for (; applied < pending.size() && pending[applied].at <= now; ++applied) {
      energy_mj += power_w() * std::chrono::duration<double>(pending[applied].at - last).count() * 1000.0;
      last = pending[applied].at;
      locked_graphics = pending[applied].clock;
    }
    pending.erase(pending.begin(), pending.begin() + static_cast<long>(applied));
    energy_mj += power_w() * std::chrono::duration<double>(now - last).count() * 1000.0;
    last = now;
  }
};

struct State {
  std::mutex mutex;
  bool initialized = false;
  int init_count = 0;
  std::vector<FakeGpu> gpus;
  std::FILE* log = nullptr;
  bool deny = false;
  long latency_us = 0;
  long locked_us = 0;
  long clock_latency_us = 0;
  unsigned default_limit = kMaxLimit;
  bool log_reads = false;
  std::string state_file;  // PERSEUS_FAKE_NVML_STATE; "" keeps the state in this process only
  Clock::time_point start = Clock::now();
};

// The driver's state shared between processes (PERSEUS_FAKE_NVML_STATE): lines as documented above.
void load_shared(State& s) {
  if (s.state_file.empty()) return;
  std::FILE* in = std::fopen(s.state_file.c_str(), "r");
  if (in == nullptr) return;
  unsigned index = 0, graphics = 0, memory = 0, limit = 0;
  while (std::fscanf(in, " gpu %u graphics %u memory %u power_limit_mw %u", &index, &graphics, &memory, &limit) == 4)
    if (index < s.gpus.size()) {
      s.gpus[index].locked_graphics = graphics;
      s.gpus[index].locked_memory = memory;
      s.gpus[index].power_limit = limit;
    }
  std::fclose(in);
}

void save_shared(const State& s) {
  if (s.state_file.empty()) return;
  std::string temp = s.state_file + ".tmp" + std::to_string(getpid());
  std::FILE* out = std::fopen(temp.c_str(), "w");
  if (out == nullptr) return;
  for (std::size_t i = 0; i < s.gpus.size(); ++i)
    std::fprintf(out, "gpu %zu graphics %u memory %u power_limit_mw %u\n", i, s.gpus[i].locked_graphics,
                 s.gpus[i].locked_memory, s.gpus[i].power_limit);
  std::fclose(out);
  std::rename(temp.c_str(), s.state_file.c_str());
}

State& state() {
  static State s;
  return s;
}

std::string log_path(const char* pattern) {
  std::string out(pattern);
  auto at = out.find("%p");
  if (at != std::string::npos) out.replace(at, 2, std::to_string(getpid()));
  return out;
}

void record(State& s, const char* fn, long device, const std::string& args, nvmlReturn_t result) {
  if (s.log == nullptr) return;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - s.start).count();
  std::fprintf(s.log, "%lld %s %ld %s -> %d\n", static_cast<long long>(ns), fn, device,
               args.empty() ? "-" : args.c_str(), result);
  std::fflush(s.log);
}

// Looks up the device; nullptr (and INVALID_ARGUMENT) for a bad handle.
FakeGpu* gpu_of(State& s, nvmlDevice_t device, long* index) {
  auto raw = reinterpret_cast<std::uintptr_t>(device);
  if (raw == 0 || raw > s.gpus.size()) return nullptr;
  *index = static_cast<long>(raw - 1);
  return &s.gpus[raw - 1];
}

bool valid_graphics(unsigned mhz) {
  return mhz >= kMinGraphics && mhz <= kMaxGraphics && (kMaxGraphics - mhz) % kGraphicsStep == 0;
}

// Runs a setter: checks init, device and permission, sleeps the configured latency, logs.
template <typename Body>
nvmlReturn_t setter(const char* fn, nvmlDevice_t device, const std::string& args, Body body) {
  State& s = state();
  long latency = 0;
  {
    std::lock_guard lock(s.mutex);
    latency = s.latency_us;
  }
  if (latency > 0) std::this_thread::sleep_for(std::chrono::microseconds(latency));
  std::lock_guard lock(s.mutex);
  long index = -1;
  nvmlReturn_t result = nv::kSuccess;
  FakeGpu* gpu = s.initialized ? gpu_of(s, device, &index) : nullptr;
  if (!s.initialized) result = nv::kUninitialized;
  else if (gpu == nullptr) result = nv::kInvalidArgument;
  else if (s.deny) result = nv::kNoPermission;
  else {
    load_shared(s);
    gpu->advance();
    result = body(*gpu);
    if (result == nv::kSuccess) save_shared(s);
  }
  if (s.locked_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(s.locked_us));
  record(s, fn, index, args, result);
  return result;
}

template <typename Body>
nvmlReturn_t getter(const char* fn, nvmlDevice_t device, Body body, bool log_it = false) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  log_it = log_it || (s.log_reads && std::strcmp(fn, "nvmlDeviceGetTotalEnergyConsumption") == 0);
  long index = -1;
  FakeGpu* gpu = s.initialized ? gpu_of(s, device, &index) : nullptr;
  nvmlReturn_t result = !s.initialized ? nv::kUninitialized : gpu == nullptr ? nv::kInvalidArgument : nv::kSuccess;
  std::string args;
  if (result == nv::kSuccess) {
    load_shared(s);
    gpu->advance();
    result = body(*gpu, args);
  }
  if (log_it) record(s, fn, index, args, result);
  return result;
}

nvmlReturn_t copy_list(const std::vector<unsigned>& values, unsigned* count, unsigned* out) {
  if (count == nullptr) return nv::kInvalidArgument;
  if (*count < values.size() || out == nullptr) {
    *count = static_cast<unsigned>(values.size());
    return nv::kInsufficientSize;
  }
  std::copy(values.begin(), values.end(), out);
  *count = static_cast<unsigned>(values.size());
  return nv::kSuccess;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.init_count++ == 0) {
    const char* n = std::getenv("PERSEUS_FAKE_NVML_GPUS");
    int count = n != nullptr ? std::atoi(n) : 1;
    FakeGpu gpu;
    const char* power = std::getenv("PERSEUS_FAKE_NVML_POWER_W");
    if (power != nullptr && *power != '\0') gpu.constant_power_w = std::max(0.0, std::atof(power));
    s.gpus.assign(static_cast<std::size_t>(std::max(count, 0)), gpu);
    const char* path = std::getenv("PERSEUS_FAKE_NVML_LOG");
    if (path != nullptr && *path != '\0' && s.log == nullptr) s.log = std::fopen(log_path(path).c_str(), "a");
    const char* deny = std::getenv("PERSEUS_FAKE_NVML_DENY");
    s.deny = deny != nullptr && std::strcmp(deny, "1") == 0;
    const char* log_reads = std::getenv("PERSEUS_FAKE_NVML_LOG_READS");
    s.log_reads = log_reads != nullptr && std::strcmp(log_reads, "1") == 0;
    const char* latency = std::getenv("PERSEUS_FAKE_NVML_LATENCY_US");
    s.latency_us = latency != nullptr ? std::atol(latency) : 0;
    const char* clock_latency = std::getenv("PERSEUS_FAKE_NVML_CLOCK_LATENCY_US");
    s.clock_latency_us = clock_latency != nullptr ? std::atol(clock_latency) : 0;
    const char* locked = std::getenv("PERSEUS_FAKE_NVML_LOCKED_US");
    s.locked_us = locked != nullptr ? std::atol(locked) : 0;
    const char* default_limit = std::getenv("PERSEUS_FAKE_NVML_DEFAULT_LIMIT_W");
    s.default_limit = default_limit != nullptr && *default_limit != '\0'
                          ? std::clamp(static_cast<unsigned>(std::atol(default_limit)) * 1000, kMinLimit, kMaxLimit)
                          : kMaxLimit;
    const char* shared = std::getenv("PERSEUS_FAKE_NVML_STATE");
    s.state_file = shared != nullptr ? shared : "";
    load_shared(s);
    s.initialized = true;
  }
  record(s, "nvmlInit", -1, "", nv::kSuccess);
  return nv::kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.initialized) return nv::kUninitialized;
  record(s, "nvmlShutdown", -1, "", nv::kSuccess);
  if (--s.init_count == 0) s.initialized = false;
  return nv::kSuccess;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case nv::kSuccess:
      return "Success";
    case nv::kUninitialized:
      return "Uninitialized";
    case nv::kInvalidArgument:
      return "Invalid Argument";
    case nv::kNotSupported:
      return "Not Supported";
    case nv::kNoPermission:
      return "Insufficient Permissions";
    case nv::kNotFound:
      return "Not Found";
    case nv::kInsufficientSize:
      return "Insufficient Size";
    default:
      return "Unknown Error";
  }
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.initialized) return nv::kUninitialized;
  if (count == nullptr) return nv::kInvalidArgument;
  *count = static_cast<unsigned>(s.gpus.size());
  return nv::kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index,
                                                                                  nvmlDevice_t* device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.initialized) return nv::kUninitialized;
  if (device == nullptr || index >= s.gpus.size()) return nv::kInvalidArgument;
  *device = reinterpret_cast<nvmlDevice_t>(static_cast<std::uintptr_t>(index) + 1);
  return nv::kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                                                      unsigned length) {
  return getter("nvmlDeviceGetName", device, [&](FakeGpu&, std::string&) {
    const char* text = "Perseus Simulated GPU";
    if (name == nullptr || length <= std::strlen(text)) return nv::kInsufficientSize;
    std::strcpy(name, text);
    return nv::kSuccess;
  });
}

// A fixed UUID per index, shaped like NVML's: "GPU-" and 8-4-4-4-12 hex digits.
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                                                      unsigned length) {
  return getter("nvmlDeviceGetUUID", device, [&](FakeGpu&, std::string&) {
    long index = -1;
    gpu_of(state(), device, &index);
    char text[64];
    std::snprintf(text, sizeof text, "GPU-fa4e0000-0000-4000-8000-%012lx", static_cast<unsigned long>(index));
    if (uuid == nullptr || length <= std::strlen(text)) return nv::kInsufficientSize;
    std::strcpy(uuid, text);
    return nv::kSuccess;
  });
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device,
                                                                                       unsigned* count,
                                                                                       unsigned* clocks) {
  return getter("nvmlDeviceGetSupportedMemoryClocks", device, [&](FakeGpu&, std::string&) {
    return copy_list(std::vector<unsigned>(std::begin(kMemoryClocks), std::end(kMemoryClocks)), count, clocks);
  });
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device,
                                                                                         unsigned memory,
                                                                                         unsigned* count,
                                                                                         unsigned* clocks) {
  return getter("nvmlDeviceGetSupportedGraphicsClocks", device, [&](FakeGpu&, std::string&) {
    if (std::find(std::begin(kMemoryClocks), std::end(kMemoryClocks), memory) == std::end(kMemoryClocks))
      return nv::kNotFound;
    std::vector<unsigned> values;
    for (unsigned f = kMaxGraphics; f >= kMinGraphics; f -= kGraphicsStep) values.push_back(f);
    return copy_list(values, count, clocks);
  });
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device, unsigned min_mhz,
                                                                                 unsigned max_mhz) {
  return setter("nvmlDeviceSetGpuLockedClocks", device, std::to_string(min_mhz) + " " + std::to_string(max_mhz),
                [&](FakeGpu& gpu) {
                  if (min_mhz != max_mhz || !valid_graphics(max_mhz)) return nv::kInvalidArgument;
                  const long delay = state().clock_latency_us;
                  if (delay <= 0) gpu.locked_graphics = max_mhz;
                  else gpu.pending.push_back({Clock::now() + std::chrono::microseconds(delay), max_mhz});
                  return nv::kSuccess;
                });
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device) {
  return setter("nvmlDeviceResetGpuLockedClocks", device, "", [](FakeGpu& gpu) {
    gpu.locked_graphics = 0;
    gpu.pending.clear();
    return nv::kSuccess;
  });
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceSetMemoryLockedClocks(nvmlDevice_t device,
                                                                                    unsigned min_mhz,
                                                                                    unsigned max_mhz) {
  return setter("nvmlDeviceSetMemoryLockedClocks", device, std::to_string(min_mhz) + " " + std::to_string(max_mhz),
                [&](FakeGpu& gpu) {
                  if (std::find(std::begin(kMemoryClocks), std::end(kMemoryClocks), max_mhz) == std::end(kMemoryClocks))
                    return nv::kInvalidArgument;
                  gpu.locked_memory = max_mhz;
                  return nv::kSuccess;
                });
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceResetMemoryLockedClocks(nvmlDevice_t device) {
  return setter("nvmlDeviceResetMemoryLockedClocks", device, "", [](FakeGpu& gpu) {
    gpu.locked_memory = 0;
    return nv::kSuccess;
  });
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device,
                                                                                      unsigned* limit) {
  return getter("nvmlDeviceGetPowerManagementLimit", device, [&](FakeGpu& gpu, std::string&) {
    if (limit == nullptr) return nv::kInvalidArgument;
    *limit = gpu.power_limit;
    return nv::kSuccess;
  });
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device,
                                                                                                 unsigned* min_limit,
                                                                                                 unsigned* max_limit) {
  return getter("nvmlDeviceGetPowerManagementLimitConstraints", device, [&](FakeGpu&, std::string&) {
    if (min_limit == nullptr || max_limit == nullptr) return nv::kInvalidArgument;
    *min_limit = kMinLimit;
    *max_limit = kMaxLimit;
    return nv::kSuccess;
  });
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device,
                                                                                             unsigned* limit) {
  return getter("nvmlDeviceGetPowerManagementDefaultLimit", device, [&](FakeGpu&, std::string&) {
    if (limit == nullptr) return nv::kInvalidArgument;
    *limit = state().default_limit;
    return nv::kSuccess;
  });
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device,
                                                                                      unsigned limit) {
  return setter("nvmlDeviceSetPowerManagementLimit", device, std::to_string(limit), [&](FakeGpu& gpu) {
    if (limit < kMinLimit || limit > kMaxLimit) return nv::kInvalidArgument;
    gpu.power_limit = limit;
    return nv::kSuccess;
  });
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                                                        unsigned long long* energy) {
  return getter("nvmlDeviceGetTotalEnergyConsumption", device, [&](FakeGpu& gpu, std::string& args) {
    if (energy == nullptr) return nv::kInvalidArgument;
    const auto replay = perseus::gpu::fake::replayed(static_cast<long>(reinterpret_cast<std::uintptr_t>(device)) - 1);
    *energy = static_cast<unsigned long long>(replay ? replay->energy_mj : gpu.energy_mj);
    args = std::to_string(*energy);
    return nv::kSuccess;
  });
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned* power) {
  return getter("nvmlDeviceGetPowerUsage", device, [&](FakeGpu& gpu, std::string&) {
    if (power == nullptr) return nv::kInvalidArgument;
    const auto replay = perseus::gpu::fake::replayed(static_cast<long>(reinterpret_cast<std::uintptr_t>(device)) - 1);
    *power = static_cast<unsigned>((replay ? replay->power_w : gpu.power_w()) * 1000.0);
    return nv::kSuccess;
  });
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                                           unsigned* clock) {
  return getter("nvmlDeviceGetClockInfo", device, [&](FakeGpu& gpu, std::string&) {
    if (clock == nullptr) return nv::kInvalidArgument;
    if (type == nv::kClockMem) *clock = gpu.locked_memory ? gpu.locked_memory : kMemoryClocks[0];
    else *clock = gpu.graphics();
    return nv::kSuccess;
  });
}

// Not NVML: energy a simulation says GPU `index` used (on top of the power it draws anyway).
__attribute__((visibility("default"))) nvmlReturn_t perseusFakeNvmlAddEnergy(unsigned index, double joules) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  nvmlReturn_t result = nv::kSuccess;
  if (!s.initialized) result = nv::kUninitialized;
  else if (index >= s.gpus.size() || !(joules >= 0)) result = nv::kInvalidArgument;
  else {
    s.gpus[index].advance();
    s.gpus[index].energy_mj += joules * 1000.0;
  }
  record(s, "perseusFakeNvmlAddEnergy", index, std::to_string(joules), result);
  return result;
}

}  // extern "C"
