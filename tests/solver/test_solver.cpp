#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>

#include "max_flow_oracle.hpp"
#include "perseus/solver/exact_times.hpp"
#include "perseus/solver/phillips_dessouky.hpp"
#include "perseus/util/error.hpp"
#include "solver_fixtures.hpp"

using namespace perseus;
using namespace perseus::fixtures;

namespace {

// Two solvers' frontiers, point for point and change for change, and why each ended.
void expect_same_frontier(const Frontier& a, const Frontier& b) {
  ASSERT_EQ(a.points.size(), b.points.size());
  for (std::size_t i = 0; i < a.points.size(); ++i) {
    ASSERT_EQ(a.points[i].quant_time, b.points[i].quant_time) << "point " << i;
    ASSERT_EQ(a.points[i].cost_change, b.points[i].cost_change) << "point " << i;
    ASSERT_EQ(a.points[i].effective_cost, b.points[i].effective_cost) << "point " << i;
    ASSERT_EQ(a.points[i].changes_begin, b.points[i].changes_begin) << "point " << i;
    ASSERT_EQ(a.points[i].exact_time, b.points[i].exact_time) << "point " << i;
    ASSERT_EQ(a.points[i].exact_energy, b.points[i].exact_energy) << "point " << i;
  }
  ASSERT_EQ(a.changes.size(), b.changes.size());
  for (std::size_t i = 0; i < a.changes.size(); ++i) {
    ASSERT_EQ(a.changes[i].instruction, b.changes[i].instruction) << "change " << i;
    ASSERT_EQ(a.changes[i].duration, b.changes[i].duration) << "change " << i;
  }
  EXPECT_EQ(a.stop_reason, b.stop_reason);
  EXPECT_EQ(a.stop_instruction, b.stop_instruction);
}

// Every point's emulated time and energy, as the solver kept them up to date step by step, against
// the emulated times of its plan computed afresh.
void expect_emulated_times_of_each_point(const PlanningProblem& problem, const Frontier& frontier) {
  std::vector<int> durations = frontier.start_durations;
  for (std::size_t p = 0; p < frontier.points.size(); ++p) {
    for (std::size_t c = frontier.points[p].changes_begin; c < frontier.changes_end(p); ++c)
      durations[frontier.changes[c].instruction] = frontier.changes[c].duration;
    ExactTimes fresh(problem, durations);
    ASSERT_EQ(frontier.points[p].exact_time, fresh.time()) << "point " << p;
    const double energy = fresh.energy();
    ASSERT_NEAR(frontier.points[p].exact_energy, energy, 1e-9 * energy) << "point " << p;
  }
}

}  // namespace

TEST(Solver, HandComputedChain) {
  // One stage, one microbatch: F then B in series. Marginal costs: F 1 then 2 J per unit,
  // B 1.5 then 2. Each step speeds up the cheapest; on a tie the earlier arc is cut first.
  PlanningProblem problem;
  problem.dag = build_pipeline_dag(ScheduleKind::one_f_one_b, 1, 1);
  problem.specs = {pwl_spec({{10, 10}, {9, 11}, {8, 13}}), pwl_spec({{20, 20}, {19, 21.5}, {18, 23.5}})};
  const Frontier f = solve_frontier(problem);
  EXPECT_EQ(f.start_quant_time, 30);
  EXPECT_DOUBLE_EQ(f.start_effective_cost, 30);
  ASSERT_EQ(f.points.size(), 4u);
  const std::vector<int> times = {29, 28, 27, 26};
  const std::vector<double> costs = {31, 32.5, 34.5, 36.5};
  const std::vector<std::vector<int>> durations = {{9, 20}, {9, 19}, {8, 19}, {8, 18}};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(f.points[i].quant_time, times[i]);
    EXPECT_NEAR(f.points[i].effective_cost, costs[i], 1e-9);
    EXPECT_EQ(f.durations_at(i), durations[i]);
  }
  EXPECT_NEAR(f.points[1].cost_change, 1.5, 1e-9);
  EXPECT_EQ(f.stop_reason, StopReason::fixed_dependency_in_cut);
  EXPECT_EQ(f.stop_text(), "the minimum cut crosses a fixed dependency: the iteration cannot get shorter");
}

