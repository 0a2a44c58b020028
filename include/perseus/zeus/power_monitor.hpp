#pragma once
// Zeus's PowerMonitor: every GPU's power sampled on a thread of its own, kept as a timeline of
// (wall-clock time, watts) that windows of any span are read from and integrated over.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "perseus/gpu/gpu.hpp"

namespace perseus::zeus {

struct PowerSample {
  double time = 0;  // seconds since the Unix epoch (Python's time.time())
  double watts = 0;
};

class PowerMonitor {
 public:
  using Clock = std::function<double()>;

  // Samples `gpu_indices` of `gpus` every `period_s` (0: only when sample() is called) keeping at
  // most `max_samples` per GPU (0: all). `clock`: the wall clock unless given.
  PowerMonitor(std::shared_ptr<gpu::GpuLibrary> gpus, std::vector<unsigned> gpu_indices, double period_s,
               std::size_t max_samples = 0, Clock clock = {});
  ~PowerMonitor();
  PowerMonitor(const PowerMonitor&) = delete;
  PowerMonitor& operator=(const PowerMonitor&) = delete;

  const std::vector<unsigned>& gpu_indices() const { return indices_; }
  // Reads every GPU's power once (the thread does so every period).
  void sample();
  // Stops the sampling thread; the timeline stays readable.
  void stop();
  // A GPU's samples with start <= time <= end, oldest first.
  std::vector<PowerSample> timeline(unsigned gpu, std::optional<double> start = {},
                                    std::optional<double> end = {}) const;
  // Joules between `start` and `end` per GPU: the timeline linearly interpolated, held at its
  // first and last sample beyond them. nullopt while a GPU has no sample.
  std::optional<std::map<unsigned, double>> energy(double start, double end) const;

 private:
  std::shared_ptr<gpu::GpuLibrary> gpus_;
  std::vector<unsigned> indices_;
  std::size_t max_samples_;
  Clock clock_;
  mutable std::mutex mutex_;
  std::map<unsigned, std::deque<PowerSample>> samples_;
  bool stop_ = false;
  std::condition_variable wake_;
  std::thread sampler_;
};

// Joules under a timeline between `start` and `end` (linear between samples, held beyond them).
double integrate(const std::vector<PowerSample>& timeline, double start, double end);

}  // namespace perseus::zeus
