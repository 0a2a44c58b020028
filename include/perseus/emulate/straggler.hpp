#pragma once
// Large-scale what-if (the Perseus paper's emulation): D data-parallel pipelines, one
// of them a straggler whose iteration takes T' = factor * T (T: the all-max iteration time). The
// gradient synchronization makes every pipeline wait for the slowest, so the others either keep
// their plan and block at P_block for the rest (all-max, EnvPipe, Zeus) or, with perseus, pick
// the cheapest frontier plan that still finishes by T'.
#include <string>
#include <vector>

namespace perseus {

struct PlanCost {
  double time = 0;    // emulated iteration time, seconds
  double energy = 0;  // emulated energy of one pipeline's iteration, joules
};

// How the what-if is metered. `perseus` (the default): T is all-max's emulated time, the straggler
// runs all-max stretched under every method, perseus picks the plan with the least energy
// including the blocking until T', and energies are emulated. `paper`: the Perseus evaluation
// notebook's conventions -- T is the planner's quantized fastest time (`reference_time`), each
// method's straggler runs that method's own plan for T'/T = 1 stretched, perseus picks the
// frontier plan with the least energy of its own (blocking until T' ignored), and the frontier's
// energies are the planner's predictions (the caller passes them as `frontier`).
enum class StragglerConvention { perseus, paper };

struct StragglerConfig {
  int num_stages = 0;
  double p_block = 0;
  int pipelines = 1;              // D, including the straggler
  std::vector<double> slowdowns;  // T'/T, each >= 1
  StragglerConvention convention = StragglerConvention::perseus;
  double reference_time = 0;  // paper: T, the planner's fastest time; 0: all-max's time
};

struct StragglerRow {
  double slowdown = 1;
  std::string method;
  double plan_time = 0;  // the non-straggler pipelines' plan
  double plan_energy = 0;
  double iteration_time = 0;        // max(T', plan time)
  double energy = 0;                // all D pipelines, one iteration, joules
  double saving = 0;                // against all-max at the same slowdown, whole cluster
  double saving_non_straggler = 0;  // the same over the D - 1 non-straggler pipelines
};

// The straggler itself runs all-max with every instruction stretched by the factor at unchanged
// power (energy E_allmax * factor); it is the same under every method. `fixed` are methods that
// keep one plan; `frontier` are the emulated frontier plans perseus chooses among (all-max is
// always a candidate too, so perseus never does worse than it); `fitted`, when given, holds per
// slowdown further candidates (frontier plans fitted to that deadline, see deadline_fit.hpp).
// Rows: per slowdown, all-max, then each fixed method in order, then "perseus".
std::vector<StragglerRow> straggler_whatif(const PlanCost& all_max,
                                           const std::vector<std::pair<std::string, PlanCost>>& fixed,
                                           const std::vector<PlanCost>& frontier, const StragglerConfig& config,
                                           const std::vector<std::vector<PlanCost>>& fitted = {});

// The cheapest candidate (energy plus blocking until `deadline`) that finishes by `deadline`;
// -1 when none does.
int cheapest_by_deadline(const std::vector<PlanCost>& candidates, double deadline, int num_stages, double p_block);

std::string straggler_csv(const std::vector<StragglerRow>& rows);
std::string straggler_table(const std::vector<StragglerRow>& rows);

}  // namespace perseus
