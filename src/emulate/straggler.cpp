#include "perseus/emulate/straggler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "perseus/util/error.hpp"

namespace perseus {

namespace {

// Relative slack when comparing emulated times with a deadline, so that a plan exactly as fast
// as all-max is not rejected over the last bit of a floating-point sum.
constexpr double kTimeSlack = 1e-9;

}  // namespace

int cheapest_by_deadline(const std::vector<PlanCost>& candidates, double deadline, int num_stages, double p_block) {
  int best = -1;
  double best_energy = 0;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const auto& c = candidates[i];
    if (c.time > deadline * (1 + kTimeSlack)) continue;
    const double energy = c.energy + num_stages * std::max(0.0, deadline - c.time) * p_block;
    if (best < 0 || energy < best_energy) {
      best = static_cast<int>(i);
      best_energy = energy;
    }
  }
  return best;
}

std::vector<StragglerRow> straggler_whatif(const PlanCost& all_max,
                                           const std::vector<std::pair<std::string, PlanCost>>& fixed,
                                           const std::vector<PlanCost>& frontier, const StragglerConfig& config,
                                           const std::vector<std::vector<PlanCost>>& fitted) {
  if (config.pipelines < 1) throw Error("the number of pipelines must be at least 1", ErrorKind::bad_setting);
  if (!fitted.empty() && fitted.size() != config.slowdowns.size()) {
    throw Error("fitted candidates must be given per slowdown", ErrorKind::bad_setting);
  }
  for (double f : config.slowdowns) {
    if (!(f >= 1) || !std::isfinite(f))
      throw Error(fmt::format("slowdown {} must be a number >= 1", f), ErrorKind::bad_setting);
  }
  const bool paper = config.convention == StragglerConvention::paper;
  const int S = config.num_stages;
  const double P = config.p_block;
  const int others = config.pipelines - 1;
  const double T = paper && config.reference_time > 0 ? config.reference_time : all_max.time;
  std::vector<PlanCost> candidates = frontier;
  if (!paper) candidates.push_back(all_max);  // the notebook chooses among frontier plans only
  // The notebook's pick: the least energy of the plan itself among those finishing by the deadline.
  auto least_energy_by = [&](double deadline) -> const PlanCost& {
    const PlanCost* best = &all_max;
    bool found = false;
    for (const auto& c : frontier) {
      if (c.time > deadline * (1 + kTimeSlack)) continue;
      if (!found || c.energy < best->energy) best = &c;
      found = true;
    }
    return *best;
  };
  const PlanCost& perseus_intrinsic = paper ? least_energy_by(T) : all_max;

  std::vector<StragglerRow> rows;
  for (std::size_t k = 0; k < config.slowdowns.size(); ++k) {
    const double factor = config.slowdowns[k];
    const double deadline = factor * T;
    // The straggler runs `intrinsic` stretched by the factor (all-max under perseus's meter, the
    // method's own plan under the paper's) and blocks once done until the cluster's iteration ends.
    auto straggler_at = [&](const PlanCost& intrinsic, double iteration) {
      return intrinsic.energy * factor + S * (iteration - intrinsic.time * factor) * P;
    };
    auto row_for = [&](const std::string& method, const PlanCost& plan, const PlanCost& intrinsic) {
      StragglerRow row;
      row.slowdown = factor;
      row.method = method;
      row.plan_time = plan.time;
      row.plan_energy = plan.energy;
      row.iteration_time = std::max({deadline, plan.time, intrinsic.time * factor});
      const double other_energy = plan.energy + S * (row.iteration_time - plan.time) * P;
      row.energy = straggler_at(intrinsic, row.iteration_time) + others * other_energy;
      return row;
    };
    const std::size_t first = rows.size();
    std::vector<PlanCost> intrinsics;  // per row, the straggler's plan
    auto add = [&](const std::string& method, const PlanCost& plan, const PlanCost& own) {
      const PlanCost& intrinsic = paper ? own : all_max;
      rows.push_back(row_for(method, plan, intrinsic));
      intrinsics.push_back(intrinsic);
    };
    add("all-max", all_max, all_max);
    for (const auto& [name, plan] : fixed) add(name, plan, plan);
    if (paper) {
      add("perseus", least_energy_by(deadline), perseus_intrinsic);
    } else {
      auto pool = candidates;
      if (!fitted.empty()) pool.insert(pool.end(), fitted[k].begin(), fitted[k].end());
      add("perseus", pool[cheapest_by_deadline(pool, deadline, S, P)], all_max);  // all-max always qualifies
    }
    const auto& base = rows[first];
    const double base_others = base.energy - straggler_at(intrinsics[0], base.iteration_time);
    for (std::size_t i = first; i < rows.size(); ++i) {
      auto& row = rows[i];
      row.saving = base.energy > 0 ? (base.energy - row.energy) / base.energy : 0;
      const double row_others = row.energy - straggler_at(intrinsics[i - first], row.iteration_time);
      row.saving_non_straggler = base_others > 0 ? (base_others - row_others) / base_others : 0;
    }
  }
  return rows;
}

std::string straggler_csv(const std::vector<StragglerRow>& rows) {
  std::string out = "slowdown,method,plan_time,plan_energy,iteration_time,energy,saving,saving_non_straggler\n";
  for (const auto& r : rows) {
    out += fmt::format("{},{},{:.9g},{:.9g},{:.9g},{:.9g},{:.6f},{:.6f}\n", r.slowdown, r.method, r.plan_time,
                       r.plan_energy, r.iteration_time, r.energy, r.saving, r.saving_non_straggler);
  }
  return out;
}

std::string straggler_table(const std::vector<StragglerRow>& rows) {
  std::string out = fmt::format("{:>8}  {:<18} {:>10} {:>10} {:>16} {:>8} {:>12}\n", "T'/T", "method", "plan T(s)",
                                "iter T(s)", "energy (J)", "saving", "non-strag.");
  for (const auto& r : rows) {
    out += fmt::format("{:>8.3f}  {:<18} {:>10.4f} {:>10.4f} {:>16.1f} {:>7.2f}% {:>11.2f}%\n", r.slowdown, r.method,
                       r.plan_time, r.iteration_time, r.energy, 100 * r.saving, 100 * r.saving_non_straggler);
  }
  return out;
}

}  // namespace perseus