// A step that costs nothing (a flat stretch of a cost model) is time for free: the reference stops
// there, the default goes on to the fastest time. Up to the reference's stop both agree.
TEST(Solver, FreeStepsAreTakenUnlessTheReferenceStopsAsked) {
  PlanningProblem problem;
  problem.dag = build_pipeline_dag(ScheduleKind::one_f_one_b, 1, 1);
  problem.specs = {pwl_spec({{10, 10}, {9, 10}, {8, 11}}), pwl_spec({{20, 20}, {19, 21.5}, {18, 23.5}})};
  SolverOptions reference;
  reference.reference_stops = true;
  const Frontier stopped = solve_frontier(problem, reference);
  EXPECT_TRUE(stopped.points.empty());
  EXPECT_EQ(stopped.stop_reason, StopReason::negligible_cost_change);
  EXPECT_EQ(stopped.stop_cut, std::vector<int>{0}) << "the forward, whose step was free";

  const Frontier f = solve_frontier(problem);
  ASSERT_EQ(f.points.size(), 4u);
  const std::vector<int> times = {29, 28, 27, 26};
  const std::vector<double> costs = {30, 31, 32.5, 34.5};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(f.points[i].quant_time, times[i]);
    EXPECT_NEAR(f.points[i].effective_cost, costs[i], 1e-9);
  }
  EXPECT_EQ(f.stop_reason, StopReason::fixed_dependency_in_cut);
}

TEST(Solver, SlowsDownWhereTheCutCrossesBackward) {
  // Two stages: the cheapest way to shorten eventually re-lengthens an instruction that an
  // earlier step sped up. Checked by the invariant that every point is one unit faster.
  const auto problem = synthetic_problem(3, 4, 0.0, 1, CostModelKind::piecewise_linear);
  const Frontier f = solve_frontier(problem);
  ASSERT_GT(f.points.size(), 50u);
  int previous = f.start_quant_time;
  for (const auto& p : f.points) {
    EXPECT_EQ(p.quant_time, previous - 1);
    previous = p.quant_time;
  }
}

// The fast solver (Dinic, series contraction, warm starts) and the library oracle (Boost's
// push-relabel, fresh networks built as the reference builds them) must produce the same
// frontier on inputs nobody gave us. With exact cut arithmetic the minimum cut does not depend
// on which maximum flow was found, so the frontiers must be identical.
TEST(Solver, FastSolverMatchesBoostOracleOnSyntheticProfiles) {
  struct Case {
    int stages, microbatches;
    double noise;
    std::uint64_t seed;
    CostModelKind model;
    ScheduleKind schedule;
    int virtual_stages = 1;
  };
  const std::vector<Case> cases = {
      {2, 3, 0.0, 1, CostModelKind::exponential, ScheduleKind::one_f_one_b},
      {4, 4, 0.01, 2, CostModelKind::exponential, ScheduleKind::one_f_one_b},
      {3, 7, 0.02, 3, CostModelKind::piecewise_linear, ScheduleKind::one_f_one_b},
      {4, 2, 0.0, 4, CostModelKind::exponential, ScheduleKind::one_f_one_b},
      {3, 4, 0.01, 5, CostModelKind::exponential, ScheduleKind::gpipe},
      {2, 4, 0.01, 6, CostModelKind::exponential, ScheduleKind::interleaved, 2},
      {3, 3, 0.0, 7, CostModelKind::piecewise_linear, ScheduleKind::interleaved, 3},
      // Zero-bubble schedules: their critical arcs come and go at most points, which the network
      // follows by resting arcs instead of rebuilding (see the solver).
      {3, 6, 0.01, 8, CostModelKind::exponential, ScheduleKind::zb_h1},
      {4, 8, 0.02, 9, CostModelKind::piecewise_linear, ScheduleKind::zb_h1},
      {2, 4, 0.01, 10, CostModelKind::exponential, ScheduleKind::zbv, 2},
      {2, 4, 0.0, 11, CostModelKind::exponential, ScheduleKind::dualpipev, 2},
  };
  for (const auto& c : cases) {
    const auto problem =
        synthetic_problem(c.stages, c.microbatches, c.noise, c.seed, c.model, c.schedule, c.virtual_stages);
    SolverOptions fast, oracle;
    fast.cut_rule = oracle.cut_rule = CutRule::exact;
    oracle.max_flow_oracle = boost_max_flow_oracle();
    const Frontier a = solve_frontier(problem, fast);
    const Frontier b = solve_frontier(problem, oracle);
    SCOPED_TRACE(testing::Message() << c.stages << " stages, " << c.microbatches << " microbatches, seed " << c.seed);
    EXPECT_GT(a.points.size(), 10u);
    ASSERT_EQ(a.points.size(), b.points.size());
    for (std::size_t i = 0; i < a.points.size(); ++i) {
      ASSERT_EQ(a.points[i].quant_time, b.points[i].quant_time) << "point " << i;
      ASSERT_DOUBLE_EQ(a.points[i].effective_cost, b.points[i].effective_cost) << "point " << i;
    }
    EXPECT_EQ(a.durations_at(a.points.size() - 1), b.durations_at(b.points.size() - 1));
    EXPECT_EQ(a.stop_reason, b.stop_reason);
    EXPECT_EQ(a.stop_instruction, b.stop_instruction);
    // The reference's cut rule differs only on residuals of exactly 1e-6 J.
    const Frontier r = solve_frontier(problem);
    EXPECT_EQ(r.points.size(), a.points.size());
  }
}

