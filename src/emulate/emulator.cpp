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
  if (config_.num_stages < 1) throw Error("--stages must be at least 1", kExitUsage);
  if (config_.num_microbatches < 1) throw Error("--microbatches must be at least 1", kExitUsage);
  if (!(config_.p_block >= 0) || !std::isfinite(config_.p_block)) {
    throw Error("--p2p-power must be a non-negative number of watts", kExitUsage);
  }
  if (!(config_.quantum >= 0) || !std::isfinite(config_.quantum)) {
    throw Error("the time quantum must be a non-negative number of seconds", kExitUsage);
  }
  config_.check();
  config_.virtual_stages = schedule_virtual_stages(config_.schedule, config_.virtual_stages);
  const int model_stages = config_.num_stages * config_.virtual_stages;
  const Profile model = profile_for_schedule(by_model_stage(profile, config_.num_stages), config_.schedule,
                                             config_.num_stages, model_stages);
  dag_ = build_pipeline_dag(config_.schedule, config_.num_stages, config_.num_microbatches, config_.extra_forwards,
                            config_.virtual_stages);

  tables_.resize(kNumInstructionKinds * static_cast<std::size_t>(model_stages));
  for (int s = 0; s < model_stages; ++s) {
    for (auto kind : kAllInstructionKinds) {
      auto rows = model.rows_for(s, kind);
      std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.frequency > b.frequency; });
      auto& t = tables_[operation_index(s, kind)];
      for (const auto& row : rows) {
        double time = row.time;
        if (config_.quantum > 0) time = py_floordiv(row.time, config_.quantum) * config_.quantum;
        t.clocks.push_back(row.frequency);
        t.costs.push_back({time, row.energy});
      }
    }
  }

  const int n = static_cast<int>(dag_.instructions.size());
  predecessors_.assign(n, {});
  slot_of_.assign(n, {0, 0});
  for (const auto& [u, v] : dag_.edges) {
    if (u < n && v < n) predecessors_[v].push_back(u);
  }
  for (int node : dag_.topological_order()) {
    if (node < n) topo_.push_back(node);
  }
  for (int s = 0; s < config_.num_stages; ++s) {
    std::vector<Instruction> stage;
    for (std::size_t k = 0; k < dag_.stage_nodes[s].size(); ++k) {
      const int node = dag_.stage_nodes[s][k];
      slot_of_[node] = {s, static_cast<int>(k)};
      stage.push_back(dag_.instructions[node]);
    }
    layout_.push_back(std::move(stage));
  }
}

const Emulator::Table& Emulator::table(int stage, InstructionKind kind) const {
  return tables_[operation_index(stage, kind)];
}

const std::vector<int>& Emulator::clocks(int stage, InstructionKind kind) const { return table(stage, kind).clocks; }

std::optional<Emulator::Cost> Emulator::cost(int stage, InstructionKind kind, int frequency) const {
  const auto& t = table(stage, kind);
  // clocks are sorted descending
  const auto it = std::lower_bound(t.clocks.begin(), t.clocks.end(), frequency, std::greater<>());
  if (it == t.clocks.end() || *it != frequency) return std::nullopt;
  return t.costs[it - t.clocks.begin()];
}

void Emulator::check_shape(const std::vector<std::vector<int>>& frequencies) const {
  if (frequencies.size() != layout_.size()) {
    throw Error(
        fmt::format("the plan has clocks for {} stages, the pipeline has {}", frequencies.size(), layout_.size()),
        kExitDataError);
  }
  for (std::size_t s = 0; s < layout_.size(); ++s) {
    if (frequencies[s].size() != layout_[s].size()) {
      throw Error(fmt::format("stage {} of the plan has {} clocks; the {} schedule with {} microbatches runs {} "
                              "instructions there",
                              s, frequencies[s].size(), to_string(config_.schedule), config_.num_microbatches,
                              layout_[s].size()),
                  kExitDataError);
    }
  }
}

