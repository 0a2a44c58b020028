#include "perseus/emulate/emulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "perseus/pipeline/schedule_profile.hpp"
#include "perseus/util/error.hpp"
#include "perseus/util/pyfloat.hpp"

namespace perseus {

bool EmulatorNoise::active() const {
  if (stage_sigma.empty()) return sigma > 0;
  return std::any_of(stage_sigma.begin(), stage_sigma.end(), [](const auto& s) { return s[0] > 0 || s[1] > 0; });
}

Emulator::Emulator(const Profile& profile, EmulatorConfig config)
    : config_(std::move(config)), source_(profile.source) {
  if (config_.num_stages < 1) throw SettingError("num_stages", "num_stages must be at least 1");
  if (config_.num_microbatches < 1) throw SettingError("num_microbatches", "num_microbatches must be at least 1");
  if (!(config_.p_block >= 0) || !std::isfinite(config_.p_block)) {
    throw SettingError("p2p_power", "p2p_power must be a non-negative number of watts");
  }
  if (!(config_.quantum >= 0) || !std::isfinite(config_.quantum)) {
    throw Error("the time quantum must be a non-negative number of seconds", ErrorKind::bad_setting);
  }
  config_.check();
  config_.virtual_stages = schedule_virtual_stages(config_.schedule, config_.virtual_stages);
  tables_ = CostTables(profile, config_, config_.quantum);
  walk_ = PipelineWalk(build_pipeline_dag(config_.schedule, config_.num_stages, config_.num_microbatches,
                                          config_.extra_forwards, config_.virtual_stages));
  for (int s = 0; s < config_.num_stages; ++s) {
    std::vector<Instruction> stage;
    for (int node : walk_.stage_nodes[static_cast<std::size_t>(s)])
      stage.push_back(walk_.instructions[static_cast<std::size_t>(node)]);
    layout_.push_back(std::move(stage));
  }
}

const std::vector<int>& Emulator::clocks(int stage, InstructionKind kind) const {
  return tables_.of(stage, kind).clocks;
}

std::optional<Emulator::Cost> Emulator::cost(int stage, InstructionKind kind, int frequency) const {
  return tables_.cost(stage, kind, frequency);
}

void Emulator::check_shape(const std::vector<std::vector<int>>& frequencies) const {
  if (frequencies.size() != layout_.size()) {
    throw Error(
        fmt::format("the plan has clocks for {} stages, the pipeline has {}", frequencies.size(), layout_.size()),
        ErrorKind::bad_input);
  }
  for (std::size_t s = 0; s < layout_.size(); ++s) {
    if (frequencies[s].size() != layout_[s].size()) {
      throw Error(fmt::format("stage {} of the plan has {} clocks; the {} schedule with {} microbatches runs {} "
                              "instructions there",
                              s, frequencies[s].size(), to_string(config_.schedule), config_.num_microbatches,
                              layout_[s].size()),
                  ErrorKind::bad_input);
    }
  }
}

std::vector<Emulator::Cost> Emulator::node_costs(const std::vector<std::vector<int>>& frequencies,
                                                 const std::vector<double>* factors) const {
  check_shape(frequencies);
  std::vector<Cost> costs(walk_.instructions.size());
  for (std::size_t node = 0; node < costs.size(); ++node) {
    const auto [s, k] = walk_.slot[node];
    const auto& inst = walk_.instructions[node];
    const auto& stage = frequencies[static_cast<std::size_t>(s)];
    const auto c = cost(inst, stage[k]);
    if (!c) {
      throw Error(fmt::format("stage {} slot {} ({}) runs at {} MHz, but {} has no stage {} {} row at that clock", s, k,
                              short_name(inst, config_.virtual_stages), stage[k], source_,
                              model_stage(inst, config_.num_stages), to_string(inst.kind)),
                  ErrorKind::bad_input);
    }
    const double factor = factors ? (*factors)[node] : 1.0;
    const int before = stage[k > 0 ? k - 1 : stage.size() - 1];
    const auto old = config_.clock_latency <= 0 || before == stage[k] ? std::nullopt : cost_before_change(inst, before);
    costs[node] = old ? cost_after_clock_change(*c, *old, config_.clock_latency, factor)
                      : Cost{c->time * factor, c->energy * factor};
  }
  return costs;
}

TimeEnergy Emulator::time_and_energy(const std::vector<std::vector<int>>& frequencies) const {
  const auto costs = node_costs(frequencies);
  std::vector<double> start(costs.size()), end(costs.size());
  const int last =
      walk_.walk([&](int node) { return costs[static_cast<std::size_t>(node)].time; }, start.data(), end.data());
  const double iteration = last < 0 ? 0 : end[static_cast<std::size_t>(last)];
  double busy = 0, compute = 0;
  for (const auto& c : costs) {
    busy += c.time;
    compute += c.energy;
  }
  return {iteration, iteration_energy(compute, busy, iteration, config_.num_stages, config_.p_block)};
}

EmulationResult Emulator::run(const std::vector<std::vector<int>>& frequencies,
                              const std::optional<EmulatorNoise>& noise) const {
  std::optional<std::vector<double>> factors;
  if (noise && noise->active()) {
    factors.emplace(walk_.instructions.size());
    std::mt19937_64 rng(noise->seed);
    // exp(sigma * z): what std::lognormal_distribution(0, sigma) draws, with a sigma per node.
    std::normal_distribution<double> normal(0.0, 1.0);
    for (std::size_t node = 0; node < factors->size(); ++node) {  // node order: the same seed gives the same draws
      const auto& inst = walk_.instructions[node];
      (*factors)[node] = std::exp(noise->sigma_of(inst.stage, inst.kind) * normal(rng));
    }
  }
  const auto costs = node_costs(frequencies, factors ? &*factors : nullptr);
  std::vector<double> start(costs.size()), end(costs.size());
  const int last =
      walk_.walk([&](int node) { return costs[static_cast<std::size_t>(node)].time; }, start.data(), end.data());

  EmulationResult result;
  result.iteration_time = last < 0 ? 0 : end[static_cast<std::size_t>(last)];
  result.stages.resize(config_.num_stages);
  result.instructions.resize(config_.num_stages);
  for (int s = 0; s < config_.num_stages; ++s) {
    auto& stage = result.stages[s];
    for (std::size_t k = 0; k < layout_[s].size(); ++k) {
      const auto node = static_cast<std::size_t>(walk_.stage_nodes[static_cast<std::size_t>(s)][k]);
      result.instructions[s].push_back(
          {layout_[s][k], frequencies[s][k], start[node], costs[node].time, costs[node].energy, false});
      stage.busy_time += costs[node].time;
      stage.compute_energy += costs[node].energy;
    }
    stage.idle_time = std::max(0.0, result.iteration_time - stage.busy_time);
    stage.idle_energy = stage.idle_time * config_.p_block;
    result.energy += stage.compute_energy + stage.idle_energy;
  }
  walk_.critical_path(last, start.data(), end.data(), [&](int node) {
    const auto [s, k] = walk_.slot[static_cast<std::size_t>(node)];
    result.instructions[static_cast<std::size_t>(s)][k].critical = true;
  });
  return result;
}

}  // namespace perseus
