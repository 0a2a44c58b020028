#pragma once
// Zeus's energy monitor (ZeusMonitor) on perseus's GPU layer: named measurement windows, nested
// or overlapping, each reporting its time and every GPU's energy. Energy comes from the GPU's
// cumulative counter; a GPU without one is integrated from its power, sampled in the background.
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "perseus/gpu/gpu.hpp"

namespace perseus::zeus {

struct Measurement {
  double time = 0;                            // seconds
  std::map<unsigned, double> gpu_energy;      // joules, by GPU index
  double total_energy = 0;                    // joules, all GPUs
};

class EnergyMonitor {
 public:
  using Clock = std::function<double()>;  // seconds from any fixed start

  // `gpu_indices`: empty for every GPU. `clock`: a steady clock unless given (tests simulate one).
  EnergyMonitor(std::shared_ptr<gpu::GpuLibrary> gpus, std::vector<unsigned> gpu_indices = {}, Clock clock = {},
                double power_sample_interval_s = 0.1);
  ~EnergyMonitor();
  EnergyMonitor(const EnergyMonitor&) = delete;
  EnergyMonitor& operator=(const EnergyMonitor&) = delete;

  const std::vector<unsigned>& gpu_indices() const { return indices_; }
  gpu::GpuLibrary& gpus() { return *gpus_; }
  // Whether a GPU's energy is integrated from power (it has no energy counter).
  bool integrates_power(unsigned index) const;

  // Throws std::invalid_argument when a window of that name is already open.
  void begin_window(const std::string& name);
  // Throws std::invalid_argument when no window of that name is open. `cancel`: close it
  // without measuring (the measurement is empty).
  Measurement end_window(const std::string& name, bool cancel = false);

 private:
  struct Window {
    double start = 0;
    std::map<unsigned, double> energy_j;
  };
  std::map<unsigned, double> read_energy_j();  // callers hold mutex_
  void sample_power();                         // callers hold mutex_

  std::shared_ptr<gpu::GpuLibrary> gpus_;
  std::vector<unsigned> indices_;
  Clock clock_;
  std::mutex mutex_;
  std::map<std::string, Window> windows_;
  // Integrated energy for GPUs without a counter: joules so far, and the last power sample.
  std::map<unsigned, double> integrated_j_, last_power_w_;
  double last_sample_ = 0;
  std::atomic<bool> stop_{false};
  std::thread sampler_;
};

}  // namespace perseus::zeus
