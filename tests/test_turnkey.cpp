// The turnkey loop (docs/design.md#the-turnkey-loop): the online profiler's clock choice, straggler detection,
// the simulated cluster, and the Perseus scheduler end to end in-process (server + simulated ranks).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "perseus/profile/blocking_power.hpp"
#include "perseus/emulate/emulator.hpp"
#include "perseus/online/clock_scan.hpp"
#include "perseus/online/straggler_detector.hpp"
#include "perseus/pipeline/makespan.hpp"
#include "perseus/plan/frontier_record.hpp"
#include "perseus/profile/synthetic.hpp"
#include "perseus/solver/planning.hpp"
#include "perseus/simulate/cluster.hpp"
#include "perseus/simulate/simulated_gpu.hpp"
#include "perseus/util/error.hpp"
#include "server_fixture.hpp"
#include "simulate_fixtures.hpp"

namespace perseus {
namespace {

using nlohmann::json;
using online::ClockMeasurement;
using online::ClockScan;
using online::ScanOptions;

const std::string kAdminToken = "0123456789abcdef-admin";  // the server's bearer token

std::vector<int> a100_clocks() {
  std::vector<int> clocks;
  for (int c = 1410; c >= 855; c -= 15) clocks.push_back(c);
  return clocks;
}

// Runs a scan against energy(clock index), returns the clocks in the order it asked for them.
std::vector<int> run_scan(ClockScan& scan, const std::function<double(std::size_t)>& energy) {
  std::vector<int> asked;
  const auto& clocks = scan.clocks();
  while (auto clock = scan.next()) {
    asked.push_back(*clock);
    auto index = static_cast<std::size_t>(std::find(clocks.begin(), clocks.end(), *clock) - clocks.begin());
    scan.record(*clock, {1.0 + 0.01 * double(index), energy(index)});
    if (asked.size() > clocks.size()) break;  // a scan must never ask twice
  }
  return asked;
}

TEST(ClockScan, CoarsePassGoesTopDownEveryNthClockAndStopsAfterEnergyRisesPastTheMinimum) {
  ClockScan scan(a100_clocks(), ScanOptions{5, 5, 0.01, 1.0});  // fill_gap 1.0: no filling
  // U-shaped energy, minimum at index 20 (1110 MHz).
  auto asked = run_scan(scan, [](std::size_t i) { return 100.0 + 0.05 * std::pow(double(i) - 20, 2); });
  // 0, 5, 10, 15, 20 fall; 25 rises (one coarse step covers 5 clocks): stop there.
  EXPECT_EQ(asked, (std::vector<int>{1410, 1335, 1260, 1185, 1110, 1035}));
  EXPECT_TRUE(scan.done());
  EXPECT_EQ(scan.measured().size(), 6u);
}

TEST(ClockScan, EnergyFlatOrNoisyNearTheTopDoesNotStopTheScanBeforeItFalls) {
  ClockScan scan(a100_clocks(), ScanOptions{5, 5, 0.01, 1.0});
  // Rises a little for the first 15 clocks (as A40s do), then falls to a minimum at index 30.
  auto asked = run_scan(scan, [](std::size_t i) {
    return i < 15 ? 100.0 + 0.1 * double(i) : 101.5 - 0.5 * (double(i) - 15) + (i > 30 ? double(i - 30) : 0.0);
  });
  EXPECT_GE(asked.size(), 7u);
  EXPECT_EQ(asked[6], 1410 - 30 * 15);  // reached the minimum
}

TEST(ClockScan, StopAfterCoversThatManyClocksAtAFinerStep) {
  ClockScan scan(a100_clocks(), ScanOptions{2, 5, 0.01, 1.0});
  auto asked = run_scan(scan, [](std::size_t i) { return 100.0 + 0.05 * std::pow(double(i) - 10, 2); });
  // Minimum at index 10; 3 coarse rises (indices 12, 14, 16) cover the 5 clocks of the rule.
  EXPECT_EQ(asked.back(), a100_clocks()[16]);
}

TEST(ClockScan, FillsOnlyLargeEnergyDropsBetweenParetoNeighbours) {
  ClockScan scan(a100_clocks(), ScanOptions{5, 5, 0.01, 0.05});
  // A steep drop between 1410 and 1335 (20%), then a gentle slope to the minimum at index 20.
  auto asked = run_scan(scan, [](std::size_t i) {
    if (i == 0) return 130.0;
    return 100.0 + 0.01 * std::pow(double(i) - 20, 2);
  });
  // The gap 1410 -> 1335 is bisected (1380, then 1395 or 1365 as needed); the gentle part is not filled.
  std::set<int> filled(asked.begin(), asked.end());
  EXPECT_TRUE(filled.count(1380));
  for (int c : {1230, 1215, 1200}) EXPECT_FALSE(filled.count(c)) << c;
  // Below the early stop nothing is measured.
  for (int c : asked) EXPECT_GE(c, 1410 - 25 * 15);
}

TEST(ClockScan, InterpolatesSkippedClocksLinearlyAndMeasuresRequestedOnes) {
  ClockScan scan({1410, 1395, 1380, 1365, 1350}, ScanOptions{4, 5, 0.01, 1.0});
  scan.record(1410, {1.0, 100.0});
  scan.record(1350, {1.4, 80.0});
  auto all = scan.interpolated();
  ASSERT_EQ(all.size(), 5u);
  EXPECT_NEAR(all.at(1380).time, 1.2, 1e-12);
  EXPECT_NEAR(all.at(1380).energy, 90.0, 1e-12);
  EXPECT_NEAR(all.at(1395).energy, 95.0, 1e-12);
  ASSERT_TRUE(scan.done());
  EXPECT_TRUE(scan.request(1365));
  EXPECT_FALSE(scan.request(1410));  // measured already
  EXPECT_FALSE(scan.request(1000));  // not one of its clocks
  EXPECT_EQ(scan.next(), 1365);
  scan.record(1365, {1.3, 84.0});
  EXPECT_TRUE(scan.done());
}

TEST(StragglerDetector, NeedsTheThresholdForTheGivenRoundsAndClearsAfterRecovery) {
  online::StragglerDetector detector({0.05, 2});
  EXPECT_FALSE(detector.observe({1.0, 1.04, 1.0}));  // below the threshold: never
  EXPECT_FALSE(detector.observe({1.0, 1.04, 1.0}));
  EXPECT_FALSE(detector.observe({1.0, 1.2, 1.0}));  // one round is not enough
  EXPECT_TRUE(detector.observe({1.0, 1.2, 1.0}));
  ASSERT_TRUE(detector.current());
  EXPECT_EQ(detector.current()->pipeline, 1);
  EXPECT_NEAR(detector.current()->slowdown, 1.2, 1e-12);
  EXPECT_FALSE(detector.observe({1.0, 1.21, 1.0}));  // the same straggler, about as slow
  EXPECT_FALSE(detector.observe({1.0, 1.01, 1.0}));
  EXPECT_TRUE(detector.observe({1.0, 1.01, 1.0}));  // recovered for 2 rounds
  EXPECT_FALSE(detector.current());
}

TEST(StragglerDetector, ComparesWithTheOthersNotWithOne) {
  online::StragglerDetector detector({0.05, 1});
  EXPECT_FALSE(detector.observe({1.1, 1.1, 1.1}));  // everybody slower: nobody to slow down for
  EXPECT_FALSE(detector.observe({1.3}));            // a lone pipeline
  EXPECT_TRUE(detector.observe({1.0, 1.0, 1.5, 1.1}));
  EXPECT_EQ(detector.current()->pipeline, 2);
}

TEST(PipelineMakespan, OneFOneBCriticalPathByHand) {
  // 2 stages, 2 microbatches, forward 1, backward 2: F0 F1 on stage 0 ... the 1F1B critical path is
  // F0(s0) F0(s1) B0(s1) B0(s0)... computed by hand: 9.
  std::vector<std::vector<Instruction>> orders;
  for (int s = 0; s < 2; ++s) orders.push_back(stage_schedule(ScheduleKind::one_f_one_b, s, 2, 2));
  std::vector<std::vector<double>> durations;
  for (const auto& order : orders) {
    durations.emplace_back();
    for (const auto& i : order) durations.back().push_back(i.kind == InstructionKind::forward ? 1.0 : 2.0);
  }
  // s0: F0[0,1] F1[1,2]; s1: F0[1,2] B0[2,4] F1[4,5] B1[5,7]; s0: B0[4,6] B1[7,9].
  EXPECT_DOUBLE_EQ(pipeline_makespan(orders, 2, durations), 9.0);
}

TEST(PipelineMakespan, InterleavedCriticalPathByHand) {
  // Megatron's interleaved 1F1B, 2 stages x 2 chunks, 2 microbatches, forward 1, backward 2: the
  // same walk as the emulator's hand-computed case (Emulator.InterleavedHandComputedCriticalPath).
  std::vector<std::vector<Instruction>> orders;
  for (int s = 0; s < 2; ++s) orders.push_back(stage_schedule(ScheduleKind::interleaved, s, 2, 2, 0, 2));
  std::vector<std::vector<double>> durations;
  for (const auto& order : orders) {
    durations.emplace_back();
    for (const auto& i : order) durations.back().push_back(i.kind == InstructionKind::forward ? 1.0 : 2.0);
  }
  EXPECT_DOUBLE_EQ(pipeline_makespan(orders, 2, durations), 15.0);
}

using testing::gpt3_cluster;

std::string profile_path(const std::string& name) { return testing::shared_profile_path(name); }

Emulator gpt3_emulator() {
  EmulatorConfig config;
  config.num_stages = 8;
  config.num_microbatches = 12;
  config.p_block = kA100BlockingPowerW;
  return Emulator(read_profile(profile_path("gpt3-175b+a100_sxm_bf16.csv")), config);
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
  EXPECT_NEAR(summary.whole.iteration_time, emulated.first, 1e-9);
  EXPECT_NEAR(summary.whole.energy, 3 * emulated.second, 1e-6);
  for (const auto& p : summary.whole.pipelines) EXPECT_NEAR(p.energy, emulated.second, 1e-6);
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
  const std::size_t chosen = *cheapest_within(record, record.points.back().time * 1.1);
  const Plan plan = plan_at(record, chosen);

  testing::TestServer server(settings("PointSolution", {{"solution_path", (dir / "frontier").string()},
                                                         {"slowdown", 1.1}, {"warmup_iters", 1}}));
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
  config.gpu_speed_spread = 2;
  EXPECT_THROW((void)simulate::simulate_cluster(config), Error);
}

TEST(SimulateConfig, BadStragglersAndShapesAreUsageErrors) {
  for (const char* bad : {"1", "x:1.2", "0:0.5", "0:1.2@0", "0:1.2@5-3", "0:abc", "-1:1.2"}) {
    try {
      (void)simulate::parse_straggler(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), kExitUsage) << bad;
      EXPECT_NE(std::string(e.what()).find("--straggler"), std::string::npos) << e.what();
    }
  }
  auto spec = simulate::parse_straggler("2:1.5@10-20");
  EXPECT_EQ(spec.pipeline, 2);
  EXPECT_TRUE(spec.active(2, 10) && spec.active(2, 20));
  EXPECT_FALSE(spec.active(2, 9) || spec.active(2, 21) || spec.active(1, 15));
  simulate::SimulationConfig config = gpt3_cluster("http://127.0.0.1:1", 1, 1);
  config.num_microbatches = 4;  // fewer than the 8 stages
  try {
    (void)simulate::simulate_cluster(config);
    ADD_FAILURE() << "1f1b with fewer microbatches than stages was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
  }
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

// --- The Perseus scheduler with simulated ranks -------------------------------------------------

struct TurnkeyTest : testing::ServerDirTest {
  json status(testing::TestServer& server, const std::string& job_id) {
    auto reply = server.call("GET", "/jobs/" + client::encode_path_segment(job_id));
    EXPECT_EQ(reply.status, 200) << reply.body;
    return json::parse(reply.body);
  }
  // Writes `profile` into the test's folder; its path.
  std::string write_profile(const std::string& name, const Profile& profile) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir / name) << profile_csv(profile);
    return (dir / name).string();
  }
  json perseus_args(json extra = json::object()) {
    json args = {{"wait_for_plan", true}};  // deterministic: no rounds pass while planning
    for (const auto& [k, v] : extra.items()) args[k] = v;
    return args;
  }
};