// The same on 200 small random pipelines: random stages (1-4), microbatches (1-6),
// schedules (every one; zero-bubble ones with a random split of the backward), noise, GPU shape, cost model and
// blocking power. Exact cut arithmetic: the frontiers must be identical. Reference arithmetic: the two algorithms may
// find different maximum flows, and where a residual of exactly 1e-6 J decides the cut the reference's own answer
// depends on which, so there only the frontiers' ends are compared.
TEST(Solver, FastSolverMatchesBoostOracleOnHundredsOfRandomPipelines) {
#ifdef PERSEUS_SANITIZED
  constexpr int kTrials = 50;  // the first 50 of the same 200: the sanitizers check memory, not more cases
#else
  constexpr int kTrials = 200;
#endif
  std::mt19937_64 rng(2026);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int compared = 0, points = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const int stages = pick(1, 4);
    const ScheduleKind schedule =
        std::array{ScheduleKind::one_f_one_b, ScheduleKind::gpipe, ScheduleKind::interleaved,
                   ScheduleKind::zb_h1,       ScheduleKind::zbv,   ScheduleKind::dualpipev}[pick(0, 5)];
    int microbatches = pick(1, 6), virtual_stages = 1;
    if (schedule == ScheduleKind::interleaved) {
      virtual_stages = pick(2, 3);
      microbatches = stages * pick(1, 2);
    }
    if (schedule == ScheduleKind::zbv || schedule == ScheduleKind::dualpipev) virtual_stages = 2;
    if (schedule == ScheduleKind::dualpipev) microbatches = std::max(microbatches, 2 * stages);
    SyntheticGpu gpu;
    gpu.num_stages = stages * virtual_stages;
    gpu.noise = std::array{0.0, 0.005, 0.02, 0.05}[pick(0, 3)];
    gpu.seed = static_cast<std::uint64_t>(trial);
    gpu.forward_time = 0.004 * pick(1, 4);
    gpu.clock_step = std::array{30, 60, 120}[pick(0, 2)];
    gpu.compute_share = 0.5 + 0.1 * pick(0, 4);
    PlanningConfig config;
    config.num_stages = stages;
    config.num_microbatches = microbatches;
    config.virtual_stages = virtual_stages;
    config.schedule = schedule;
    config.unit_time = 0.001;
    config.p_block = 40.0 + 10 * pick(0, 5);
    config.cost_model = std::array{CostModelKind::automatic, CostModelKind::piecewise_linear}[pick(0, 1)];
    Profile profile = parse_profile(synthetic_profile_csv(gpu), "random.csv");
    if (splits_backward(schedule)) profile = split_backward(profile, 0.1 * pick(2, 8));
    const auto problem = make_planning_problem(profile, config);
    SCOPED_TRACE(testing::Message() << "trial " << trial << ": " << stages << " stages, " << microbatches
                                    << " microbatches, " << to_string(schedule) << " V=" << virtual_stages);
    SolverOptions fast, oracle;
    fast.cut_rule = oracle.cut_rule = CutRule::exact;
    oracle.max_flow_oracle = boost_max_flow_oracle();
    const Frontier a = solve_frontier(problem, fast);
    const Frontier b = solve_frontier(problem, oracle);
    ASSERT_EQ(a.points.size(), b.points.size());
    for (std::size_t i = 0; i < a.points.size(); ++i) {
      ASSERT_EQ(a.points[i].quant_time, b.points[i].quant_time) << "point " << i;
      ASSERT_DOUBLE_EQ(a.points[i].effective_cost, b.points[i].effective_cost) << "point " << i;
    }
    SolverOptions reference_oracle;
    reference_oracle.max_flow_oracle = boost_max_flow_oracle();
    const Frontier r = solve_frontier(problem);
    const Frontier ro = solve_frontier(problem, reference_oracle);
    ASSERT_FALSE(r.points.empty());
    EXPECT_EQ(r.points.front().quant_time, ro.points.front().quant_time);
    EXPECT_EQ(r.points.back().quant_time, ro.points.back().quant_time);
    ++compared;
    points += static_cast<int>(a.points.size());
  }
  EXPECT_EQ(compared, kTrials);
  RecordProperty("frontier_points", points);
}

