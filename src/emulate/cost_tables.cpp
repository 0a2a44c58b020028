#include "perseus/emulate/cost_tables.hpp"

#include <algorithm>
#include <functional>

#include "perseus/pipeline/schedule_profile.hpp"
#include "perseus/util/pyfloat.hpp"

namespace perseus {

std::size_t CostTables::Table::at_or_below(int clock) const {
  for (std::size_t i = 0; i < clocks.size(); ++i)
    if (clocks[i] <= clock) return i;
  return clocks.size() - 1;
}

CostTables::CostTables(const Profile& profile, const PipelineShape& shape, double quantum) {
  const int model_stages = shape.num_model_stages();
  const Profile model =
      profile_for_schedule(by_model_stage(profile, shape.num_stages), shape.schedule, shape.num_stages, model_stages);
  tables_.resize(kNumInstructionKinds * static_cast<std::size_t>(model_stages));
  for (int s = 0; s < model_stages; ++s) {
    for (auto kind : kAllInstructionKinds) {
      auto rows = model.rows_for(s, kind);
      std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.frequency > b.frequency; });
      auto& t = tables_[static_cast<std::size_t>(operation_index(s, kind))];
      for (const auto& row : rows) {
        double time = row.time;
        if (quantum > 0) time = py_floordiv(row.time, quantum) * quantum;
        t.clocks.push_back(row.frequency);
        t.costs.push_back({time, row.energy});
      }
    }
  }
}

const CostTables::Table& CostTables::of(int model_stage, InstructionKind kind) const {
  return tables_[static_cast<std::size_t>(operation_index(model_stage, kind))];
}

std::optional<TimeEnergy> CostTables::cost(int model_stage, InstructionKind kind, int frequency) const {
  const auto& t = of(model_stage, kind);
  // clocks are sorted descending
  const auto it = std::lower_bound(t.clocks.begin(), t.clocks.end(), frequency, std::greater<>());
  if (it == t.clocks.end() || *it != frequency) return std::nullopt;
  return t.costs[static_cast<std::size_t>(it - t.clocks.begin())];
}

std::optional<TimeEnergy> CostTables::cost_or_estimate(int model_stage, InstructionKind kind, int frequency) const {
  if (auto exact = cost(model_stage, kind, frequency)) return exact;
  const auto& t = of(model_stage, kind);
  if (t.clocks.empty() || frequency <= 0) return std::nullopt;
  // clocks are sorted descending: the first one below `frequency`, if any, and the one above it
  const auto below = std::lower_bound(t.clocks.begin(), t.clocks.end(), frequency, std::greater<>());
  if (below != t.clocks.begin() && below != t.clocks.end()) {
    const auto i = static_cast<std::size_t>(below - t.clocks.begin());
    const double w = double(frequency - t.clocks[i]) / double(t.clocks[i - 1] - t.clocks[i]);
    const auto& lo = t.costs[i];
    const auto& hi = t.costs[i - 1];
    return TimeEnergy{lo.time + w * (hi.time - lo.time), lo.energy + w * (hi.energy - lo.energy)};
  }
  const std::size_t nearest = below == t.clocks.end() ? t.clocks.size() - 1 : 0;
  const int from = t.clocks[nearest];
  const auto& base = t.costs[nearest];
  for (auto other : kAllInstructionKinds) {
    if (other == kind) continue;
    const auto there = cost(model_stage, other, frequency), here = cost(model_stage, other, from);
    if (there && here && here->time > 0 && here->energy > 0)
      return TimeEnergy{base.time * there->time / here->time, base.energy * there->energy / here->energy};
  }
  return TimeEnergy{base.time * double(from) / double(frequency), base.energy};
}

}  // namespace perseus