TEST_F(TurnkeyTest, ProfilesPlansAndDeploysAPlanThatSavesEnergyAtNoSlowdown) {
  testing::TestServer server(settings("Perseus", perseus_args()));
  std::string phase_while_training, summary_phase;
  auto summary = simulate::simulate_cluster(gpt3_cluster(server.url, 2, 300), [&](const simulate::WindowReport& r) {
    if (r.last != 250) return;
    json jobs = json::parse(server.call("GET", "/jobs").body);
    summary_phase = jobs[0]["phase"];
    phase_while_training = status(server, jobs[0]["job_id"])["phase"];
  });
  EXPECT_EQ(phase_while_training, "deployed");
  EXPECT_EQ(summary_phase, "deployed");  // GET /jobs shows the scheduler's phase too
  // Training over: every rank closed its client, the job is done and keeps what it measured.
  json s = status(server, summary.job_id);
  EXPECT_EQ(s["phase"], "done");
  EXPECT_EQ(s["end_detail"], "[profiling-done] training finished: every rank closed its client");
  // The blocking power measured from the ranks' waiting time and energy, not told.
  EXPECT_NEAR(s["p_block"].get<double>(), kA100BlockingPowerW, 1e-3);
  EXPECT_NEAR(s["baseline"]["iteration_time"].get<double>(), 2.836511, 1e-5);
  // At most a third of one-round-per-clock profiling.
  EXPECT_LE(s["profiling"]["rounds"].get<int>() * 3, s["profiling"]["clocks_available"].get<int>());
  EXPECT_EQ(s["profiling"]["clocks_done"], s["profiling"]["clocks_total"]);
  EXPECT_GT(s["saving"].get<double>(), 0.14);
  EXPECT_LE(s["slowdown"].get<double>(), 0.005);
  for (const auto& [where, model] : s["plan"]["cost_models"].items()) EXPECT_EQ(model, "exp") << where;
  ASSERT_EQ(s["pipelines"].size(), 2u);
  // Written to the job's records: the profile, the frontier and every decision.
  auto job_dir = dir / summary.job_id;
  EXPECT_TRUE(std::filesystem::exists(job_dir / "profile.csv"));
  EXPECT_TRUE(std::filesystem::exists(job_dir / "frontier" / "plans.json"));
  auto decisions = json::parse(std::ifstream(job_dir / "decisions.json"));
  std::vector<std::string> events;
  for (const auto& d : decisions) events.push_back(d["event"]);
  EXPECT_EQ(events, (std::vector<std::string>{"baseline", "profiling", "profiled", "planning", "planned", "deployed"}));
}

