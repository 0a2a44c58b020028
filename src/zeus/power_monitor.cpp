#include "perseus/zeus/power_monitor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace perseus::zeus {

PowerMonitor::PowerMonitor(std::shared_ptr<gpu::GpuLibrary> gpus, std::vector<unsigned> gpu_indices, double period_s,
                           std::size_t max_samples, Clock clock)
    : gpus_(std::move(gpus)), indices_(std::move(gpu_indices)), max_samples_(max_samples), clock_(std::move(clock)) {
  if (!gpus_) throw std::invalid_argument("PowerMonitor needs a GPU library");
  unsigned count = gpus_->device_count();
  for (unsigned i : indices_)
    if (i >= count)
      throw std::invalid_argument(
          fmt::format("GPU index {}: {} GPU{} visible", i, count, count == 1 ? " is" : "s are"));
  if (!clock_)
    clock_ = [] { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); };
  for (unsigned i : indices_) samples_[i];
  sample();
  if (period_s > 0) {
    sampler_ = std::thread([this, period_s] {
      using Steady = std::chrono::steady_clock;
      auto period = std::chrono::duration_cast<Steady::duration>(std::chrono::duration<double>(period_s));
      std::unique_lock lock(mutex_);
      Steady::time_point next = Steady::now() + period;
      while (!wake_.wait_until(lock, next, [&] { return stop_; })) {
        lock.unlock();
        sample();
        lock.lock();
        next = std::max(next + period, Steady::now());  // a slow read skips samples, not piles them up
      }
    });
  }
}

PowerMonitor::~PowerMonitor() { stop(); }

void PowerMonitor::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (sampler_.joinable() && sampler_.get_id() != std::this_thread::get_id()) sampler_.join();
}

void PowerMonitor::sample() {
  std::vector<std::pair<unsigned, PowerSample>> read;
  for (unsigned i : indices_) {
    try {
      double watts = gpus_->power_usage_mw(i) / 1000.0;
      read.emplace_back(i, PowerSample{clock_(), watts});
    } catch (const gpu::GpuError&) {
      // no sample this time: a failed read must not stop the timeline
    }
  }
  std::lock_guard lock(mutex_);
  for (auto& [i, s] : read) {
    auto& q = samples_[i];
    q.push_back(s);
    if (max_samples_ > 0 && q.size() > max_samples_) q.pop_front();
  }
}

std::vector<PowerSample> PowerMonitor::timeline(unsigned gpu, std::optional<double> start,
                                                std::optional<double> end) const {
  std::lock_guard lock(mutex_);
  std::vector<PowerSample> out;
  auto it = samples_.find(gpu);
  if (it == samples_.end()) return out;
  for (const auto& s : it->second)
    if ((!start || s.time >= *start) && (!end || s.time <= *end)) out.push_back(s);
  return out;
}

std::optional<std::map<unsigned, double>> PowerMonitor::energy(double start, double end) const {
  std::map<unsigned, double> out;
  for (unsigned i : indices_) {
    auto all = timeline(i);
    if (all.empty()) return std::nullopt;
    out[i] = integrate(all, start, end);
  }
  return out;
}

double integrate(const std::vector<PowerSample>& timeline, double start, double end) {
  if (timeline.empty() || end <= start) return 0;
  // Power at time t: linear between samples, held beyond the first and last.
  auto power_at = [&](double t) {
    if (t <= timeline.front().time) return timeline.front().watts;
    if (t >= timeline.back().time) return timeline.back().watts;
    auto after = std::lower_bound(timeline.begin(), timeline.end(), t,
                                  [](const PowerSample& s, double v) { return s.time < v; });
    auto before = after - 1;
    double span = after->time - before->time;
    return span <= 0 ? after->watts : before->watts + (after->watts - before->watts) * (t - before->time) / span;
  };
  // Trapezoids over the breakpoints inside (start, end) plus the two ends.
  std::vector<double> points{start};
  for (const auto& s : timeline)
    if (s.time > start && s.time < end) points.push_back(s.time);
  points.push_back(end);
  double joules = 0;
  for (std::size_t k = 1; k < points.size(); ++k)
    joules += (power_at(points[k - 1]) + power_at(points[k])) / 2 * (points[k] - points[k - 1]);
  return joules;
}

}  // namespace perseus::zeus
