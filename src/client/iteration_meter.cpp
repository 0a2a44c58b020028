#include "iteration_meter.hpp"

#include <utility>

namespace perseus::client {

namespace {
double seconds(IterationMeter::Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

void IterationMeter::step_begin(Clock::time_point time) {
  failed_ = false;
  step_time_.clear();
  step_energy_.clear();
  step_open_ = Open{time, read_energy_j_()};
}

void IterationMeter::begin(const std::string& name, Clock::time_point time) {
  open_[name] = Open{time, read_energy_j_()};
}

void IterationMeter::end(const std::string& name, Clock::time_point time) {
  auto it = open_.find(name);
  if (it == open_.end()) return;
  step_time_[name].push_back(seconds(time - it->second.time));
  step_energy_[name].push_back(read_energy_j_() - it->second.energy_j);
  // A counter that went backwards (the GPU was reset): the iteration is no measurement.
  if (step_energy_[name].back() < 0) failed_ = true;
  open_.erase(it);
}

std::optional<IterationMeter::Iteration> IterationMeter::step_end(Clock::time_point time) {
  if (!step_open_ || failed_) return std::nullopt;
  const double energy = read_energy_j_() - step_open_->energy_j;
  if (energy < 0) return std::nullopt;
  Iteration out{seconds(time - step_open_->time), energy, std::move(step_time_), std::move(step_energy_)};
  step_time_.clear();
  step_energy_.clear();
  step_open_.reset();
  return out;
}

}  // namespace perseus::client
