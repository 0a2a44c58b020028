// The simulated cluster: ranks on simulated GPUs against an in-process server, checked against the
// emulator; stragglers, noise, GPU speed spreads and bad configurations.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "perseus/emulate/emulator.hpp"
#include "perseus/online/noise_aware_choice.hpp"
#include "perseus/plan/frontier_record.hpp"
#include "perseus/profile/blocking_power.hpp"
#include "perseus/profile/synthetic.hpp"
#include "perseus/simulate/cluster.hpp"
#include "perseus/simulate/simulated_gpu.hpp"
#include "perseus/solver/planning.hpp"
#include "perseus/util/error.hpp"
#include "server_fixture.hpp"
#include "simulate_fixtures.hpp"

namespace perseus {
namespace {

using nlohmann::json;

using testing::gpt3_cluster;

std::string profile_path(const std::string& name) { return testing::shared_profile_path(name); }

Profile gpt3_profile() { return read_profile(profile_path("gpt3-175b+a100_sxm_bf16.csv")); }

// The simulated clusters' pipeline (gpt3_cluster's shape) on `profile`.
Emulator gpt3_emulator(const Profile& profile = gpt3_profile()) {
  EmulatorConfig config;
  config.num_stages = 8;
  config.num_microbatches = 12;
  config.p_block = kA100BlockingPowerW;
  return Emulator(profile, config);
}

using SimulateTest = testing::ServerDirTest;

TEST_F(SimulateTest, AllMaxMatchesTheEmulatorExactlyAndEveryPipelineMeetsAtTheSynchronisation) {
  testing::TestServer server(settings("AllMaxFrequency"));
  auto summary = simulate::simulate_cluster(gpt3_cluster(server.url, 3, 20));
  auto emulated = gpt3_emulator().time_and_energy([] {
    std::vector<std::vector<int>> top(8, std::vector<int>(24, 1410));
    return top;
  }());
  EXPECT_EQ(summary.iterations, 20);
  EXPECT_EQ(summary.disabled_ranks, 0);
  EXPECT_NEAR(summary.whole.iteration_time, emulated.time, 1e-9);
  EXPECT_NEAR(summary.whole.energy, 3 * emulated.energy, 1e-6);
  for (const auto& p : summary.whole.pipelines) EXPECT_NEAR(p.energy, emulated.energy, 1e-6);
  EXPECT_FALSE(summary.job_id.empty());
}

// Megatron-LM's interleaved schedule end to end: a frontier planned for 2 stages x 2 chunks,
// served by PointSolution to simulated ranks whose pipe_schedule is the interleaved order; once
// deployed, each iteration costs what the emulator says the plan costs.
TEST_F(SimulateTest, AnInterleavedPlanServedByPointSolutionRunsAsEmulated) {
  SyntheticGpu gpu;
  gpu.num_stages = 4;  // model stages: chunk c of stage s is c * 2 + s
  const Profile profile = parse_profile(synthetic_profile_csv(gpu), "interleaved.csv");
  PlanningConfig planning;
  planning.num_stages = 2;
  planning.num_microbatches = 4;
  planning.virtual_stages = 2;
  planning.schedule = ScheduleKind::interleaved;
  planning.p_block = 70;
  const auto problem = make_planning_problem(profile, planning);
  const auto record = make_frontier_record(problem, solve_frontier(problem), {"interleaved.csv", "auto"});
  write_frontier_record(record, dir / "frontier");
  // As the scheduler chooses: within 1.1 times the fastest emulated time.
  const std::size_t chosen = *cheapest_within(record, record.points[fastest_point(record)].shown_time() * 1.1);
  const Plan plan = plan_at(record, chosen);

  testing::TestServer server(settings(
      "PointSolution", {{"solution_path", (dir / "frontier").string()}, {"slowdown", 1.1}, {"warmup_iters", 1}}));
  simulate::SimulationConfig c;
  c.profile = profile;
  c.num_stages = 2;
  c.num_microbatches = 4;
  c.virtual_stages = 2;
  c.schedule = ScheduleKind::interleaved;
  c.p2p_power = 70;
  c.server_url = server.url;
  c.iterations = 20;
  c.report_every = 10;
  c.model_name = "interleaved";
  const auto summary = simulate::simulate_cluster(c);
  EXPECT_EQ(summary.disabled_ranks, 0);
  ASSERT_EQ(summary.reports.size(), 2u);
  EmulatorConfig config;
  config.num_stages = 2;
  config.num_microbatches = 4;
  config.virtual_stages = 2;
  config.schedule = ScheduleKind::interleaved;
  config.p_block = 70;
  const auto [time, energy] = Emulator(profile, config).time_and_energy(plan.frequencies);
  EXPECT_NEAR(summary.reports[1].iteration_time, time, 1e-9);
  EXPECT_NEAR(summary.reports[1].energy, energy, 1e-6);
}

TEST_F(SimulateTest, AStragglerStretchesItsPipelineAndTheOthersWaitForIt) {
  testing::TestServer server(settings("AllMaxFrequency"));
  auto config = gpt3_cluster(server.url, 2, 20);
  config.stragglers.push_back(simulate::parse_straggler("1:1.2@11"));
  auto summary = simulate::simulate_cluster(config);
  ASSERT_EQ(summary.reports.size(), 2u);
  const auto& before = summary.reports[0];
  const auto& after = summary.reports[1];
  EXPECT_NEAR(after.pipelines[1].compute_time, 1.2 * before.pipelines[1].compute_time, 1e-9);
  EXPECT_NEAR(after.pipelines[0].compute_time, before.pipelines[0].compute_time, 1e-9);
  EXPECT_NEAR(after.iteration_time, after.pipelines[1].compute_time, 1e-9);  // everybody waits
  // Pipeline 0 blocks for the extra time at P_block: 8 GPUs x 83.64 W.
  EXPECT_NEAR(after.pipelines[0].energy - before.pipelines[0].energy,
              8 * kA100BlockingPowerW * (after.iteration_time - before.iteration_time), 1e-6);
  EXPECT_TRUE(after.pipelines[1].straggling);
  EXPECT_FALSE(before.pipelines[1].straggling);
}

TEST_F(SimulateTest, NoiseIsDeterministicForASeedAndTensorParallelRanksShareTheirStage) {
  testing::TestServer server(settings("AllMaxFrequency"));
  auto config = gpt3_cluster(server.url, 1, 10);
  config.tensor_parallel = 2;
  config.noise = 0.02;
  config.seed = 7;
  auto a = simulate::simulate_cluster(config);
  auto b = simulate::simulate_cluster(config);
  EXPECT_EQ(a.ranks, 16);
  EXPECT_DOUBLE_EQ(a.whole.iteration_time, b.whole.iteration_time);
  EXPECT_DOUBLE_EQ(a.whole.energy, b.whole.energy);
  config.seed = 8;
  auto c = simulate::simulate_cluster(config);
  EXPECT_NE(a.whole.energy, c.whole.energy);
}

// Every pipeline slower (a slower cluster); GPUs of fixed, seeded speeds.
TEST_F(SimulateTest, AWholeClusterStragglerAndAGpuSpeedSpread) {
  for (const char* all : {"all:1.1@3-4", "*:1.1@3-4"}) {
    auto spec = simulate::parse_straggler(all);
    EXPECT_EQ(spec.pipeline, simulate::StragglerSpec::kEveryPipeline);
    EXPECT_TRUE(spec.active(0, 3) && spec.active(5, 4));
    EXPECT_FALSE(spec.active(0, 5));
  }
  testing::TestServer server(settings("AllMaxFrequency"));
  auto config = gpt3_cluster(server.url, 2, 4);
  config.report_every = 1;
  config.stragglers.push_back(simulate::parse_straggler("all:1.1@3-3"));
  auto slow = simulate::simulate_cluster(config);
  EXPECT_NEAR(slow.reports[2].iteration_time, 1.1 * slow.reports[1].iteration_time, 1e-9);
  EXPECT_NEAR(slow.reports[3].iteration_time, slow.reports[1].iteration_time, 1e-9);
  config.stragglers.clear();
  config.gpu_speed_spread = 0.02;
  config.seed = 5;
  auto a = simulate::simulate_cluster(config), b = simulate::simulate_cluster(config);
  EXPECT_DOUBLE_EQ(a.whole.iteration_time, b.whole.iteration_time);
  EXPECT_NE(a.whole.pipelines[0].compute_time, a.whole.pipelines[1].compute_time);  // no two pipelines alike
  EXPECT_NEAR(a.reports[0].iteration_time, a.reports[3].iteration_time, 1e-9);      // the same for the whole run
  // The summary says what each GPU drew: each pipeline runs all-max as the profile scaled by its
  // GPUs' speeds, stage by stage, says it runs.
  ASSERT_EQ(a.gpu_speeds.size(), 2u);
  const Profile profile = gpt3_profile();
  for (std::size_t d = 0; d < 2; ++d) {
    ASSERT_EQ(a.gpu_speeds[d].size(), 8u);
    Profile scaled = profile;
    for (auto& row : scaled.rows) {
      ASSERT_EQ(a.gpu_speeds[d][static_cast<std::size_t>(row.stage)].size(), 1u);
      const double speed = a.gpu_speeds[d][static_cast<std::size_t>(row.stage)][0];
      EXPECT_GT(speed, 0.8);
      EXPECT_LT(speed, 1.25);
      row.time *= speed;
      row.energy *= speed;
    }
    const auto top =
        gpt3_emulator(scaled).time_and_energy(std::vector<std::vector<int>>(8, std::vector<int>(24, 1410)));
    EXPECT_NEAR(a.whole.pipelines[d].compute_time, top.time, 1e-9);
  }
  EXPECT_NE(a.gpu_speeds[0], a.gpu_speeds[1]);
  config.gpu_speed_spread = 0;
  EXPECT_TRUE(simulate::simulate_cluster(config).gpu_speeds.empty());
  config.gpu_speed_spread = 2;
  EXPECT_THROW((void)simulate::simulate_cluster(config), Error);
}

// A locked clock takes effect some time after the call: each instruction whose clock differs from
// the one before it runs that long at the clock before, as the loop's model of a plan says.
TEST_F(SimulateTest, WithAClockLatencyAChangedInstructionStartsAtTheClockBefore) {
  testing::TestServer server(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1005}}));
  auto config = gpt3_cluster(server.url, 1, 20);
  config.report_every = 5;
  config.clock_latency = 0.02;
  auto late = simulate::simulate_cluster(config);
  config.clock_latency = 0;
  auto at_once = simulate::simulate_cluster(config);
  ASSERT_EQ(late.reports.size(), 4u);
  online::PlanningOutput model;
  model.emulator = std::make_shared<Emulator>(gpt3_emulator());
  std::vector<std::vector<int>> plan;
  for (const auto& stage : model.emulator->layout()) {
    plan.emplace_back();
    for (const auto& inst : stage) plan.back().push_back(inst.kind == InstructionKind::forward ? 1200 : 1005);
  }
  online::NoiseAwareOptions options;
  EXPECT_NEAR(at_once.reports.back().iteration_time, online::expected_time(model, plan, {}, options), 1e-9);
  options.clock_latency = 0.02;
  EXPECT_NEAR(late.reports.back().iteration_time, online::expected_time(model, plan, {}, options), 1e-9);
  EXPECT_GT(std::abs(late.reports.back().iteration_time - at_once.reports.back().iteration_time), 1e-3);
}

