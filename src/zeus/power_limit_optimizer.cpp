#include "perseus/zeus/power_limit_optimizer.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "perseus/util/atomic_file.hpp"
#include "perseus/util/error.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus::zeus {

namespace {

template <typename Key>
int least(const std::vector<PowerLimitMeasurement>& m, Key key) {
  return std::min_element(m.begin(), m.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); })->power_limit;
}

}  // namespace

int EnergySelector::select(const std::vector<PowerLimitMeasurement>& m) const {
  return least(m, [](const auto& x) { return x.energy; });
}

int TimeSelector::select(const std::vector<PowerLimitMeasurement>& m) const {
  return least(m, [](const auto& x) { return x.time; });
}

ZeusCostSelector::ZeusCostSelector(double eta_knob, int world_size) : eta_(eta_knob), world_size_(world_size) {
  if (!(eta_knob >= 0 && eta_knob <= 1)) throw std::invalid_argument("eta_knob must be between 0 and 1, inclusive both sides");
  if (world_size < 1) throw std::invalid_argument("world_size must be greater than or equal to 1");
}

int ZeusCostSelector::select(const std::vector<PowerLimitMeasurement>& m) const {
  double max_power = double(std::max_element(m.begin(), m.end(), [](auto& a, auto& b) {
                              return a.power_limit < b.power_limit;
                            })->power_limit) * world_size_;
  return least(m, [&](const auto& x) { return eta_ * x.energy + (1 - eta_) * max_power * x.time; });
}

MaxSlowdownConstraintSelector::MaxSlowdownConstraintSelector(double factor) : factor_(factor) {
  if (!(factor >= 1.0)) throw std::invalid_argument(fmt::format("max_slowdown_factor must be greater than or equal to 1.0. Got {}.", factor));
}

int MaxSlowdownConstraintSelector::select(const std::vector<PowerLimitMeasurement>& m) const {
  const auto& top = *std::max_element(m.begin(), m.end(), [](auto& a, auto& b) { return a.power_limit < b.power_limit; });
  int chosen = top.power_limit;
  for (const auto& x : m)
    if (x.time <= factor_ * top.time) chosen = std::min(chosen, x.power_limit);
  return chosen;
}

const char* to_string(PowerLimitState state) {
  switch (state) {
    case PowerLimitState::ready: return "Ready";
    case PowerLimitState::warmup: return "Warmup";
    case PowerLimitState::profiling: return "Profiling";
    case PowerLimitState::done: return "Done";
  }
  return "?";
}

GlobalPowerLimitOptimizer::GlobalPowerLimitOptimizer(EnergyMonitor& monitor, PowerLimitOptimizerOptions options)
    : monitor_(monitor), options_(std::move(options)) {
  if (options_.wait_steps < 0) throw std::invalid_argument("wait_steps must be non-negative");
  if (options_.warmup_steps < 0) throw std::invalid_argument("warmup_steps must be non-negative");
  if (options_.profile_steps <= 0) throw std::invalid_argument("profile_steps must be positive");
  if (options_.pl_step <= 0) throw std::invalid_argument("pl_step must be positive");
  if (!options_.selector)
    options_.selector = std::make_shared<ZeusCostSelector>(0.5, static_cast<int>(monitor.gpu_indices().size()));

  try {
    std::optional<gpu::PowerLimitRange> range;
    for (unsigned i : monitor.gpu_indices()) {
      auto r = monitor.gpus().power_limit_range(i);
      if (range && (r.min_mw != range->min_mw || r.max_mw != range->max_mw))
        throw std::invalid_argument("power limit ranges are not uniform across GPUs");
      range = r;
    }
    if (!range) throw std::invalid_argument("the monitor watches no GPU");
    // From the maximum down, never below the minimum (Zeus once set one step below it).
    int top = static_cast<int>(range->max_mw / 1000), bottom = static_cast<int>((range->min_mw + 999) / 1000);
    for (int w = top; w >= bottom; w -= options_.pl_step) limits_w_.push_back(w);

    if (!options_.profile_path.empty() && std::filesystem::exists(options_.profile_path)) {
      measurements_ = read_power_limit_profile(options_.profile_path);
      optimal_w_ = options_.selector->select(measurements_);
      state_ = PowerLimitState::done;
      spdlog::info("power limit optimizer: profile loaded from {}; optimal power limit {} W", options_.profile_path, *optimal_w_);
      set_limit(*optimal_w_);
    } else {
      set_limit(limits_w_.front());
    }
  } catch (const gpu::GpuError& e) {
    if (!options_.fail_open) throw;
    spdlog::warn("power limit optimizer disabled, training continues at the GPUs' current limits: {}", e.what());
    enabled_ = false;
    state_ = PowerLimitState::done;
  }
}

GlobalPowerLimitOptimizer::~GlobalPowerLimitOptimizer() { close(); }

void GlobalPowerLimitOptimizer::close() {
  if (!enabled_ || limits_w_.empty()) return;
  enabled_ = false;
  try {
    set_limit(limits_w_.front());
  } catch (const std::exception& e) {
    spdlog::warn("power limit optimizer: could not restore {} W: {}", limits_w_.front(), e.what());
  }
}