TEST_F(TurnkeyTest, DetectsAStragglerSlowsTheOthersDownAndReturnsWhenItRecovers) {
  testing::TestServer server(settings("Perseus", perseus_args()));
  auto config = gpt3_cluster(server.url, 2, 400);
  config.stragglers.push_back(simulate::parse_straggler("1:1.2@200-300"));
  auto summary = simulate::simulate_cluster(config);
  auto window = [&](int iteration) {
    for (const auto& r : summary.reports)
      if (r.first <= iteration && iteration <= r.last) return r;
    return simulate::WindowReport{};
  };
  double before = window(190).pipelines[0].energy, during = window(290).pipelines[0].energy,
         after = window(390).pipelines[0].energy;
  EXPECT_LT(during, before * 0.95);  // the other pipeline slowed down to the straggler's pace
  EXPECT_NEAR(after, before, 1e-6);  // and came back to the target plan
  EXPECT_NEAR(window(290).pipelines[0].compute_time, window(290).iteration_time, 0.01);
  auto decisions = json::parse(std::ifstream(dir / summary.job_id / "decisions.json"));
  std::vector<std::string> events;
  for (const auto& d : decisions) events.push_back(d["event"]);
  EXPECT_NE(std::find(events.begin(), events.end(), "straggler detected"), events.end());
  EXPECT_NE(std::find(events.begin(), events.end(), "straggler recovered"), events.end());
  EXPECT_EQ(status(server, summary.job_id)["straggler"], nullptr);
}