TEST(SimulateConfig, BadStragglersAndShapesAreUsageErrors) {
  for (const char* bad : {"1", "x:1.2", "0:0.5", "0:1.2@0", "0:1.2@5-3", "0:abc", "-1:1.2"}) {
    try {
      (void)simulate::parse_straggler(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::bad_setting) << bad;
      EXPECT_EQ(std::string(e.what()).rfind("straggler '" + std::string(bad) + "'", 0), 0u) << e.what();
      EXPECT_EQ(e.settings(), std::vector<std::string>{"straggler"}) << e.what();
    }
  }
  auto spec = simulate::parse_straggler("2:1.5@10-20");
  EXPECT_EQ(spec.pipeline, 2);
  EXPECT_TRUE(spec.active(2, 10) && spec.active(2, 20));
  EXPECT_FALSE(spec.active(2, 9) || spec.active(2, 21) || spec.active(1, 15));
  simulate::SimulationConfig config = gpt3_cluster("http://127.0.0.1:1", 1, 1);
  config.clock_latency = -0.001;
  try {
    (void)simulate::simulate_cluster(config);
    ADD_FAILURE() << "a negative clock latency was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_setting);
    EXPECT_NE(std::string(e.what()).find("clock_latency must be"), std::string::npos) << e.what();
    EXPECT_EQ(e.settings(), std::vector<std::string>{"clock_latency"}) << e.what();
  }
}