TEST(Solver, StopRequestLeavesAValidShorterFrontier) {
  const auto problem = synthetic_problem(3, 4, 0.0, 1);
  std::atomic<bool> stop{false};
  SolverOptions options;
  options.stop = &stop;
  std::size_t seen = 0;
  options.on_progress = [&](std::size_t points, int) {
    seen = points;
    if (points == 5) stop = true;
  };
  const Frontier f = solve_frontier(problem, options);
  EXPECT_TRUE(f.interrupted);
  EXPECT_EQ(f.points.size(), 5u);
  EXPECT_EQ(seen, 5u);
  EXPECT_EQ(f.stop_reason, StopReason::interrupted);
}

// With a second thread the flows run ahead of the times: an interrupt keeps exactly the points the
// progress callback saw, and they are the one-thread frontier's first points.
TEST(Solver, AStopWithTwoThreadsKeepsThePointsReportedSoFar) {
  const auto problem = synthetic_problem(6, 12, 0.01, 3);
  SolverOptions one;
  one.threads = 1;
  const Frontier full = solve_frontier(problem, one);
  ASSERT_GT(full.points.size(), 200u);
  for (const std::size_t stop_at : {1u, 57u, 200u}) {
    std::atomic<bool> stop{false};
    SolverOptions two;
    two.threads = 2;
    two.stop = &stop;
    std::size_t seen = 0;
    two.on_progress = [&](std::size_t points, int) {
      seen = points;
      if (points == stop_at) stop = true;
    };
    const Frontier f = solve_frontier(problem, two);
    EXPECT_TRUE(f.interrupted);
    ASSERT_EQ(f.points.size(), stop_at);
    EXPECT_EQ(seen, stop_at);
    for (std::size_t i = 0; i < f.points.size(); ++i) {
      ASSERT_EQ(f.points[i].quant_time, full.points[i].quant_time) << "point " << i;
      ASSERT_EQ(f.points[i].effective_cost, full.points[i].effective_cost) << "point " << i;
    }
    ASSERT_EQ(f.changes.size(), full.points[stop_at].changes_begin);
  }
}

