#include "round_measurement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "perseus/pipeline/makespan.hpp"
#include "perseus/protocol/round_mean.hpp"
#include "perseus/server/wire.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus::server {

namespace {

using protocol::first_counted_iteration;

// Per occurrence of `name` in an iteration: the mean over counted iterations.
std::vector<double> per_occurrence(const Breakdown& breakdown, const char* name, int rank) {
  auto it = breakdown.find(name);
  if (it == breakdown.end() || it->second.empty())
    throw std::runtime_error(
        fmt::format("rank {} reported no '{}' measurements; wrap forward and backward with "
                    "on_instruction_begin/end",
                    rank, name));
  const auto& iterations = it->second;
  std::size_t skip = first_counted_iteration(iterations.size());
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

// Per occurrence of `kind` in an iteration: the (model stage, kind) of the slot it runs (the k-th
// occurrence is the k-th slot of that kind in the order).
std::vector<online::StageKind> occurrence_keys(const std::vector<Instruction>& order, InstructionKind kind,
                                               int num_stages) {
  std::vector<online::StageKind> keys;
  for (const auto& inst : order)
    if (inst.kind == kind) keys.emplace_back(model_stage(inst, num_stages), kind);
  return keys;
}

// The kinds `order` runs, each once, in the order of their first slot.
std::vector<InstructionKind> kinds_of(const std::vector<Instruction>& order) {
  std::vector<InstructionKind> kinds;
  for (const auto& inst : order)
    if (std::find(kinds.begin(), kinds.end(), inst.kind) == kinds.end()) kinds.push_back(inst.kind);
  return kinds;
}

double total(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return sum;
}

}  // namespace

online::RoundMeasurement analyze_round(const std::vector<ProfilingResult>& results, const std::vector<RankInfo>& ranks,
                                       int dp_degree, const std::vector<std::vector<Instruction>>& orders,
                                       int num_microbatches, bool occurrences) {
  online::RoundMeasurement out;
  const auto S = orders.size();
  const auto D = static_cast<std::size_t>(dp_degree);
  out.pipeline_energy.assign(D, 0);
  std::vector<std::map<online::StageKind, TimeEnergy>> pipeline_sums(D);
  std::vector<std::map<online::StageKind, int>> pipeline_counts(D);
  // Per pipeline, stage and slot: the slowest tensor-parallel rank's duration.
  std::vector<std::vector<std::vector<double>>> durations(static_cast<std::size_t>(dp_degree),
                                                          std::vector<std::vector<double>>(S));
  std::map<std::pair<int, InstructionKind>, TimeEnergy> sums;
  std::map<std::pair<int, InstructionKind>, int> counts;
  double idle_time = 0, idle_energy = 0;
  for (const auto& result : results) {
    const RankInfo& info = ranks.at(static_cast<std::size_t>(result.rank));
    out.clock_changes += result.clock_changes;
    out.clocks_late += result.clocks_late;
    double t = protocol::round_mean(result.iter_time), e = protocol::round_mean(result.iter_energy);
    out.iteration_time = std::max(out.iteration_time, t);
    out.iterations = std::max(out.iterations, static_cast<int>(result.iter_time.size()));
    out.energy += e;
    out.pipeline_energy[static_cast<std::size_t>(info.dp_rank)] += e;
    double busy_time = 0, busy_energy = 0;
    const auto& order = orders[static_cast<std::size_t>(info.pp_rank)];
    auto& slots = durations[static_cast<std::size_t>(info.dp_rank)][static_cast<std::size_t>(info.pp_rank)];
    if (slots.empty()) slots.assign(order.size(), 0);
    // Per (model stage, kind): with model chunks (interleaved, V-shape) a stage runs several.
    for (auto kind : kinds_of(order)) {
      const std::string name(to_string(kind));
      auto times = per_occurrence(result.time_breakdown, name.c_str(), result.rank);
      auto energies = per_occurrence(result.energy_breakdown, name.c_str(), result.rank);
      const auto keys = occurrence_keys(order, kind, static_cast<int>(S));
      std::map<online::StageKind, TimeEnergy> key_sums;
      std::map<online::StageKind, int> key_counts;
      for (std::size_t k = 0; k < times.size() && k < energies.size() && k < keys.size(); ++k) {
        key_sums[keys[k]].time += times[k];
        key_sums[keys[k]].energy += energies[k];
        ++key_counts[keys[k]];
      }
      for (const auto& [key, key_sum] : key_sums) {
        double mean_time = key_sum.time / key_counts[key], mean_energy = key_sum.energy / key_counts[key];
        auto& sum = sums[key];
        sum.time += mean_time;
        sum.energy += mean_energy;
        ++counts[key];
        auto& mine = pipeline_sums[static_cast<std::size_t>(info.dp_rank)][key];
        mine.time += mean_time;
        mine.energy += mean_energy;
        ++pipeline_counts[static_cast<std::size_t>(info.dp_rank)][key];
      }
      // One set per GPU of the pipeline stage and model stage: its tensor-parallel peers finish together, so one
      // says it all.
      if (occurrences && info.tp_rank == 0) {
        std::map<online::StageKind, std::vector<double>> sets;
        const auto& iterations = result.time_breakdown.at(name);
        for (std::size_t i = first_counted_iteration(iterations.size()); i < iterations.size(); ++i)
          for (std::size_t k = 0; k < iterations[i].size() && k < keys.size(); ++k)
            sets[keys[k]].push_back(iterations[i][k]);
        for (auto& [key, durations] : sets) out.occurrences[key].push_back(std::move(durations));
      }
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
    out.instructions[key] = {sum.time / n, sum.energy / n};
  }
  out.pipeline_instructions.resize(D);
  for (std::size_t d = 0; d < D; ++d)
    for (const auto& [key, sum] : pipeline_sums[d]) {
      double n = pipeline_counts[d][key];
      out.pipeline_instructions[d][key] = {sum.time / n, sum.energy / n};
    }
  if (idle_time > 1e-9) out.blocking_power = idle_energy / idle_time;
  out.slot_time = durations;
  for (const auto& pipeline : durations) {
    bool complete = std::all_of(pipeline.begin(), pipeline.end(), [](const auto& s) { return !s.empty(); });
    out.pipeline_time.push_back(complete ? pipeline_makespan(orders, num_microbatches, pipeline) : 0.0);
  }
  // A few milliseconds of idle time on a coarse energy counter can make it absurd: then it is not measured.
  if (out.blocking_power) out.blocking_power = plausible_blocking_power(*out.blocking_power, ranks);
  return out;
}

namespace {

using Instructions = std::map<online::StageKind, TimeEnergy>;

nlohmann::json instructions_json(const Instructions& instructions) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, value] : instructions)
    out.push_back({key.first, std::string(to_string(key.second)), value.time, value.energy});
  return out;
}

