// temporary driver
#include <fmt/format.h>
#include <cstdio>
#include "perseus/solver/planning.hpp"
using namespace perseus;
int main(int argc, char** argv) {
  auto profile = read_profile(argv[1]);
  PlanningConfig c; c.num_stages = 8; c.num_microbatches = atoi(argv[2]); c.unit_time = atof(argv[3]); c.p_block = atof(argv[4]);
  auto p = make_planning_problem(profile, c);
  for (auto& s : p.specs) fprintf(stderr, "%zu opts %s: %s\n", s.options.options().size(), s.options.used_noise_factor()?"noise":"", s.model->describe().c_str());
  SolverOptions o; if (argc > 5) o.cut_rule = CutRule::exact;
  auto f = solve_frontier(p, o);
  fprintf(stderr, "stop: %s\n", f.stop_reason.c_str());
  printf("time,energy\n");
  for (auto& pt : f.points) { double rt = pt.quant_time * c.unit_time; fmt::print("{},{}\n", rt, pt.effective_cost + 8 * rt * c.p_block); }
}