TEST_F(TurnkeyTest, ARankThatFinishedTrainingFailsTheJobForRanksStillWaitingNotHoldsThem) {
  testing::TestServer server(settings("AllMaxFrequency"));
  auto job = json::parse(server.post("/register_job", testing::job_body(2)).body).get<std::string>();
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(server.post("/register_rank", testing::rank_body(job, r, r, {"forward", "backward", "forward", "backward"})).status, 200);
  EXPECT_EQ(server.post("/leave/" + client::encode_path_segment(job), {{"rank", 1}, {"finished", true}}).status, 200);
  auto waiting = server.call("GET", "/schedule/" + client::encode_path_segment(job) + "?rank=0");
  EXPECT_EQ(waiting.status, 500);
  EXPECT_NE(waiting.body.find("ranks [1] finished training while ranks [0] wait"), std::string::npos) << waiting.body;
  EXPECT_EQ(server.post("/leave/" + client::encode_path_segment(job), {{"rank", 0}, {"finished", "yes"}}).status, 422);
}

TEST_F(TurnkeyTest, AStragglerBelowTheThresholdIsNotFollowed) {
  testing::TestServer server(settings("Perseus", perseus_args()));
  auto config = gpt3_cluster(server.url, 2, 300);
  config.stragglers.push_back(simulate::parse_straggler("1:1.03@150"));
  auto summary = simulate::simulate_cluster(config);
  auto decisions = json::parse(std::ifstream(dir / summary.job_id / "decisions.json"));
  for (const auto& d : decisions) EXPECT_NE(d["event"], "straggler detected") << d.dump();
}

