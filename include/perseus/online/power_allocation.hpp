#pragma once
// Sharing a cluster's power budget among its jobs (docs/design.md#a-power-budget-for-the-cluster).
// Each job offers operating points: the power it draws there and the value it keeps (its weighted
// throughput). One point per job is chosen so that the power summed over the jobs is within the
// budget and the value summed over them is the largest.
//
// That is a multiple-choice knapsack. It is solved by marginal analysis on each job's upper concave
// hull of (power, value) (Sinha and Zoltners' greedy for the multiple-choice knapsack): every job
// starts at its most valuable point and, while the sum is over the budget, the job whose next hull
// step down gives up the least value per watt saved takes that step. Taking the step that crosses
// the budget only in part would be the optimum of the continuous relaxation (a Lagrangian exchange:
// every job ends where a watt costs the same value), so the discrete answer is at most that one step
// (one job, one hull step) below the discrete optimum. The slack the crossing step leaves is then
// filled again with points off the hulls that fit it, which only adds value. Frontiers are close
// to convex, so the hulls keep nearly every point, and their steps are small.
//
// Pure and deterministic: O(points x log jobs) for the marginal analysis.
#include <cstddef>
#include <vector>

namespace perseus::online {

// One way to run a job under a cluster's power budget: every pipeline slowed to an iteration time
// (a pace), each running the cheapest plan that finishes by it, as for a straggler.
struct PaceOption {
  double iteration_time = 0;  // seconds per iteration, as measured
  double energy = 0;          // joules per iteration, every GPU of the job, as predicted
};

struct PowerOption {
  double power = 0;  // watts the job draws at this point
  double value = 0;  // what it keeps there (weighted throughput); larger is better
};

struct PowerAllocation {
  std::vector<std::size_t> choice;  // per job, an index into its options
  double power = 0, value = 0;      // summed over the jobs at the chosen points
  // False when even every job's least-power point is over the budget; every job is at that point then.
  bool within_budget = false;
  // The value of the step that crossed the budget (0 when none was needed): the answer is at most
  // this much below the optimum.
  double bound_gap = 0;
};

// `options`: per job, at least one option with a finite power >= 0 and a finite value; `budget` a
// finite number of watts. Throws std::invalid_argument otherwise.
PowerAllocation allocate_power(const std::vector<std::vector<PowerOption>>& options, double budget);

}  // namespace perseus::online
