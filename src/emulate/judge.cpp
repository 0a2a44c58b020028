#include "perseus/emulate/judge.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "perseus/util/error.hpp"

namespace perseus {

std::vector<JudgedPoint> judge_frontier(const FrontierRecord& record, const Emulator& emulator) {
  const auto& config = emulator.config();
  if (config.num_stages != record.num_stages || config.num_microbatches != record.num_microbatches ||
      config.schedule != record.schedule || config.extra_forwards != record.extra_forwards) {
    throw Error("the emulated pipeline (stages, microbatches, schedule) differs from the frontier's",
                ErrorKind::bad_setting);
  }
  std::vector<JudgedPoint> judged;
  judged.reserve(record.points.size());
  Plan plan;
  plan.frequencies = record.start_frequencies;
  for (std::size_t i = 0; i < record.points.size(); ++i) {
    advance_plan(record, plan, i);
    const auto [time, energy] = emulator.time_and_energy(plan.frequencies);
    judged.push_back({i, plan.time, plan.energy, time, energy});
  }
  return judged;
}

JudgeSummary summarize(const std::vector<JudgedPoint>& points) {
  JudgeSummary summary;
  summary.points = points.size();
  double sum = 0;
  for (const auto& p : points) {
    const double e = std::abs(p.energy_error());
    sum += e;
    summary.max_abs_energy_error = std::max(summary.max_abs_energy_error, e);
    if (p.emulated_time > 0) {
      summary.max_abs_time_error =
          std::max(summary.max_abs_time_error, std::abs(p.model_time - p.emulated_time) / p.emulated_time);
    }
  }
  if (!points.empty()) summary.mean_abs_energy_error = sum / points.size();
  return summary;
}

std::string judged_csv(const std::vector<JudgedPoint>& points) {
  std::string out = "index,model_time,model_energy,emulated_time,emulated_energy,energy_error\n";
  for (const auto& p : points) {
    out += fmt::format("{},{:.9g},{:.9g},{:.9g},{:.9g},{:.3e}\n", p.index, p.model_time, p.model_energy,
                       p.emulated_time, p.emulated_energy, p.energy_error());
  }
  return out;
}

}  // namespace perseus
