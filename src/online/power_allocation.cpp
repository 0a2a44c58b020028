#include "perseus/online/power_allocation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <queue>
#include <stdexcept>
#include <tuple>

namespace perseus::online {
namespace {

// One job's points as the allocation walks them: the efficient ones (no other point has less power
// and at least as much value), by power ascending and value strictly ascending, and the upper
// concave hull among them.
struct JobPoints {
  std::vector<std::size_t> efficient;  // indices into the job's options
  std::vector<std::size_t> hull;       // indices into the job's options, power ascending
};

JobPoints job_points(const std::vector<PowerOption>& options) {
  std::vector<std::size_t> order(options.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Power ascending; at equal power the most valuable first (the others are dominated); the index
  // last, so that the result does not depend on the sort's stability.
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tuple(options[a].power, -options[a].value, a) < std::tuple(options[b].power, -options[b].value, b);
  });
  JobPoints out;
  for (std::size_t i : order)
    if (out.efficient.empty() || options[i].value > options[out.efficient.back()].value) out.efficient.push_back(i);
  for (std::size_t i : out.efficient) {
    // Drop the last hull point while it lies on or below the line from the one before it to this one.
    while (out.hull.size() >= 2) {
      const PowerOption& a = options[out.hull[out.hull.size() - 2]];
      const PowerOption& b = options[out.hull.back()];
      const PowerOption& c = options[i];
      if ((b.value - a.value) * (c.power - a.power) > (c.value - a.value) * (b.power - a.power)) break;
      out.hull.pop_back();
    }
    out.hull.push_back(i);
  }
  return out;
}

void check(const std::vector<std::vector<PowerOption>>& options, double budget) {
  if (!std::isfinite(budget)) throw std::invalid_argument("the power budget must be a finite number of watts");
  for (std::size_t j = 0; j < options.size(); ++j) {
    if (options[j].empty()) throw std::invalid_argument(fmt::format("job {} offers no operating point", j));
    for (std::size_t k = 0; k < options[j].size(); ++k) {
      const auto& o = options[j][k];
      if (!std::isfinite(o.power) || o.power < 0 || !std::isfinite(o.value))
        throw std::invalid_argument(fmt::format(
            "job {}'s point {}: power {} W and value {} must be finite (power >= 0)", j, k, o.power, o.value));
    }
  }
}

}  // namespace

PowerAllocation allocate_power(const std::vector<std::vector<PowerOption>>& options, double budget) {
  check(options, budget);
  const std::size_t jobs = options.size();
  std::vector<JobPoints> points;
  points.reserve(jobs);
  for (const auto& o : options) points.push_back(job_points(o));

  PowerAllocation out;
  out.choice.resize(jobs);
  std::vector<std::size_t> position(jobs);  // per job, its place on its hull
  auto option = [&](std::size_t j, std::size_t index) -> const PowerOption& { return options[j][index]; };
  // Summed afresh from the chosen points each time, so that no rounding of earlier steps builds up.
  auto total_power = [&] {
    double sum = 0;
    for (std::size_t j = 0; j < jobs; ++j) sum += option(j, out.choice[j]).power;
    return sum;
  };
  for (std::size_t j = 0; j < jobs; ++j) {
    position[j] = points[j].hull.size() - 1;
    out.choice[j] = points[j].hull[position[j]];
  }
  out.power = total_power();

  // The marginal analysis: the next step down of every job, least value lost per watt first.
  struct Step {
    double rate;  // value lost per watt saved
    std::size_t job;
    bool operator>(const Step& other) const { return std::tie(rate, job) > std::tie(other.rate, other.job); }
  };
  std::priority_queue<Step, std::vector<Step>, std::greater<>> steps;
  auto push_step = [&](std::size_t j) {
    if (position[j] == 0) return;
    const PowerOption& upper = option(j, points[j].hull[position[j]]);
    const PowerOption& lower = option(j, points[j].hull[position[j] - 1]);
    steps.push({(upper.value - lower.value) / (upper.power - lower.power), j});
  };
  for (std::size_t j = 0; j < jobs; ++j) push_step(j);
  while (out.power > budget && !steps.empty()) {
    const std::size_t j = steps.top().job;
    steps.pop();
    const PowerOption& upper = option(j, points[j].hull[position[j]]);
    const PowerOption& lower = option(j, points[j].hull[position[j] - 1]);
    --position[j];
    out.choice[j] = points[j].hull[position[j]];
    out.power = total_power();
    if (out.power <= budget) out.bound_gap = upper.value - lower.value;
    else push_step(j);
  }
  out.within_budget = out.power <= budget;
  // Filling the slack: the largest gain in value that fits, again and again (any efficient point,
  // not only the hulls').
  while (out.within_budget) {
    double slack = budget - out.power, best_gain = 0;
    std::size_t best_job = jobs, best_point = 0;
    for (std::size_t j = 0; j < jobs; ++j) {
      const PowerOption& now = option(j, out.choice[j]);
      for (std::size_t i : points[j].efficient) {
        const PowerOption& o = option(j, i);
        if (o.power - now.power > slack) break;  // power ascending: the rest fit even less
        if (o.value - now.value > best_gain) best_gain = o.value - now.value, best_job = j, best_point = i;
      }
    }
    if (best_job == jobs) break;
    const std::size_t before = out.choice[best_job];
    out.choice[best_job] = best_point;
    out.power = total_power();
    if (out.power > budget) {  // over only by rounding: keep what was
      out.choice[best_job] = before;
      out.power = total_power();
      break;
    }
  }
  for (std::size_t j = 0; j < jobs; ++j) out.value += option(j, out.choice[j]).value;
  return out;
}

}  // namespace perseus::online
