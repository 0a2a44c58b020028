#include "perseus/zeus/energy_monitor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace perseus::zeus {

EnergyMonitor::EnergyMonitor(std::shared_ptr<gpu::GpuLibrary> gpus, std::vector<unsigned> gpu_indices, Clock clock,
                             double power_sample_interval_s)
    : EnergyMonitor(std::move(gpus), [&] {
        EnergyMonitorOptions o;
        if (!gpu_indices.empty()) o.gpu_indices = std::move(gpu_indices);
        o.clock = std::move(clock);
        o.power_sample_interval_s = power_sample_interval_s;
        return o;
      }()) {}

EnergyMonitor::EnergyMonitor(std::shared_ptr<gpu::GpuLibrary> gpus, EnergyMonitorOptions options)
    : gpus_(std::move(gpus)),
      rapl_(std::move(options.rapl)),
      approx_instant_energy_(options.approx_instant_energy),
      clock_(std::move(options.clock)) {
  if (!gpus_) throw std::invalid_argument("EnergyMonitor needs a GPU library");
  unsigned count = gpus_->device_count();
  if (options.gpu_indices) {
    indices_ = *options.gpu_indices;
    for (unsigned i : indices_)
      if (i >= count)
        throw std::invalid_argument(
            fmt::format("GPU index {}: {} GPU{} visible", i, count, count == 1 ? " is" : "s are"));
  } else {
    for (unsigned i = 0; i < count; ++i) indices_.push_back(i);
  }
  if (rapl_) {
    auto packages = rapl_->packages();
    cpu_indices_ = options.cpu_indices.value_or(packages);
    for (unsigned i : cpu_indices_)
      if (std::find(packages.begin(), packages.end(), i) == packages.end())
        throw std::invalid_argument(fmt::format("CPU index {}: no RAPL package zone intel-rapl:{}", i, i));
  } else if (options.cpu_indices && !options.cpu_indices->empty()) {
    throw std::invalid_argument("CPU indices given, but there are no RAPL readings");
  }
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
  double power_interval = integrated_j_.empty() ? 0 : options.power_sample_interval_s;
  double rapl_interval = rapl_ && !cpu_indices_.empty() ? options.rapl_sample_interval_s : 0;
  if (power_interval > 0 || rapl_interval > 0)
    sampler_ = std::thread([this, power_interval, rapl_interval] { run_sampler(power_interval, rapl_interval); });
}

EnergyMonitor::~EnergyMonitor() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

// Power samples for GPUs without a counter; RAPL reads often enough that no counter wraps twice
// between two reads.
void EnergyMonitor::run_sampler(double power_interval_s, double rapl_interval_s) {
  using Seconds = std::chrono::duration<double>;
  auto now = std::chrono::steady_clock::now();
  auto next_power = now + Seconds(power_interval_s), next_rapl = now + Seconds(rapl_interval_s);
  std::unique_lock lock(mutex_);
  while (!stop_) {
    auto next = power_interval_s > 0 && (rapl_interval_s <= 0 || next_power < next_rapl) ? next_power : next_rapl;
    wake_.wait_until(lock, next, [&] { return stop_; });
    if (stop_) break;
    now = std::chrono::steady_clock::now();
    if (power_interval_s > 0 && now >= next_power) {
      sample_power();
      next_power = now + Seconds(power_interval_s);
    }
    if (rapl_interval_s > 0 && now >= next_rapl) {
      try {
        (void)rapl_->read();
      } catch (const std::exception&) {
        // a failed read is retried at the next; a window's own reads report errors
      }
      next_rapl = now + Seconds(rapl_interval_s);
    }
  }
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

void EnergyMonitor::begin_window(const std::string& name, bool restart) {
  std::lock_guard lock(mutex_);
  if (windows_.count(name) != 0 && !restart)
    throw std::invalid_argument(fmt::format("measurement window '{}' is already open", name));
  Window w;
  w.energy_j = read_energy_j();
  if (rapl_ && !cpu_indices_.empty()) w.rapl = rapl_->read();
  w.start = clock_();
  windows_.insert_or_assign(name, std::move(w));
}

Measurement EnergyMonitor::end_window(const std::string& name, bool cancel) {
  std::lock_guard lock(mutex_);
  auto it = windows_.find(name);
  if (it == windows_.end()) throw std::invalid_argument(fmt::format("no measurement window '{}' is open", name));
  Window w = std::move(it->second);
  windows_.erase(it);
  Measurement m;
  if (cancel) {
    for (unsigned i : indices_) m.gpu_energy[i] = 0;
    if (!cpu_indices_.empty()) {
      m.cpu_energy.emplace();
      for (unsigned c : cpu_indices_) (*m.cpu_energy)[c] = 0;
    }
    return m;
  }
  std::map<unsigned, double> power_w;
  if (approx_instant_energy_)
    for (unsigned i : indices_) power_w[i] = gpus_->power_usage_mw(i) / 1000.0;
  auto energy = read_energy_j();
  m.time = clock_() - w.start;
  for (unsigned i : indices_) {
    double joules = energy[i] - w.energy_j[i];
    if (joules == 0 && approx_instant_energy_) joules = power_w[i] * m.time;
    m.gpu_energy[i] = joules;
    m.total_energy += joules;
  }
  if (rapl_ && !cpu_indices_.empty()) {
    auto now = rapl_->read();
    m.cpu_energy.emplace();
    for (unsigned c : cpu_indices_) {
      (*m.cpu_energy)[c] = now.cpu_j[c] - w.rapl.cpu_j[c];
      if (rapl_->has_dram(c)) {
        if (!m.dram_energy) m.dram_energy.emplace();
        (*m.dram_energy)[c] = now.dram_j[c] - w.rapl.dram_j[c];
      }
    }
  }
  return m;
}

}  // namespace perseus::zeus