TEST_F(TurnkeyTest, TheApiSetsAndClearsAStragglerAndRefusesBadRequests) {
  // The job's ranks register it with a secret: the API is called as the administrator (the token).
  testing::TestServer server(settings("Perseus", perseus_args()), kAdminToken);
  auto config = gpt3_cluster(server.url, 2, 300);
  config.token = kAdminToken;
  std::string job;
  std::vector<json> seen;
  auto summary = simulate::simulate_cluster(config, [&](const simulate::WindowReport& r) {
    if (job.empty()) job = json::parse(server.call("GET", "/jobs").body)[0]["job_id"];
    std::string target = "/straggler/" + client::encode_path_segment(job);
    if (r.last == 100) {  // bad requests are refused while the job runs
      EXPECT_EQ(server.post(target, {{"slowdown", 0.5}}).status, 422);
      EXPECT_EQ(server.post(target, {{"slowdown", 1.2}, {"iteration_time", 3.0}}).status, 422);
      EXPECT_EQ(server.post(target, json::object()).status, 422);
      EXPECT_EQ(server.post(target, {{"slowdown", "fast"}}).status, 422);
      EXPECT_EQ(server.post(target, {{"slowdown", 1.2}, {"pipeline", 1}}).status, 422);
      EXPECT_EQ(server.post(target, {{"slowdown", 1.2}, {"dp_rank", 2}}).status, 422);
      EXPECT_EQ(server.call("PUT", target, "{}").status, 405);
    }
    if (r.last == 150) {
      EXPECT_EQ(server.post(target, {{"slowdown", 1.2}, {"dp_rank", 1}}).status, 200);
    }
    if (r.last == 200) {
      seen.push_back(status(server, job));
      EXPECT_EQ(server.call("DELETE", target).status, 200);
    }
    if (r.last == 250) seen.push_back(status(server, job));
  });
  ASSERT_EQ(seen.size(), 2u);
  const json& set = seen[0];
  ASSERT_TRUE(set["straggler"].is_object()) << set.dump();
  EXPECT_EQ(set["straggler"]["source"], "api");
  EXPECT_EQ(set["straggler"]["dp_rank"], 1);
  EXPECT_NEAR(set["straggler"]["slowdown"].get<double>(), 1.2, 1e-9);
  // Pipeline 1 (the straggler) keeps the target plan; pipeline 0 runs a slower one.
  EXPECT_EQ(set["pipelines"][1]["plan"], set["plan"]["label"]);
  EXPECT_GT(set["pipelines"][0]["predicted_time"].get<double>(), set["pipelines"][1]["predicted_time"].get<double>());
  const json& cleared = seen[1];
  EXPECT_EQ(cleared["straggler"], nullptr);
  EXPECT_EQ(cleared["pipelines"][0]["plan"], cleared["plan"]["label"]);

  EXPECT_EQ(server.post("/straggler/no-such-job", {{"slowdown", 1.2}}).status, 404);
  auto ended = server.post("/straggler/" + client::encode_path_segment(summary.job_id), {{"slowdown", 1.2}});
  EXPECT_EQ(ended.status, 409);  // training finished: nothing to slow down
  EXPECT_NE(ended.body.find("has ended"), std::string::npos) << ended.body;
}