// With a second thread, each point's flow is solved on the last point's critical arcs while the
// other thread computes the times and checks that the arcs stay critical; where they do not (the
// first points of every frontier, and wherever the critical subgraph grows), the guess is taken
// back. Every point, every duration change and the stop reason must be the one thread's, under
// both cut rules, on pipelines of every schedule.
TEST(Solver, TwoThreadsPlanExactlyTheOneThreadFrontier) {
  struct Case {
    int stages, microbatches;
    double noise;
    std::uint64_t seed;
    ScheduleKind schedule;
    int virtual_stages;
    CutRule rule;
  };
  const std::vector<Case> cases = {
      {4, 8, 0.0, 1, ScheduleKind::one_f_one_b, 1, CutRule::reference},
      {4, 12, 0.02, 2, ScheduleKind::one_f_one_b, 1, CutRule::exact},
      {6, 9, 0.01, 3, ScheduleKind::one_f_one_b, 1, CutRule::reference},
      {3, 6, 0.03, 4, ScheduleKind::gpipe, 1, CutRule::reference},
      {2, 4, 0.01, 5, ScheduleKind::interleaved, 2, CutRule::reference},
      {3, 6, 0.0, 6, ScheduleKind::interleaved, 2, CutRule::exact},
      {4, 12, 0.01, 7, ScheduleKind::zb_h1, 1, CutRule::reference},
      {3, 9, 0.02, 8, ScheduleKind::zb_h1, 1, CutRule::exact},
      {3, 6, 0.01, 9, ScheduleKind::zbv, 2, CutRule::reference},
      {3, 8, 0.0, 10, ScheduleKind::dualpipev, 2, CutRule::reference},
  };
  std::size_t points = 0, changes = 0;
  for (const auto& c : cases) {
    const auto problem = synthetic_problem(c.stages, c.microbatches, c.noise, c.seed, CostModelKind::automatic,
                                           c.schedule, c.virtual_stages);
    SCOPED_TRACE(testing::Message() << c.stages << " stages, " << c.microbatches << " microbatches, seed " << c.seed);
    SolverOptions one, two;
    one.threads = 1;
    two.threads = 2;
    one.cut_rule = two.cut_rule = c.rule;
    const Frontier a = solve_frontier(problem, one);
    const Frontier b = solve_frontier(problem, two);
    ASSERT_NO_FATAL_FAILURE(expect_same_frontier(a, b));
    ASSERT_NO_FATAL_FAILURE(expect_emulated_times_of_each_point(problem, b));
    points += a.points.size();
    changes += a.changes.size();
  }
  EXPECT_GT(points, 1000u);
  EXPECT_GT(changes, points);
  RecordProperty("frontier_points", static_cast<int>(points));
}

// Zero-bubble schedules change their critical arcs at most points; the flow network follows them
// with resting arcs instead of being rebuilt. Under the exact cut rule the minimum cut the solver
// takes is the one closest to the source, the same for every maximum flow: the frontiers, to every
// duration change, must be those of a network rebuilt at each change.
TEST(Solver, RestingArcsPlanTheFrontierOfARebuiltNetwork) {
  struct Case {
    int stages, microbatches;
    std::uint64_t seed;
    ScheduleKind schedule;
    int virtual_stages;
  };
  const std::vector<Case> cases = {
      {4, 16, 1, ScheduleKind::zb_h1, 1},    {6, 12, 2, ScheduleKind::zb_h1, 1}, {3, 9, 3, ScheduleKind::zbv, 2},
      {3, 8, 4, ScheduleKind::dualpipev, 2}, {4, 12, 5, ScheduleKind::gpipe, 1},
  };
  std::size_t points = 0;
  for (const auto& c : cases) {
    const auto problem = synthetic_problem(c.stages, c.microbatches, 0.02, c.seed, CostModelKind::automatic, c.schedule,
                                           c.virtual_stages);
    SCOPED_TRACE(testing::Message() << to_string(c.schedule) << ", " << c.stages << " stages, " << c.microbatches
                                    << " microbatches");
    for (int threads : {1, 2}) {
      SolverOptions resting, rebuilt;
      resting.cut_rule = rebuilt.cut_rule = CutRule::exact;
      resting.threads = rebuilt.threads = threads;
      rebuilt.most_resting = 0;
      const Frontier a = solve_frontier(problem, resting);
      const Frontier b = solve_frontier(problem, rebuilt);
      ASSERT_NO_FATAL_FAILURE(expect_same_frontier(a, b));
      points += a.points.size();
    }
  }
  EXPECT_GT(points, 1000u);
}

TEST(Solver, RejectsAThreadCountItDoesNotHave) {
  const auto problem = synthetic_problem(2, 2, 0.0, 1);
  SolverOptions options;
  options.threads = 3;
  EXPECT_THROW(solve_frontier(problem, options), Error);
  options.threads = -1;
  EXPECT_THROW(solve_frontier(problem, options), Error);
}

TEST(Solver, RejectsAShareOfRestingArcsOutsideZeroToOne) {
  const auto problem = synthetic_problem(2, 2, 0.0, 1);
  for (double share : {-0.1, 1.0, std::nan("")}) {
    SolverOptions options;
    options.most_resting = share;
    EXPECT_THROW(solve_frontier(problem, options), Error) << share;
  }
}
