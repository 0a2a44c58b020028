#include "round_measurement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "perseus/pipeline/makespan.hpp"

namespace perseus::server {

namespace {

std::size_t first_kept(std::size_t iterations) { return iterations > 1 ? 1 : 0; }

double mean_kept(const std::vector<double>& values) {
  std::size_t skip = first_kept(values.size());
  if (values.size() <= skip) return 0;
  double sum = 0;
  for (std::size_t i = skip; i < values.size(); ++i) sum += values[i];
  return sum / double(values.size() - skip);
}

// Per occurrence of `name` in an iteration: the mean over kept iterations.
std::vector<double> per_occurrence(const Breakdown& breakdown, const char* name, int rank) {
  auto it = breakdown.find(name);
  if (it == breakdown.end() || it->second.empty())
    throw std::runtime_error(fmt::format("rank {} reported no '{}' measurements; wrap forward and backward with "
                                         "on_instruction_begin/end", rank, name));
  const auto& iterations = it->second;
  std::size_t skip = first_kept(iterations.size());
  std::vector<double> sum;
  std::size_t n = 0;
  for (std::size_t i = skip; i < iterations.size(); ++i) {
    if (iterations[i].empty()) continue;
    if (sum.empty()) sum.assign(iterations[i].size(), 0);
    if (iterations[i].size() != sum.size())
      throw std::runtime_error(fmt::format("rank {} ran {} '{}' in one iteration and {} in another", rank, sum.size(),
                                           name, iterations[i].size()));
    for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += iterations[i][k];
    ++n;
  }
  if (n == 0) throw std::runtime_error(fmt::format("rank {} ran no '{}'", rank, name));
  for (double& v : sum) v /= double(n);
  return sum;
}

double total(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return sum;
}

}  // namespace

RoundMeasurement analyze_round(const std::vector<ProfilingResult>& results, const std::vector<RankInfo>& ranks,
                               int dp_degree, const std::vector<std::vector<Instruction>>& orders, int num_microbatches) {
  RoundMeasurement out;
  const auto S = orders.size();
  out.pipeline_energy.assign(static_cast<std::size_t>(dp_degree), 0);
  // Per pipeline, stage and slot: the slowest tensor-parallel rank's duration.
  std::vector<std::vector<std::vector<double>>> durations(static_cast<std::size_t>(dp_degree),
                                                          std::vector<std::vector<double>>(S));
  std::map<std::pair<int, InstructionKind>, std::pair<double, double>> sums;
  std::map<std::pair<int, InstructionKind>, int> counts;
  double idle_time = 0, idle_energy = 0;
  for (const auto& result : results) {
    const RankInfo& info = ranks.at(static_cast<std::size_t>(result.rank));
    double t = mean_kept(result.iter_time), e = mean_kept(result.iter_energy);
    out.iteration_time = std::max(out.iteration_time, t);
    out.energy += e;
    out.pipeline_energy[static_cast<std::size_t>(info.dp_rank)] += e;
    double busy_time = 0, busy_energy = 0;
    const auto& order = orders[static_cast<std::size_t>(info.pp_rank)];
    auto& slots = durations[static_cast<std::size_t>(info.dp_rank)][static_cast<std::size_t>(info.pp_rank)];
    if (slots.empty()) slots.assign(order.size(), 0);
    for (auto kind : {InstructionKind::forward, InstructionKind::backward}) {
      const char* name = kind == InstructionKind::forward ? "forward" : "backward";
      auto times = per_occurrence(result.time_breakdown, name, result.rank);
      auto energies = per_occurrence(result.energy_breakdown, name, result.rank);
      auto& sum = sums[{info.pp_rank, kind}];
      sum.first += total(times) / double(times.size());
      sum.second += total(energies) / double(energies.size());
      ++counts[{info.pp_rank, kind}];
      busy_time += total(times), busy_energy += total(energies);
      std::size_t k = 0;  // the k-th occurrence of this kind is the k-th slot of this kind in the order
      for (std::size_t slot = 0; slot < order.size() && k < times.size(); ++slot)
        if (order[slot].kind == kind) slots[slot] = std::max(slots[slot], times[k++]);
    }
    if (t > busy_time) {
      idle_time += t - busy_time;
      idle_energy += std::max(0.0, e - busy_energy);
    }
  }
  for (const auto& [key, sum] : sums) {
    double n = counts[key];
    out.instructions[key] = {sum.first / n, sum.second / n};
  }
  if (idle_time > 1e-9) out.blocking_power = idle_energy / idle_time;
  for (const auto& pipeline : durations) {
    bool complete = std::all_of(pipeline.begin(), pipeline.end(), [](const auto& s) { return !s.empty(); });
    out.pipeline_time.push_back(complete ? pipeline_makespan(orders, num_microbatches, pipeline) : 0.0);
  }
  return out;
}

nlohmann::json to_json(const RoundMeasurement& m) {
  nlohmann::json instructions = nlohmann::json::array();
  for (const auto& [key, value] : m.instructions)
    instructions.push_back({key.first, std::string(to_string(key.second)), value.first, value.second});
  return {{"iteration_time", m.iteration_time},
          {"energy", m.energy},
          {"instructions", instructions},
          {"blocking_power", m.blocking_power ? nlohmann::json(*m.blocking_power) : nlohmann::json(nullptr)},
          {"pipeline_time", m.pipeline_time},
          {"pipeline_energy", m.pipeline_energy}};
}

RoundMeasurement round_measurement_from_json(const nlohmann::json& j) {
  RoundMeasurement m;
  m.iteration_time = j.at("iteration_time").get<double>();
  m.energy = j.at("energy").get<double>();
  for (const auto& i : j.at("instructions")) {
    std::string kind = i.at(1).get<std::string>();
    if (kind != "forward" && kind != "backward") throw std::runtime_error(fmt::format("unknown kind '{}'", kind));
    m.instructions[{i.at(0).get<int>(), kind == "forward" ? InstructionKind::forward : InstructionKind::backward}] = {
        i.at(2).get<double>(), i.at(3).get<double>()};
  }
  if (!j.at("blocking_power").is_null()) m.blocking_power = j.at("blocking_power").get<double>();
  m.pipeline_time = j.at("pipeline_time").get<std::vector<double>>();
  m.pipeline_energy = j.at("pipeline_energy").get<std::vector<double>>();
  return m;
}

}  // namespace perseus::server