TEST_F(TurnkeyTest, SchedulersThatDoNotFollowStragglersSayConflict) {
  testing::TestServer server(settings("AllMaxFrequency"), kAdminToken);
  client::HttpReply reply;
  auto config = gpt3_cluster(server.url, 2, 20);
  config.token = kAdminToken;
  (void)simulate::simulate_cluster(config, [&](const simulate::WindowReport&) {
    if (reply.status != 0) return;
    std::string job = json::parse(server.call("GET", "/jobs").body)[0]["job_id"];
    reply = server.post("/straggler/" + client::encode_path_segment(job), {{"slowdown", 1.2}});
  });
  EXPECT_EQ(reply.status, 409);
  EXPECT_NE(reply.body.find("does not follow stragglers"), std::string::npos) << reply.body;
}

TEST_F(TurnkeyTest, ClosedLoopStepsToFasterPlansWhenTheDeployedPlanIsMeasurablySlower) {
  // The server plans from a profile that claims every clock below the top is 3% faster than it is:
  // the plan it picks for "not slower than all-max" is measurably slower, and the loop must fix that.
  Profile optimistic = read_profile(profile_path("gpt3-175b+a100_sxm_bf16.csv"));
  for (auto& row : optimistic.rows)
    if (row.frequency < 1410) row.time *= 0.97;
  testing::TestServer server(settings("Perseus", perseus_args({{"profile_path", write_profile("optimistic.csv", optimistic)}})));
  auto summary = simulate::simulate_cluster(gpt3_cluster(server.url, 1, 400));
  json s = status(server, summary.job_id);
  EXPECT_EQ(s["profiling"]["reused"], true);
  EXPECT_EQ(s["profiling"]["rounds"], 0);
  EXPECT_GE(s["plan"]["step_ups"].get<int>(), 1);
  EXPECT_LE(s["slowdown"].get<double>(), 0.005) << s.dump();
  EXPECT_GT(s["saving"].get<double>(), 0.0);
  auto decisions = json::parse(std::ifstream(dir / summary.job_id / "decisions.json"));
  bool stepped = false;
  for (const auto& d : decisions) stepped = stepped || d["event"] == "stepped up";
  EXPECT_TRUE(stepped);
}

