#include "perseus/simulate/simulated_gpu.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

namespace perseus::simulate {

SimulatedGpu::SimulatedGpu(std::string name, std::vector<unsigned> clocks, gpu::PowerLimitRange power_limits)
    : name_(std::move(name)),
      clocks_(std::move(clocks)),
      power_limits_(power_limits),
      power_limit_mw_(power_limits.max_mw) {
  std::sort(clocks_.begin(), clocks_.end(), std::greater<>());
  clocks_.erase(std::unique(clocks_.begin(), clocks_.end()), clocks_.end());
  if (clocks_.empty()) throw std::invalid_argument("a simulated GPU needs at least one clock");
  if (power_limits_.min_mw == 0 || power_limits_.min_mw > power_limits_.max_mw)
    throw std::invalid_argument("a simulated GPU needs a power limit range min <= max, min > 0");
}

double SimulatedGpu::power_limit_w() const {
  std::lock_guard lock(mutex_);
  return power_limit_mw_ / 1000.0;
}

void SimulatedGpu::check_device(unsigned device) const {
  if (device != 0)
    throw gpu::GpuError(gpu::GpuErrorKind::invalid_argument, fmt::format("simulated GPU: no device {}", device));
}

void SimulatedGpu::set_clock_latency(std::function<double()> now, double latency) {
  std::lock_guard lock(mutex_);
  now_ = std::move(now);
  latency_ = latency;
}

void SimulatedGpu::settle(double time) {
  while (!pending_.empty() && pending_.front().at <= time) {
    locked_ = pending_.front().clock;
    pending_.pop_front();
  }
}

unsigned SimulatedGpu::locked_clock() const {
  std::lock_guard lock(mutex_);
  return locked_ != 0 ? locked_ : clocks_.front();
}

unsigned SimulatedGpu::clock_at(double time) {
  std::lock_guard lock(mutex_);
  settle(time);
  return locked_ != 0 ? locked_ : clocks_.front();
}

std::optional<double> SimulatedGpu::next_change_after(double time) const {
  std::lock_guard lock(mutex_);
  for (const auto& p : pending_)
    if (p.at > time) return p.at;
  return std::nullopt;
}

void SimulatedGpu::add_energy(double joules) {
  std::lock_guard lock(mutex_);
  energy_j_ += joules;
}

double SimulatedGpu::energy() const {
  std::lock_guard lock(mutex_);
  return energy_j_;
}

int SimulatedGpu::lock_count() const {
  std::lock_guard lock(mutex_);
  return locks_;
}

std::string SimulatedGpu::name(unsigned device) {
  check_device(device);
  return name_;
}

std::vector<unsigned> SimulatedGpu::supported_memory_clocks(unsigned device) {
  check_device(device);
  return {kMemoryClock};
}

std::vector<unsigned> SimulatedGpu::supported_graphics_clocks(unsigned device, unsigned memory_clock) {
  check_device(device);
  if (memory_clock != kMemoryClock)
    throw gpu::GpuError(gpu::GpuErrorKind::invalid_argument,
                        fmt::format("simulated GPU: no memory clock {}", memory_clock));
  return clocks_;
}

unsigned SimulatedGpu::current_graphics_clock(unsigned device) {
  check_device(device);
  std::lock_guard lock(mutex_);
  if (now_) settle(now_());
  return locked_ != 0 ? locked_ : clocks_.front();
}

unsigned SimulatedGpu::current_memory_clock(unsigned device) {
  check_device(device);
  return kMemoryClock;
}

void SimulatedGpu::lock_graphics_clock(unsigned device, unsigned min_mhz, unsigned max_mhz) {
  check_device(device);
  if (min_mhz != max_mhz || std::find(clocks_.begin(), clocks_.end(), max_mhz) == clocks_.end())
    throw gpu::GpuError(gpu::GpuErrorKind::invalid_argument,
                        fmt::format("simulated GPU: cannot lock {}-{} MHz (not a supported clock)", min_mhz, max_mhz));
  std::lock_guard lock(mutex_);
  ++locks_;
  if (!now_ || latency_ <= 0) {
    locked_ = max_mhz;
    return;
  }
  pending_.push_back({now_() + latency_, max_mhz});
}

void SimulatedGpu::reset_graphics_clock(unsigned device) {
  check_device(device);
  std::lock_guard lock(mutex_);
  locked_ = 0;
  pending_.clear();
}

void SimulatedGpu::lock_memory_clock(unsigned device, unsigned, unsigned) { check_device(device); }
void SimulatedGpu::reset_memory_clock(unsigned device) { check_device(device); }

unsigned SimulatedGpu::power_limit_mw(unsigned device) {
  check_device(device);
  std::lock_guard lock(mutex_);
  return power_limit_mw_;
}

gpu::PowerLimitRange SimulatedGpu::power_limit_range(unsigned device) {
  check_device(device);
  return power_limits_;
}

void SimulatedGpu::set_power_limit_mw(unsigned device, unsigned limit_mw) {
  check_device(device);
  if (limit_mw < power_limits_.min_mw || limit_mw > power_limits_.max_mw)  // as NVML refuses one
    throw gpu::GpuError(gpu::GpuErrorKind::invalid_argument,
                        fmt::format("simulated GPU: a power limit of {} mW is outside {} .. {} mW", limit_mw,
                                    power_limits_.min_mw, power_limits_.max_mw));
  std::lock_guard lock(mutex_);
  power_limit_mw_ = limit_mw;
}

std::uint64_t SimulatedGpu::total_energy_mj(unsigned device) {
  check_device(device);
  std::lock_guard lock(mutex_);
  return static_cast<std::uint64_t>(std::llround(energy_j_ * 1000.0));
}

unsigned SimulatedGpu::power_usage_mw(unsigned device) {
  check_device(device);
  return 0;  // the simulator charges energy per instruction, not as a power reading
}

}  // namespace perseus::simulate