online::StageKind stage_kind(const nlohmann::json& stage, const nlohmann::json& kind_name) {
  std::string name = kind_name.get<std::string>();
  auto kind = parse_instruction_kind(name);
  if (!kind) throw std::runtime_error(fmt::format("unknown kind '{}'", safe_text(name)));
  return {stage.get<int>(), *kind};
}

Instructions instructions_from_json(const nlohmann::json& j) {
  Instructions out;
  for (const auto& i : j) out[stage_kind(i.at(0), i.at(1))] = {i.at(2).get<double>(), i.at(3).get<double>()};
  return out;
}

}  // namespace

nlohmann::json to_json(const online::RoundMeasurement& m) {
  nlohmann::json per_pipeline = nlohmann::json::array();
  for (const auto& p : m.pipeline_instructions) per_pipeline.push_back(instructions_json(p));
  nlohmann::json occurrences = nlohmann::json::array();
  for (const auto& [key, sets] : m.occurrences)
    occurrences.push_back({key.first, std::string(to_string(key.second)), sets});
  return {{"iteration_time", m.iteration_time},
          {"energy", m.energy},
          {"instructions", instructions_json(m.instructions)},
          {"pipeline_instructions", per_pipeline},
          {"blocking_power", m.blocking_power ? nlohmann::json(*m.blocking_power) : nlohmann::json(nullptr)},
          {"pipeline_time", m.pipeline_time},
          {"pipeline_energy", m.pipeline_energy},
          {"slot_time", m.slot_time},
          {"occurrences", occurrences},
          {"iterations", m.iterations},
          {"clock_changes", m.clock_changes},
          {"clocks_late", m.clocks_late}};
}

online::RoundMeasurement round_measurement_from_json(const nlohmann::json& j) {
  online::RoundMeasurement m;
  m.iteration_time = j.at("iteration_time").get<double>();
  m.energy = j.at("energy").get<double>();
  m.instructions = instructions_from_json(j.at("instructions"));
  for (const auto& p : j.at("pipeline_instructions")) m.pipeline_instructions.push_back(instructions_from_json(p));
  if (!j.at("blocking_power").is_null()) m.blocking_power = j.at("blocking_power").get<double>();
  m.pipeline_time = j.at("pipeline_time").get<std::vector<double>>();
  m.pipeline_energy = j.at("pipeline_energy").get<std::vector<double>>();
  m.slot_time = j.at("slot_time").get<std::vector<std::vector<std::vector<double>>>>();
  for (const auto& o : j.at("occurrences"))
    m.occurrences[stage_kind(o.at(0), o.at(1))] = o.at(2).get<std::vector<std::vector<double>>>();
  m.iterations = j.value("iterations", 0);  // optional: stores written before these were kept
  m.clock_changes = j.value("clock_changes", 0);
  m.clocks_late = j.value("clocks_late", 0);
  return m;
}

}  // namespace perseus::server