TEST_F(TurnkeyTest, ProfilePathIsWrittenOnceAndReusedByTheNextJob) {
  auto path = dir / "shared-profile.csv";
  testing::TestServer server(settings("Perseus", perseus_args({{"profile_path", path.string()}})));
  auto first = simulate::simulate_cluster(gpt3_cluster(server.url, 1, 150));
  ASSERT_TRUE(std::filesystem::exists(path));
  EXPECT_GT(status(server, first.job_id)["profiling"]["rounds"].get<int>(), 0);
  auto second = simulate::simulate_cluster(gpt3_cluster(server.url, 1, 150));
  json s = status(server, second.job_id);
  EXPECT_EQ(s["profiling"]["reused"], true);
  EXPECT_EQ(s["profiling"]["rounds"], 0);
  EXPECT_TRUE(s["plan"].is_object()) << s.dump();
}

TEST_F(TurnkeyTest, AutoCostModelFallsBackPerStageAndKindAndSaysWhere) {
  // Stage 1's backward was measured at two clocks only: three parameters cannot be fitted, so auto
  // uses the piecewise-linear model there and the exponential elsewhere.
  Profile profile = read_profile(profile_path("gpt3-175b+a100_sxm_bf16.csv"));
  std::erase_if(profile.rows, [](const ProfileRow& row) {
    return row.stage == 1 && row.kind == InstructionKind::backward && row.frequency != 1410 && row.frequency != 1110;
  });
  testing::TestServer server(settings("Perseus", perseus_args({{"profile_path", write_profile("odd.csv", profile)}})));
  auto summary = simulate::simulate_cluster(gpt3_cluster(server.url, 1, 60));
  json s = status(server, summary.job_id);
  ASSERT_TRUE(s["plan"].is_object()) << s.dump();
  EXPECT_EQ(s["plan"]["cost_models"]["stage 1 backward"], "pwl");
  EXPECT_EQ(s["plan"]["cost_models"]["stage 0 backward"], "exp");
}

TEST(PerseusArguments, AreCheckedAtServerStart) {
  for (const json& bad : {json{{"slowdown", 0.9}}, json{{"slowdown", 1.1}, {"deadline", 3.0}}, json{{"tolerance", -1}},
                          json{{"coarse_step", 0}}, json{{"cost_model", "cubic"}}, json{{"warmup_rounds", 0}},
                          json{{"straggler_threshold", 0}}, json{{"probe_every", -1}}, json{{"retry_after", -2}},
                          json{{"report_rounds", 0}}, json{{"unknown", 1}}}) {
    try {
      (void)server::configure_scheduler("Perseus", bad);
      ADD_FAILURE() << bad.dump() << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), kExitUsage) << bad.dump();
    }
  }
  EXPECT_EQ(server::scheduler_mode("Perseus"), protocol::PowerMode::frequency);
}

}  // namespace
}  // namespace perseus

