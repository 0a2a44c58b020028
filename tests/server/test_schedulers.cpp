// Schedulers on their own: clock expansion, each scheduler's rounds, the 3D fold, and argument
// checking at server start.
#include <gtest/gtest.h>

#include <filesystem>
#include <tuple>

#include "perseus/client/client.hpp"
#include "perseus/plan/plan_files.hpp"
#include "perseus/profile/profile.hpp"
#include "perseus/server/scheduler.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/util/error.hpp"

namespace perseus::server {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

RankInfo rank(int r, int pp, std::vector<std::string> schedule, int dp = 0) {
  RankInfo info;
  info.rank = r;
  info.pp_rank = pp;
  info.dp_rank = dp;
  info.pipe_schedule = std::move(schedule);
  info.power_state_range = {1410, 1300, 1200, 1100, 1000};
  return info;
}

SchedulerContext context(int pp, int dp = 1) {
  SchedulerContext c;
  c.job.pp_degree = pp;
  c.job.dp_degree = dp;
  c.job.world_size = pp * dp;
  c.job.num_microbatches = 2;
  for (int d = 0; d < dp; ++d)
    for (int s = 0; s < pp; ++s)
      c.ranks.push_back(rank(d * pp + s, s, {"load", "forward", "p2p", "forward", "backward", "step", "backward"}, d));
  std::sort(c.ranks.begin(), c.ranks.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  return c;
}

ProfilingResult result(int r, double time, double energy, double f_time, double f_energy) {
  ProfilingResult p;
  p.rank = r;
  p.iter_time = {time, time};
  p.iter_energy = {energy, energy};
  p.time_breakdown = {{"forward", {{f_time, f_time}, {f_time, f_time}}},
                      {"backward", {{2 * f_time, 2 * f_time}, {2 * f_time, 2 * f_time}}}};
  p.energy_breakdown = {{"forward", {{f_energy, f_energy}, {f_energy, f_energy}}},
                        {"backward", {{2 * f_energy, 2 * f_energy}, {2 * f_energy, 2 * f_energy}}}};
  return p;
}

TEST(ExpandComputeClocks, OtherInstructionsInheritThePrecedingClock) {
  std::vector<std::string> schedule = {"load", "forward", "p2p", "forward", "backward", "step"};
  EXPECT_EQ(expand_compute_clocks(schedule, {1200, 1100, 1000}, "t"),
            (std::vector<int>{1200, 1200, 1200, 1100, 1000, 1000}));
  EXPECT_THROW(expand_compute_clocks(schedule, {1200}, "t"), std::runtime_error);
}

TEST(Schedulers, AllMaxAndTwoFrequencies) {
  auto ctx = context(2);
  auto all_max = configure_scheduler("AllMaxFrequency", json::object())(ctx);
  auto s = all_max->next_schedule();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].power_states, std::vector<int>(7, 1410));
  auto two = configure_scheduler("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1000}})(ctx);
  EXPECT_EQ(two->next_schedule()[0].power_states, (std::vector<int>{1200, 1200, 1200, 1200, 1000, 1000, 1000}));
  EXPECT_THROW(configure_scheduler("TwoFrequencies", {{"forward_freq", 1205}, {"backward_freq", 1000}})(ctx),
               std::runtime_error);  // not a clock the GPUs support
}

TEST(Schedulers, ArgumentsAreCheckedAtStart) {
  EXPECT_THROW(configure_scheduler("Nope", json::object()), Error);
  EXPECT_THROW(configure_scheduler("AllMaxFrequency", {{"x", 1}}), Error);
  EXPECT_THROW(configure_scheduler("TwoFrequencies", {{"forward_freq", 1200}}), Error);
  EXPECT_THROW(configure_scheduler("InstructionProfiler", {{"warmup_step_ratio", 1.5}}), Error);
  EXPECT_THROW(configure_scheduler("PointSolution", json::object()), Error);
  EXPECT_THROW(configure_scheduler("PointSolution", {{"solution_path", "/no/such/plan.py"}}), Error);
  try {
    configure_scheduler("InstructionProfiler", {{"minimum_power_state", "high"}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("minimum_power_state"), std::string::npos);
  }
}

TEST(Schedulers, InstructionProfilerWritesAProfileOptimizeReads) {
  fs::path dir = fs::temp_directory_path() / ("perseus-profiler-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto ctx = context(2);
  ctx.job_dir = dir;
  auto profiler =
      configure_scheduler("InstructionProfiler", {{"minimum_power_state", 1200}, {"warmup_step_ratio", 0.5}})(ctx);
  // Two warm-up rounds at 1410, then 1410, 1300, 1200.
  std::vector<int> seen;
  for (;;) {
    std::vector<PowerStateSchedule> s;
    try {
      s = profiler->next_schedule();
    } catch (const SchedulerDone& done) {
      EXPECT_NE(std::string(done.what()).find("profile.csv"), std::string::npos);
      break;
    }
    int clock = s[0].power_states[0];
    seen.push_back(clock);
    double slow = 1410.0 / clock;
    profiler->observe({result(0, 1.0 * slow, 100, 0.1 * slow, 10), result(1, 1.0 * slow, 100, 0.2 * slow, 20)});
  }
  EXPECT_EQ(seen, (std::vector<int>{1410, 1410, 1410, 1300, 1200}));
  Profile profile = read_profile(dir / "profile.csv");
  EXPECT_EQ(profile.rows.size(), 2u * 2u * 3u);
  // The artifact's order: by stage, backward before forward, each from the top clock down.
  std::vector<std::tuple<int, InstructionKind, int>> order;
  for (const auto& row : profile.rows) order.emplace_back(row.stage, row.kind, row.frequency);
  ASSERT_EQ(order.size(), 12u);
  EXPECT_EQ(order[0], std::tuple(0, InstructionKind::backward, 1410));
  EXPECT_EQ(order[2], std::tuple(0, InstructionKind::backward, 1200));
  EXPECT_EQ(order[3], std::tuple(0, InstructionKind::forward, 1410));
  EXPECT_EQ(order[6], std::tuple(1, InstructionKind::backward, 1410));
  auto forwards = profile.rows_for(1, InstructionKind::forward);
  ASSERT_EQ(forwards.size(), 3u);
  for (const auto& row : forwards) {
    EXPECT_NEAR(row.time, 0.2 * 1410.0 / row.frequency, 1e-12);
    EXPECT_NEAR(row.energy, 20, 1e-12);
  }
  json info = json::parse(read_file(dir / "profile_info.json"));
  // Stage 0: 1 s per iteration, 0.2 + 0.4 s of it computing with 20 + 40 J; stage 1: 0.4 + 0.8 s
  // is more than the iteration, so only stage 0's 0.4 s idle with 40 J counts.
  EXPECT_NEAR(info["p_block_watts"].get<double>(), 100.0, 1e-9);
  fs::remove_all(dir);
}

// A plan for Megatron-LM's interleaved schedule reaches ranks whose pipe_schedule is that order
// (perseus.default_pipe_schedule(..., "interleaved", V)); ranks running plain 1F1B are refused.
TEST(Schedulers, PointSolutionServesAnInterleavedPlanInItsOrder) {
  fs::path dir = fs::temp_directory_path() / ("perseus-interleaved-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Plan plan;
  plan.num_stages = 2;
  plan.num_microbatches = 2;
  plan.schedule = ScheduleKind::interleaved;
  plan.virtual_stages = 2;
  plan.frequencies = {{1410, 1300, 1200, 1100, 1000, 1100, 1200, 1300},
                      {1000, 1100, 1200, 1300, 1410, 1300, 1200, 1100}};
  write_file_atomic(dir / "plan.json", plan_to_json(plan));
  auto ctx = context(2);
  for (auto& r : ctx.ranks)
    r.pipe_schedule = client::default_pipe_schedule(r.pp_rank, 2, 2, ScheduleKind::interleaved, 2);
  // Stage 1 runs F0c0 F1c0 F0c1 B0c1 ...: a backward in the fourth slot, unlike plain 1F1B's order.
  EXPECT_EQ(ctx.ranks[1].pipe_schedule[3], "backward");
  EXPECT_EQ(ctx.ranks[0].pipe_schedule[3], "forward");
  json args = {{"solution_path", (dir / "plan.json").string()}, {"warmup_iters", 0}};
  auto scheduler = configure_scheduler("PointSolution", args)(ctx);
  const auto schedules = scheduler->next_schedule();
  ASSERT_EQ(schedules.size(), 2u);
  for (const auto& one : schedules)
    EXPECT_EQ(one.power_states,
              plan.frequencies[static_cast<std::size_t>(ctx.ranks[static_cast<std::size_t>(one.rank)].pp_rank)]);

  auto plain = context(2);
  for (auto& r : plain.ranks) r.pipe_schedule = client::default_pipe_schedule(r.pp_rank, 2, 4);
  EXPECT_THROW(configure_scheduler("PointSolution", args)(plain), std::runtime_error);
  fs::remove_all(dir);
}

TEST(Schedulers, StageSchedulersNeedTheir3DVersionWithDataParallelism) {
  auto ctx = context(2, 2);
  fs::path dir = fs::temp_directory_path() / ("perseus-3d-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  write_file_atomic(dir / "plan.py", "[[1300, 1200, 1100, 1100], [1000, 1100, 1200, 1200]]\n");
  json args = {{"solution_path", (dir / "plan.py").string()}, {"warmup_iters", 0}};
  EXPECT_THROW(configure_scheduler("PointSolution", args)(ctx), std::runtime_error);
  auto three_d = configure_scheduler("PointSolution3D", args)(ctx);
  auto s = three_d->next_schedule();
  ASSERT_EQ(s.size(), 4u);
  std::vector<int> stage1 = {1000, 1000, 1000, 1100, 1200, 1200, 1200};
  for (const auto& one : s) {
    int pp = ctx.ranks[static_cast<std::size_t>(one.rank)].pp_rank;
    EXPECT_EQ(one.power_states, pp == 1 ? stage1 : std::vector<int>({1300, 1300, 1300, 1200, 1100, 1100, 1100}));
  }
  fs::remove_all(dir);
}

// A scheduler that records what it observed, to check the 3D fold.
struct Recorder : Scheduler {
  std::vector<ProfilingResult>* seen;
  int stages;
  explicit Recorder(std::vector<ProfilingResult>* out, int s) : seen(out), stages(s) {}
  std::vector<PowerStateSchedule> next_schedule() override {
    std::vector<PowerStateSchedule> out;
    for (int s = 0; s < stages; ++s) out.push_back({s, std::vector<int>(7, 1100 + 100 * s)});
    return out;
  }
  void observe(const std::vector<ProfilingResult>& results) override { *seen = results; }
};

TEST(Schedulers, ThreeDFoldsTimeByMaxAndEnergyBySum) {
  auto ctx = context(2, 2);
  std::vector<ProfilingResult> seen;
  SchedulerContext inner_ctx;
  auto wrapped = make_3d_parallel([&](const SchedulerContext& c) {
    inner_ctx = c;
    return std::make_unique<Recorder>(&seen, c.job.pp_degree);
  })(ctx);
  EXPECT_EQ(inner_ctx.job.world_size, 2);
  EXPECT_EQ(inner_ctx.ranks.size(), 2u);
  auto s = wrapped->next_schedule();
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[3].power_states[0], 1200);  // rank 3 is stage 1
  wrapped->observe({result(0, 1.0, 100, 0.1, 10), result(1, 2.0, 50, 0.3, 5), result(2, 1.5, 100, 0.2, 10),
                    result(3, 1.0, 50, 0.1, 5)});
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_DOUBLE_EQ(seen[0].iter_time[0], 1.5);
  EXPECT_DOUBLE_EQ(seen[0].iter_energy[0], 200);
  EXPECT_DOUBLE_EQ(seen[1].time_breakdown["forward"][0][0], 0.3);
  EXPECT_DOUBLE_EQ(seen[1].energy_breakdown["backward"][1][1], 20);
}

}  // namespace
}  // namespace perseus::server

namespace perseus::server {
namespace {

// Two ranks, power limits 300..225 W (the artifact never profiles the lowest). Per iteration,
// after the dropped first one:   300 W   275 W   250 W
//   time (s), the slower rank     1.0     1.1     1.4
//   energy (J), both ranks        500     440     420
// MaxPower = 300 W x 2 ranks = 600 W; cost = eta E + (1 - eta) 600 T.
TEST(Schedulers, ZeusGlobalPowerLimitProfilesEachLimitAndKeepsTheCheapest) {
  fs::path dir = fs::temp_directory_path() / ("perseus-zeus-global-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  SchedulerContext ctx = context(2);
  for (auto& r : ctx.ranks) r.power_state_range = {300, 275, 250, 225};
  ctx.job_dir = dir;
  auto scheduler = configure_scheduler("ZeusGlobalPowerLimit", {{"eta_knob", 0.5}})(ctx);
  auto round = [&](double t0, double t1, double e0, double e1) {
    auto schedules = scheduler->next_schedule();
    int limit = schedules.front().power_states.front();
    for (const auto& s : schedules)
      EXPECT_EQ(s.power_states, std::vector<int>(ctx.ranks[0].pipe_schedule.size(), limit))
          << "one limit for every GPU";
    auto result = [](int r, double t, double e) {  // the first iteration is dropped (warmup_step_ratio 0.1 -> 1)
      ProfilingResult p;
      p.rank = r;
      p.iter_time = {99.0, t, t};
      p.iter_energy = {9999.0, e, e};
      return p;
    };
    scheduler->observe({result(0, t0, e0), result(1, t1, e1)});
    return limit;
  };
  EXPECT_EQ(round(1, 1, 1, 1), 300) << "warm-up at the highest limit";
  EXPECT_EQ(round(1.0, 0.9, 250, 250), 300);  // T 1.0, E 500: cost 250 + 300 x 1.0 = 550
  EXPECT_EQ(round(1.1, 1.0, 220, 220), 275);  // T 1.1, E 440: cost 220 + 330 = 550 (a tie keeps the higher limit)
  EXPECT_EQ(round(1.4, 1.2, 210, 210), 250);  // T 1.4, E 420: cost 210 + 420 = 630
  EXPECT_EQ(round(1, 1, 1, 1), 300) << "the cheapest, kept";
  EXPECT_EQ(round(1, 1, 1, 1), 300);
  json dumped = json::parse(read_file(dir / "ZeusGlobalPowerLimit.json"));
  EXPECT_EQ(dumped["optimal_power_limit"], 300);
  EXPECT_DOUBLE_EQ(dumped["profiling_results"]["250"]["cost"].get<double>(), 630.0);
  EXPECT_FALSE(dumped["profiling_results"].contains("225"));

  // With energy weighted more, the slower, cheaper limit wins: eta 0.9 -> 0.9 E + 0.1 x 600 T.
  auto energy_first = configure_scheduler("ZeusGlobalPowerLimit", {{"eta_knob", 0.9}})(ctx);
  scheduler = std::move(energy_first);
  round(1, 1, 1, 1);
  round(1.0, 0.9, 250, 250);  // 450 + 60 = 510
  round(1.1, 1.0, 220, 220);  // 396 + 66 = 462
  round(1.4, 1.2, 210, 210);  // 378 + 84 = 462: a tie, the higher limit stays
  EXPECT_EQ(round(1, 1, 1, 1), 275);
  fs::remove_all(dir);

  EXPECT_THROW(configure_scheduler("ZeusGlobalPowerLimit", {{"eta_knob", 1.5}}), Error);
  EXPECT_THROW(configure_scheduler("ZeusGlobalPowerLimit", {{"warmup_step_ratio", 1.0}}), Error);
  EXPECT_EQ(scheduler_mode("ZeusGlobalPowerLimit3D"), PowerMode::power_limit);
  EXPECT_EQ(scheduler_mode("AllMaxPowerLimit"), PowerMode::power_limit);
  EXPECT_EQ(scheduler_mode("PointSolution"), PowerMode::frequency);
  EXPECT_FALSE(scheduler_mode("InstructionProfiler"));
}

}  // namespace
}  // namespace perseus::server

namespace perseus::server {
namespace {

// Zeus+ on a model: stage s's forward takes base_s x 1410 / state ms (stage 0 heavier), an
// iteration 3 x the slower forward, and a rank draws (state / 1410)^2 x 100 J per iteration.
TEST(Schedulers, ZeusLocalPowerStateBalancesEachLevelAndKeepsTheCheapest) {
  SchedulerContext ctx = context(2);
  ctx.settings.dump_data = false;
  const double base[] = {10.0, 9.0};
  auto scheduler = configure_scheduler("ZeusLocalPowerState", {{"eta_knob", 0.5}})(ctx);
  std::vector<std::vector<int>> seen;
  for (int round = 0; round < 20; ++round) {
    auto schedules = scheduler->next_schedule();
    std::vector<int> states = {schedules[0].power_states.front(), schedules[1].power_states.front()};
    seen.push_back(states);
    double t0 = base[0] * 1410 / states[0], t1 = base[1] * 1410 / states[1], iteration = 3 * std::max(t0, t1) / 1000;
    std::vector<ProfilingResult> results;
    for (int r = 0; r < 2; ++r) {
      double t = r == 0 ? t0 : t1, energy = 100.0 * (states[r] / 1410.0) * (states[r] / 1410.0);
      ProfilingResult p;
      p.rank = r;
      p.iter_time = {iteration, iteration, iteration};
      p.iter_energy = {energy, energy, energy};
      p.time_breakdown = {{"forward", {{t / 1000}, {t / 1000}, {t / 1000}}}};
      results.push_back(p);
    }
    scheduler->observe(results);
  }
  const std::vector<std::vector<int>> expected = {
      {1410, 1410},                                            // warm-up
      {1410, 1410}, {1410, 1300}, {1410, 1200}, {1410, 1300},  // stage 1 overshoots 1200, settles at 1300
      {1300, 1300}, {1300, 1200}, {1300, 1100}, {1300, 1200},  // heaviest one state lower
      {1200, 1200}, {1200, 1100}, {1200, 1000}, {1200, 1100},
      {1100, 1100}, {1100, 1000}, {1100, 1000},  // stage 1 reaches the lowest state: the last level
  };
  ASSERT_GE(seen.size(), expected.size() + 1);
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(seen[i], expected[i]) << "round " << i;
  // Cost per balanced configuration: (0.5 P + 0.5 x 1410 x 2) x T, P = sum of E / T.
  std::map<int, double> cost;
  for (auto [s0, s1] : std::vector<std::pair<int, int>>{{1410, 1300}, {1300, 1200}, {1200, 1100}, {1100, 1000}}) {
    double t = 3 * std::max(base[0] * 1410 / s0, base[1] * 1410 / s1) / 1000;
    double energy = 100.0 * (s0 / 1410.0) * (s0 / 1410.0) + 100.0 * (s1 / 1410.0) * (s1 / 1410.0);
    cost[s0] = (0.5 * energy / t + 0.5 * 1410 * 2) * t;
  }
  int best = std::min_element(cost.begin(), cost.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  EXPECT_EQ(seen.back()[0], best);
  EXPECT_EQ(seen.back(), seen[seen.size() - 2]) << "the cheapest configuration is kept";
  EXPECT_FALSE(scheduler_mode("ZeusLocalPowerState")) << "clocks or power limits";
  EXPECT_THROW(configure_scheduler("ZeusLocalPowerState", {{"balanced_phase", "sideways"}}), Error);
}

}  // namespace
}  // namespace perseus::server
