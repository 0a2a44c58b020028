#pragma once
// Zeus's energy monitor (ZeusMonitor) on perseus's GPU layer: named measurement windows, nested
// or overlapping, each reporting its time, every GPU's energy and, where RAPL is readable, every
// CPU package's and its DRAM's. GPU energy comes from the GPU's cumulative counter; a GPU without
// one is integrated from its power, sampled in the background. GPU indices are those of the
// library it is given: wrap it with gpu::cuda_numbered for CUDA's numbering.
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "perseus/cpu/rapl.hpp"
#include "perseus/gpu/gpu.hpp"

namespace perseus::zeus {

struct Measurement {
  double time = 0;                                        // seconds
  std::map<unsigned, double> gpu_energy;                  // joules, by GPU index
  std::optional<std::map<unsigned, double>> cpu_energy;   // joules by CPU package; none without RAPL
  std::optional<std::map<unsigned, double>> dram_energy;  // joules by CPU package; none without DRAM zones
  double total_energy = 0;                                // joules, all GPUs (as Zeus counts it)
};

struct EnergyMonitorOptions {
  using Clock = std::function<double()>;             // seconds from any fixed start
  std::optional<std::vector<unsigned>> gpu_indices;  // nullopt: every GPU of the library
  std::optional<std::vector<unsigned>> cpu_indices;  // nullopt: every package `rapl` has
  std::shared_ptr<cpu::RaplCounters> rapl;           // null: no CPU energy
  // A window whose GPU energy reads zero (shorter than the counter's update period) gets the
  // GPU's power at its end times its length instead.
  bool approx_instant_energy = false;
  Clock clock;                           // a steady clock unless given (tests simulate one)
  double power_sample_interval_s = 0.1;  // GPUs without an energy counter
  double rapl_sample_interval_s = 10;    // keeps RAPL counter wrap-arounds apart
};

class EnergyMonitor {
 public:
  using Clock = EnergyMonitorOptions::Clock;

  EnergyMonitor(std::shared_ptr<gpu::GpuLibrary> gpus, EnergyMonitorOptions options);
  // `gpu_indices`: empty for every GPU.
  EnergyMonitor(std::shared_ptr<gpu::GpuLibrary> gpus, std::vector<unsigned> gpu_indices = {}, Clock clock = {},
                double power_sample_interval_s = 0.1);
  ~EnergyMonitor();
  EnergyMonitor(const EnergyMonitor&) = delete;
  EnergyMonitor& operator=(const EnergyMonitor&) = delete;

  const std::vector<unsigned>& gpu_indices() const { return indices_; }
  const std::vector<unsigned>& cpu_indices() const { return cpu_indices_; }
  gpu::GpuLibrary& gpus() { return *gpus_; }
  // Whether a GPU's energy is integrated from power (it has no energy counter).
  bool integrates_power(unsigned index) const;

  // Throws std::invalid_argument when a window of that name is already open, unless `restart`:
  // then that window starts over.
  void begin_window(const std::string& name, bool restart = false);
  // Throws std::invalid_argument when no window of that name is open. `cancel`: close it
  // without measuring (time and every energy zero).
  Measurement end_window(const std::string& name, bool cancel = false);

 private:
  struct Window {
    double start = 0;
    std::map<unsigned, double> energy_j;
    cpu::RaplCounters::Energy rapl;
  };
  std::map<unsigned, double> read_energy_j();  // callers hold mutex_
  void sample_power();                         // callers hold mutex_
  void run_sampler(double power_interval_s, double rapl_interval_s);

  std::shared_ptr<gpu::GpuLibrary> gpus_;
  std::vector<unsigned> indices_, cpu_indices_;
  std::shared_ptr<cpu::RaplCounters> rapl_;
  bool approx_instant_energy_ = false;
  Clock clock_;
  std::mutex mutex_;
  std::map<std::string, Window> windows_;
  // Integrated energy for GPUs without a counter: joules so far, and the last power sample.
  std::map<unsigned, double> integrated_j_, last_power_w_;
  double last_sample_ = 0;
  bool stop_ = false;  // guarded by mutex_
  std::condition_variable wake_;
  std::thread sampler_;
};

}  // namespace perseus::zeus