namespace perseus {
namespace {

// Planning runs on a worker thread: while one job plans a large problem, another job on the same
// server profiles, plans, deploys and trains on, round after round.
TEST_F(TurnkeyTest, OneJobsPlanningDoesNotHoldAnotherJobsRounds) {
  const std::string a40 = profile_path("gpt3-175b+a40_bf16.csv");
  if (!std::filesystem::exists(a40)) GTEST_SKIP() << "needs the authors' A40 profile beside the project (" << a40 << ")";
  testing::TestServer server(settings("Perseus"));  // wait_for_plan off: the default
  simulate::SimulationConfig big = gpt3_cluster(server.url, 1, 1000000);
  big.profile = read_profile(a40);
  big.num_microbatches = 256;  // a frontier of many thousands of points over 4,096 instructions
  big.p2p_power = kA40BlockingPowerW;
  big.model_name = "big";
  std::atomic<bool> stop_big{false};
  big.stop = &stop_big;
  std::thread big_run([&] { (void)simulate::simulate_cluster(big); });
  auto phase_of = [&](const std::string& model) -> std::string {
    for (const auto& job : json::parse(server.call("GET", "/jobs").body))
      if (job["job_id"].get<std::string>().find("+" + model + "+") != std::string::npos) return job["phase"];
    return "";
  };
  while (phase_of("big") != "planning") std::this_thread::sleep_for(std::chrono::milliseconds(10));

  auto small = simulate::simulate_cluster(gpt3_cluster(server.url, 2, 300));
  json s = status(server, small.job_id);
  EXPECT_EQ(s["phase"], "done");
  EXPECT_EQ(s["round"], 60);
  EXPECT_GT(s["saving"].get<double>(), 0.14);
  EXPECT_EQ(phase_of("big"), "planning");  // still planning, and its ranks still training meanwhile
  stop_big = true;
  big_run.join();
}

}  // namespace
}  // namespace perseus

namespace perseus {
namespace {

// With 2% noise on every instruction, the plan that the noise-free model calls as fast as all-max
// runs measurably slower (a noisy maximum over many near-critical paths). The loop estimates the
// noise from the rounds it measured and chooses the plan by its expected time under it: it keeps
// most of the saving without a measurable slowdown, and never needs to fall back to all-max.
TEST_F(TurnkeyTest, UnderNoiseThePlanIsChosenForTheNoiseAndKeepsTheSaving) {
  testing::TestServer server(settings("Perseus", perseus_args()));
  auto config = gpt3_cluster(server.url, 4, 300);
  config.noise = 0.02;
  config.seed = 3;
  auto summary = simulate::simulate_cluster(config);
  json s = status(server, summary.job_id);
  EXPECT_LE(s["slowdown"].get<double>(), 0.005) << s.dump();
  EXPECT_GT(s["saving"].get<double>(), 0.10) << s.dump();
  EXPECT_NE(s["plan"]["label"], "all-max");
  EXPECT_EQ(s["plan"]["step_ups"], 0);
}

}  // namespace
}  // namespace perseus

namespace perseus {
namespace {

// A server restarted mid-deployment replays the job's rounds into a new Perseus scheduler: the same
// baseline and profile come back (no round measured twice) and it plans again.
TEST_F(TurnkeyTest, ARestartedServerRestoresTheBaselineAndProfileAndPlansAgain) {
  auto first = std::make_unique<testing::TestServer>(settings("Perseus", perseus_args()));
  std::string job;
  json before;
  (void)simulate::simulate_cluster(gpt3_cluster(first->url, 1, 200), [&](const simulate::WindowReport& r) {
    if (r.last != 150 || !first) return;
    job = json::parse(first->call("GET", "/jobs").body)[0]["job_id"];
    before = status(*first, job);
    first.reset();  // the server goes away; training goes on without it
  });
  ASSERT_EQ(before["phase"], "deployed") << before.dump();
  testing::TestServer second(settings("Perseus", perseus_args()));
  json after = status(second, job);
  EXPECT_EQ(after["round"], before["round"]);
  EXPECT_EQ(after["baseline"], before["baseline"]);
  EXPECT_EQ(after["profiling"]["rounds"], before["profiling"]["rounds"]);
  EXPECT_EQ(after["profiling"]["clocks_done"], before["profiling"]["clocks_done"]);
  EXPECT_EQ(after["phase"], "planning");  // deploys again when its ranks ask for the next round
}

}  // namespace
}  // namespace perseus
