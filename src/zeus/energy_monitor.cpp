#include "perseus/zeus/energy_monitor.hpp"

#include <fmt/format.h>

#include <chrono>
#include <stdexcept>

namespace perseus::zeus {

EnergyMonitor::EnergyMonitor(std::shared_ptr<gpu::GpuLibrary> gpus, std::vector<unsigned> gpu_indices, Clock clock,
                             double power_sample_interval_s)
    : gpus_(std::move(gpus)), indices_(std::move(gpu_indices)), clock_(std::move(clock)) {
  if (!gpus_) throw std::invalid_argument("EnergyMonitor needs a GPU library");
  unsigned count = gpus_->device_count();
  if (indices_.empty())
    for (unsigned i = 0; i < count; ++i) indices_.push_back(i);
  for (unsigned i : indices_)
    if (i >= count) throw std::invalid_argument(fmt::format("GPU index {}: this node has {} GPUs", i, count));
  if (!clock_) {
    auto start = std::chrono::steady_clock::now();
    clock_ = [start] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  }
  for (unsigned i : indices_) {
    try {
      (void)gpus_->total_energy_mj(i);
    } catch (const gpu::GpuError& e) {
      if (e.kind() != gpu::GpuErrorKind::not_supported) throw;
      integrated_j_[i] = 0;  // no counter (older GPUs): integrate power
      last_power_w_[i] = gpus_->power_usage_mw(i) / 1000.0;
    }
  }
  last_sample_ = clock_();
  if (!integrated_j_.empty() && power_sample_interval_s > 0) {
    sampler_ = std::thread([this, power_sample_interval_s] {
      while (!stop_) {
        std::this_thread::sleep_for(std::chrono::duration<double>(power_sample_interval_s));
        std::lock_guard lock(mutex_);
        sample_power();
      }
    });
  }
}

EnergyMonitor::~EnergyMonitor() {
  stop_ = true;
  if (sampler_.joinable()) sampler_.join();
}

bool EnergyMonitor::integrates_power(unsigned index) const { return integrated_j_.count(index) != 0; }

void EnergyMonitor::sample_power() {
  double now = clock_();
  double dt = now - last_sample_;
  last_sample_ = now;
  for (auto& [i, joules] : integrated_j_) {
    joules += last_power_w_[i] * dt;  // the power since the last sample
    try {
      last_power_w_[i] = gpus_->power_usage_mw(i) / 1000.0;
    } catch (const gpu::GpuError&) {
      // keep the last reading: a failed read must not break the measurement
    }
  }
}

std::map<unsigned, double> EnergyMonitor::read_energy_j() {
  if (!integrated_j_.empty()) sample_power();
  std::map<unsigned, double> out;
  for (unsigned i : indices_) {
    auto it = integrated_j_.find(i);
    out[i] = it != integrated_j_.end() ? it->second : gpus_->total_energy_mj(i) / 1000.0;
  }
  return out;
}

void EnergyMonitor::begin_window(const std::string& name) {
  std::lock_guard lock(mutex_);
  if (windows_.count(name) != 0) throw std::invalid_argument(fmt::format("measurement window '{}' is already open", name));
  Window w;
  w.energy_j = read_energy_j();
  w.start = clock_();
  windows_.emplace(name, std::move(w));
}

Measurement EnergyMonitor::end_window(const std::string& name, bool cancel) {
  std::lock_guard lock(mutex_);
  auto it = windows_.find(name);
  if (it == windows_.end()) throw std::invalid_argument(fmt::format("no measurement window '{}' is open", name));
  Window w = std::move(it->second);
  windows_.erase(it);
  Measurement m;
  if (cancel) return m;
  auto energy = read_energy_j();
  m.time = clock_() - w.start;
  for (unsigned i : indices_) {
    m.gpu_energy[i] = energy[i] - w.energy_j[i];
    m.total_energy += m.gpu_energy[i];
  }
  return m;
}

}  // namespace perseus::zeus