std::vector<Emulator::Cost> Emulator::node_costs(const std::vector<std::vector<int>>& frequencies) const {
  check_shape(frequencies);
  std::vector<Cost> costs(dag_.instructions.size());
  for (std::size_t node = 0; node < costs.size(); ++node) {
    const auto [s, k] = slot_of_[node];
    const auto& inst = dag_.instructions[node];
    const auto c = cost(inst, frequencies[s][k]);
    if (!c) {
      throw Error(fmt::format("stage {} slot {} ({}) runs at {} MHz, but {} has no stage {} {} row at that clock", s, k,
                              short_name(inst, config_.virtual_stages), frequencies[s][k], source_,
                              model_stage(inst, config_.num_stages), to_string(inst.kind)),
                  kExitDataError);
    }
    costs[node] = *c;
    if (config_.clock_latency <= 0) continue;
    const auto& stage = frequencies[s];
    const int before = stage[k > 0 ? k - 1 : stage.size() - 1];
    const auto old = before == stage[k] ? std::nullopt : cost(inst, before);
    if (!old || old->time <= 0) continue;
    if (old->time <= config_.clock_latency) {  // it ends before the new clock takes effect
      costs[node] = *old;
      continue;
    }
    const double done = config_.clock_latency / old->time;  // its share of the work at the old clock
    costs[node] = {config_.clock_latency + (1 - done) * c->time, done * old->energy + (1 - done) * c->energy};
  }
  return costs;
}

int Emulator::schedule(const std::vector<Cost>& costs, std::vector<double>& start, std::vector<double>& end) const {
  start.assign(costs.size(), 0);
  end.assign(costs.size(), 0);
  int last = -1;
  for (int node : topo_) {
    for (int p : predecessors_[node]) start[node] = std::max(start[node], end[p]);
    end[node] = start[node] + costs[node].time;
    if (last < 0 || end[node] > end[last]) last = node;
  }
  return last;
}

std::pair<double, double> Emulator::time_and_energy(const std::vector<std::vector<int>>& frequencies) const {
  const auto costs = node_costs(frequencies);
  std::vector<double> start, end;
  const int last = schedule(costs, start, end);
  const double iteration = last < 0 ? 0 : end[last];
  double busy = 0, compute = 0;
  for (const auto& c : costs) {
    busy += c.time;
    compute += c.energy;
  }
  return {iteration, compute + (config_.num_stages * iteration - busy) * config_.p_block};
}

EmulationResult Emulator::run(const std::vector<std::vector<int>>& frequencies,
                              const std::optional<EmulatorNoise>& noise) const {
  auto costs = node_costs(frequencies);
  if (noise && noise->active()) {
    std::mt19937_64 rng(noise->seed);
    // exp(sigma * z): what std::lognormal_distribution(0, sigma) draws, with a sigma per node.
    std::normal_distribution<double> normal(0.0, 1.0);
    for (std::size_t node = 0; node < costs.size(); ++node) {  // node order: the same seed gives the same draws
      const auto& inst = dag_.instructions[node];
      const double f = std::exp(noise->sigma_of(inst.stage, inst.kind) * normal(rng));
      costs[node].time *= f;
      costs[node].energy *= f;
    }
  }
  std::vector<double> start, end;
  const int last = schedule(costs, start, end);

  EmulationResult result;
  result.iteration_time = last < 0 ? 0 : end[last];
  result.stages.resize(config_.num_stages);
  result.instructions.resize(config_.num_stages);
  for (int s = 0; s < config_.num_stages; ++s) {
    auto& stage = result.stages[s];
    for (std::size_t k = 0; k < layout_[s].size(); ++k) {
      const int node = dag_.stage_nodes[s][k];
      result.instructions[s].push_back(
          {layout_[s][k], frequencies[s][k], start[node], costs[node].time, costs[node].energy, false});
      stage.busy_time += costs[node].time;
      stage.compute_energy += costs[node].energy;
    }
    stage.idle_time = std::max(0.0, result.iteration_time - stage.busy_time);
    stage.idle_energy = stage.idle_time * config_.p_block;
    result.energy += stage.compute_energy + stage.idle_energy;
  }
  // Walk back from the last instruction through the predecessor it waited for.
  for (int node = last; node >= 0;) {
    const auto [s, k] = slot_of_[node];
    result.instructions[s][k].critical = true;
    int next = -1;
    for (int p : predecessors_[node]) {
      if (end[p] == start[node] && (next < 0 || end[p] > end[next])) next = p;
    }
    node = next;
  }
  return result;
}

}  // namespace perseus