TEST(SimulatedGpu, ALockedClockTakesEffectTheLatencyAfterTheCall) {
  simulate::SimulatedGpu gpu("g", {1410, 1305, 1200});
  double now = 10.0;
  gpu.set_clock_latency([&now] { return now; }, 0.002);
  gpu.lock_graphics_clock(0, 1200, 1200);
  EXPECT_EQ(gpu.current_graphics_clock(0), 1410u);  // read back right after the call: not yet
  EXPECT_EQ(gpu.next_change_after(10.0), 10.002);
  now = 10.0015;
  gpu.lock_graphics_clock(0, 1305, 1305);  // another before the first took effect: in order
  EXPECT_EQ(gpu.clock_at(10.0019), 1410u);
  EXPECT_EQ(gpu.clock_at(10.002), 1200u);
  EXPECT_EQ(gpu.next_change_after(10.002), 10.0035);
  now = 10.004;
  EXPECT_EQ(gpu.current_graphics_clock(0), 1305u);
  EXPECT_FALSE(gpu.next_change_after(10.004));
}

TEST(SimulatedGpu, ListsItsClocksDescendingAndRefusesOthers) {
  simulate::SimulatedGpu gpu("g", {1200, 1410, 1305});
  EXPECT_EQ(gpu.supported_graphics_clocks(0, gpu.supported_memory_clocks(0).front()),
            (std::vector<unsigned>{1410, 1305, 1200}));
  EXPECT_EQ(gpu.locked_clock(), 1410u);
  gpu.lock_graphics_clock(0, 1305, 1305);
  EXPECT_EQ(gpu.locked_clock(), 1305u);
  EXPECT_THROW(gpu.lock_graphics_clock(0, 1300, 1300), gpu::GpuError);
  gpu.reset_graphics_clock(0);
  EXPECT_EQ(gpu.locked_clock(), 1410u);
  gpu.add_energy(1.2345);
  EXPECT_EQ(gpu.total_energy_mj(0), 1235u);
}

}  // namespace
}  // namespace perseus