void GlobalPowerLimitOptimizer::set_limit(int watts) {
  if (watts == current_w_) return;
  for (unsigned i : monitor_.gpu_indices()) monitor_.gpus().set_power_limit_mw(i, static_cast<unsigned>(watts) * 1000u);
  current_w_ = watts;
}

std::string GlobalPowerLimitOptimizer::window_name() const {
  return fmt::format("__PowerLimitOptimizer_{}", limits_w_[next_]);
}

void GlobalPowerLimitOptimizer::on_step_begin() {
  if (!enabled_) return;
  if (waited_ < options_.wait_steps) {
    ++waited_;
    return;
  }
  try {
    switch (state_) {
      case PowerLimitState::ready:
        set_limit(limits_w_[next_]);
        state_ = PowerLimitState::warmup;
        steps_left_ = options_.warmup_steps;
        if (steps_left_ > 0) break;
        [[fallthrough]];  // no warm-up: profile from this step on
      case PowerLimitState::warmup:
        if (state_ == PowerLimitState::warmup && steps_left_ > 0 && --steps_left_ > 0) break;
        state_ = PowerLimitState::profiling;
        steps_left_ = options_.profile_steps;
        monitor_.begin_window(window_name());
        break;
      case PowerLimitState::profiling:
        if (--steps_left_ == 0) finish_profiling();
        break;
      case PowerLimitState::done:
        break;
    }
  } catch (const gpu::GpuError& e) {
    if (!options_.fail_open) throw;
    spdlog::warn("power limit optimizer disabled, training continues: {}", e.what());
    enabled_ = false;
  }
}

void GlobalPowerLimitOptimizer::finish_profiling() {
  Measurement m = monitor_.end_window(window_name());
  double energy = m.total_energy, time = m.time;
  if (options_.combine) options_.combine(energy, time);
  measurements_.push_back({limits_w_[next_], energy, time});
  spdlog::info("power limit optimizer: {} W took {:.3f} s and {:.1f} J over {} steps", limits_w_[next_], time, energy,
               options_.profile_steps);
  if (++next_ < limits_w_.size()) {
    set_limit(limits_w_[next_]);
    state_ = PowerLimitState::warmup;
    steps_left_ = options_.warmup_steps;
    if (steps_left_ == 0) {  // straight into the next measurement
      state_ = PowerLimitState::profiling;
      steps_left_ = options_.profile_steps;
      monitor_.begin_window(window_name());
    }
    return;
  }
  optimal_w_ = options_.selector->select(measurements_);
  state_ = PowerLimitState::done;
  spdlog::info("power limit optimizer: optimal power limit {} W", *optimal_w_);
  set_limit(*optimal_w_);
  if (!options_.profile_path.empty()) write_power_limit_profile(options_.profile_path, measurements_);
}

void GlobalPowerLimitOptimizer::on_epoch_end() {
  if (!enabled_ || (state_ != PowerLimitState::warmup && state_ != PowerLimitState::profiling)) return;
  spdlog::info("power limit optimizer: {} of {} W interrupted by the end of an epoch", to_string(state_), limits_w_[next_]);
  if (state_ == PowerLimitState::profiling) monitor_.end_window(window_name(), true);
  state_ = PowerLimitState::ready;  // the same limit again from the next step
  try {
    set_limit(limits_w_.front());
  } catch (const gpu::GpuError& e) {
    if (!options_.fail_open) throw;
    spdlog::warn("power limit optimizer disabled, training continues: {}", e.what());
    enabled_ = false;
  }
}

std::vector<PowerLimitMeasurement> read_power_limit_profile(const std::string& path) {
  nlohmann::json doc;
  try {
    const std::string text = read_file(path);
    check_json_depth(text);
    doc = nlohmann::json::parse(text);
  } catch (const JsonTooDeep& e) {
    throw InputError(path, 0, "", fmt::format("not usable JSON ({})", e.what()));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path, 0, "", fmt::format("not valid JSON ({})", e.what()));
  }
  if (!doc.is_object() || !doc.contains("measurements") || !doc["measurements"].is_array())
    throw InputError(path, 0, "measurements", "missing: a Zeus power limit profile is {\"measurements\": [...]}");
  std::vector<PowerLimitMeasurement> out;
  for (std::size_t i = 0; i < doc["measurements"].size(); ++i) {
    const auto& m = doc["measurements"][i];
    std::string where = fmt::format("measurements[{}]", i);
    if (!m.is_object() || !m.contains("power_limit") || !m["power_limit"].is_number_integer() || !m.contains("energy") ||
        !m["energy"].is_number() || !m.contains("time") || !m["time"].is_number())
      throw InputError(path, 0, where, "needs an integer power_limit and numbers energy and time");
    out.push_back({m["power_limit"].get<int>(), m["energy"].get<double>(), m["time"].get<double>()});
  }
  if (out.empty()) throw InputError(path, 0, "measurements", "is empty");
  return out;
}

void write_power_limit_profile(const std::string& path, const std::vector<PowerLimitMeasurement>& measurements) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& m : measurements) list.push_back({{"power_limit", m.power_limit}, {"energy", m.energy}, {"time", m.time}});
  write_file_atomic(path, nlohmann::json({{"measurements", list}}).dump(4) + "\n");
}

}  // namespace perseus::zeus
