#include "replay.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace perseus::gpu::fake {

namespace {

struct Step {
  double time = 0;   // seconds since 1970
  double power = 0;  // W from `time` on
};

struct Trace {
  std::mutex mutex;
  bool settled = false;                     // read (or found malformed): never looked at again
  std::map<long, std::vector<Step>> steps;  // per GPU, by time
};

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// Parses `time,gpu,power` rows after a header; empty (and one message) on any error.
std::map<long, std::vector<Step>> read_trace(const char* path) {
  std::map<long, std::vector<Step>> steps;
  std::ifstream in(path);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (number == 1 || line.empty()) continue;  // the header
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream fields(line);
    Step step;
    long gpu = -1;
    if (!(fields >> step.time >> gpu >> step.power) || gpu < 0 || step.power < 0) {
      std::fprintf(stderr, "fake NVML: %s line %d: expected `time,gpu,power`; not replaying\n", path, number);
      return {};
    }
    steps[gpu].push_back(step);
  }
  for (auto& [gpu, list] : steps)
    std::stable_sort(list.begin(), list.end(), [](const Step& a, const Step& b) { return a.time < b.time; });
  return steps;
}

// The trace's steps for `index`, read from the file the first time it is there.
std::vector<Step> steps_of(long index) {
  static Trace trace;
  const char* path = std::getenv("PERSEUS_FAKE_NVML_REPLAY");
  if (path == nullptr || *path == '\0') return {};
  std::lock_guard lock(trace.mutex);
  struct stat info {};
  if (!trace.settled && ::stat(path, &info) == 0) {
    trace.steps = read_trace(path);
    trace.settled = true;
  }
  auto found = trace.steps.find(index);
  return found == trace.steps.end() ? std::vector<Step>{} : found->second;
}

}  // namespace

std::optional<ReplayedReading> replayed(long index) {
  const std::vector<Step> steps = steps_of(index);
  if (steps.empty()) return std::nullopt;
  const double at = now_s();
  ReplayedReading out;
  out.power_w = steps.front().power;
  double joules = 0;
  for (std::size_t i = 0; i < steps.size() && steps[i].time <= at; ++i) {
    out.power_w = steps[i].power;
    const double until = i + 1 < steps.size() ? std::min(steps[i + 1].time, at) : at;
    if (until > steps[i].time) joules += steps[i].power * (until - steps[i].time);
  }
  out.energy_mj = joules * 1000.0;
  return out;
}

}  // namespace perseus::gpu::fake
