// The Perseus scheduler end to end in-process (server + simulated ranks): it profiles, plans and
// deploys by itself, follows stragglers, steps up when measurably slower and survives restarts.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "perseus/plan/frontier_record.hpp"
#include "perseus/profile/blocking_power.hpp"
#include "perseus/profile/synthetic.hpp"
#include "perseus/simulate/cluster.hpp"
#include "perseus/solver/planning.hpp"
#include "perseus/util/error.hpp"
#include "server_fixture.hpp"
#include "simulate_fixtures.hpp"

namespace perseus {
namespace {

using nlohmann::json;
using testing::gpt3_cluster;

std::string profile_path(const std::string& name) { return testing::shared_profile_path(name); }

const std::string kAdminToken = "0123456789abcdef-admin";  // the server's bearer token

struct TurnkeyTest : testing::ServerDirTest {
  // A registered job of two ranks, one per stage, each running F B F B.
  std::string two_rank_job(testing::TestServer& server) {
    auto job = json::parse(server.post("/register_job", testing::job_body(2)).body).get<std::string>();
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(
          server.post("/register_rank", testing::rank_body(job, r, r, {"forward", "backward", "forward", "backward"}))
              .status,
          200);
    return job;
  }
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
  // The report of the window that holds `iteration`.
  static simulate::WindowReport window(const simulate::SimulationSummary& summary, int iteration) {
    for (const auto& r : summary.reports)
      if (r.first <= iteration && iteration <= r.last) return r;
    return simulate::WindowReport{};
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
  // At most a third of one-round-per-clock profiling, besides the all-max rounds that check the conditions.
  EXPECT_LE((s["profiling"]["rounds"].get<int>() - s["profiling"]["checks"].get<int>()) * 3,
            s["profiling"]["clocks_available"].get<int>());
  EXPECT_LE(s["profiling"]["checks"].get<int>() * 4, s["profiling"]["rounds"].get<int>());
  EXPECT_EQ(s["profiling"]["clocks_done"], s["profiling"]["clocks_total"]);
  EXPECT_GT(s["saving"].get<double>(), 0.14);
  EXPECT_LE(s["slowdown"].get<double>(), 0.005);
  ASSERT_EQ(s["pipelines"].size(), 2u);
  // Written to the job's records: the profile, the frontier and every decision.
  auto job_dir = dir / summary.job_id;
  EXPECT_TRUE(std::filesystem::exists(job_dir / "profile.csv"));
  EXPECT_TRUE(std::filesystem::exists(job_dir / "frontier" / "plans.json"));
  auto decisions = json::parse(std::ifstream(job_dir / "decisions.json"));
  std::vector<std::string> events;
  for (const auto& d : decisions) events.push_back(d["event"]);
  EXPECT_EQ(events, (std::vector<std::string>{"baseline", "profiling", "profiled", "planning", "planned", "deployed"}));
  // Planned with auto (exponential everywhere on this profile) and with pwl: the frontier kept is the
  // one whose plan at the target costs less, and status gives its cost models.
  const std::string planned = decisions[4]["detail"];
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(planned, m,
                        std::regex(R"((\w+)'s frontier kept: the plan at the target costs ([0-9.e+]+) J per )"
                                   R"(pipeline with it, ([0-9.e+]+) J with (\w+)'s \(margin ([0-9.]+)%\), )"
                                   R"(whose cost model was (exponential everywhere|piecewise-linear everywhere))")))
      << planned;
  const std::string kept = m[1], other = m[4];
  // pwl's frontier is kept only where its plan costs less than auto's by more than the margin.
  const double kept_cost = std::stod(m[2]), other_cost = std::stod(m[3]), margin = std::stod(m[5]) / 100;
  if (kept == "pwl") EXPECT_LT(kept_cost, other_cost * (1 - margin)) << planned;
  else EXPECT_GE(other_cost, kept_cost * (1 - margin)) << planned;
  EXPECT_EQ(std::set<std::string>({kept, other}), (std::set<std::string>{"auto", "pwl"})) << planned;
  for (const auto& [where, model] : s["plan"]["cost_models"].items())
    EXPECT_EQ(model, kept == "pwl" ? "pwl" : "exp") << where;
  EXPECT_NE(
      planned.find(kept == "pwl" ? "cost model piecewise-linear everywhere" : "cost model exponential everywhere"),
      std::string::npos)
      << planned;
}

TEST_F(TurnkeyTest, DetectsAStragglerSlowsTheOthersDownAndReturnsWhenItRecovers) {
  testing::TestServer server(settings("Perseus", perseus_args()));
  auto config = gpt3_cluster(server.url, 2, 400);
  config.stragglers.push_back(simulate::parse_straggler("1:1.2@200-300"));
  auto summary = simulate::simulate_cluster(config);
  double before = window(summary, 190).pipelines[0].energy, during = window(summary, 290).pipelines[0].energy,
         after = window(summary, 390).pipelines[0].energy;
  EXPECT_LT(during, before * 0.95);  // the other pipeline slowed down to the straggler's pace
  EXPECT_NEAR(after, before, 1e-6);  // and came back to the target plan
  EXPECT_NEAR(window(summary, 290).pipelines[0].compute_time, window(summary, 290).iteration_time, 0.01);
  auto decisions = json::parse(std::ifstream(dir / summary.job_id / "decisions.json"));
  std::vector<std::string> events;
  for (const auto& d : decisions) events.push_back(d["event"]);
  EXPECT_NE(std::find(events.begin(), events.end(), "straggler detected"), events.end());
  EXPECT_NE(std::find(events.begin(), events.end(), "straggler recovered"), events.end());
  EXPECT_EQ(status(server, summary.job_id)["straggler"], nullptr);
}

// A rank that finished never asks again: the barrier does not wait for it, but a round it never
// reports never ends, so ranks that train on get the job failed (and continue without perseus)
// within a round instead of waiting for it forever.
TEST_F(TurnkeyTest, ARankThatFinishedTrainingFailsTheJobForRanksThatTrainOnNotHoldsThem) {
  testing::TestServer server(settings("AllMaxFrequency"));
  const std::string job = two_rank_job(server);
  const std::string path = client::encode_path_segment(job);
  EXPECT_EQ(server.post("/leave/" + path, {{"rank", 1}, {"finished", true}}).status, 200);
  EXPECT_EQ(server.call("GET", "/schedule/" + path + "?rank=0").status, 200);
  EXPECT_EQ(server.post("/result/" + path, testing::result_body(0, 0.1, 10.0)).status, 200);
  auto waiting = server.call("GET", "/schedule/" + path + "?rank=0");
  EXPECT_EQ(waiting.status, 500);
  EXPECT_NE(waiting.body.find("ranks [1] finished training while ranks [0] wait"), std::string::npos) << waiting.body;
  EXPECT_EQ(server.post("/leave/" + path, {{"rank", 0}, {"finished", "yes"}}).status, 422);
}

// The end of training: ranks close their clients one after another, each after asking for the next
// round or just before its request went out. Either way the job ends done, not failed.
TEST_F(TurnkeyTest, RanksClosingOneAfterAnotherAtTheEndOfTrainingEndTheJobDone) {
  for (bool asked_first : {true, false}) {
    SCOPED_TRACE(asked_first ? "rank 0 asked, then closed" : "rank 0 closed before it asked");
    testing::TestServer server(settings("AllMaxFrequency"));
    const std::string job = two_rank_job(server);
    const std::string path = client::encode_path_segment(job);
    std::future<client::HttpReply> first;
    if (asked_first) {
      first = std::async(std::launch::async, [&] { return server.call("GET", "/schedule/" + path + "?rank=0"); });
      for (int i = 0; i < 500 && status(server, job)["waiting_at_barrier"] != 1; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ASSERT_EQ(status(server, job)["waiting_at_barrier"], 1);
    }
    EXPECT_EQ(server.post("/leave/" + path, {{"rank", 0}, {"finished", true}}).status, 200);
    EXPECT_EQ(status(server, job)["phase"], "running") << "the job ended while rank 1 may still ask";
    EXPECT_EQ(server.call("GET", "/schedule/" + path + "?rank=1").status, 200);
    if (asked_first) {
      EXPECT_EQ(first.get().status, 200);
    }
    EXPECT_EQ(server.post("/leave/" + path, {{"rank", 1}, {"finished", true}}).status, 200);
    const json s = status(server, job);
    EXPECT_EQ(s["phase"], "done") << s.dump();
  }
}

// Pipeline 1 runs 3% slower from iteration 150 on, below the detector's threshold: no straggler is
// named, but its GPUs run slower for good (`pipeline slowed`), and pipeline 0, which ended every
// iteration 3% before it, is paced to it: its plan spends the slack.
TEST_F(TurnkeyTest, AStragglerBelowTheThresholdForGoodIsItsPipelinesNewPace) {
  testing::TestServer server(settings("Perseus", perseus_args()));
  auto config = gpt3_cluster(server.url, 2, 300);
  config.stragglers.push_back(simulate::parse_straggler("1:1.03@150"));
  auto summary = simulate::simulate_cluster(config);
  auto decisions = json::parse(std::ifstream(dir / summary.job_id / "decisions.json"));
  std::vector<std::string> events;
  for (const auto& d : decisions) events.push_back(d["event"]);
  EXPECT_NE(std::find(events.begin(), events.end(), "deployed"), events.end()) << decisions.dump();
  for (const char* followed : {"straggler detected", "straggler changed"})
    EXPECT_EQ(std::find(events.begin(), events.end(), followed), events.end()) << decisions.dump();
  EXPECT_NE(std::find(events.begin(), events.end(), "pipeline slowed"), events.end()) << decisions.dump();
  EXPECT_EQ(status(server, summary.job_id)["straggler"], nullptr);
  const auto before = window(summary, 140), during = window(summary, 290);
  ASSERT_EQ(during.pipelines.size(), 2u);
  ASSERT_TRUE(during.pipelines[1].straggling);
  EXPECT_GT(during.pipelines[0].compute_time * 1.01, during.pipelines[1].compute_time)
      << "pipeline 0 is paced to pipeline 1's new pace";
  EXPECT_LT(during.pipelines[0].energy, 0.98 * before.pipelines[0].energy) << "and saves the slack's energy";
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
  testing::TestServer server(
      settings("Perseus", perseus_args({{"profile_path", write_profile("optimistic.csv", optimistic)}})));
  auto summary = simulate::simulate_cluster(gpt3_cluster(server.url, 1, 400));
  json s = status(server, summary.job_id);
  EXPECT_EQ(s["profiling"]["reused"], true);
  EXPECT_EQ(s["profiling"]["rounds"], 0);
  EXPECT_GE(s["plan"]["step_ups"].get<int>(), 1);
  // The plan it stepped up to is within the tolerance; what training got also counts the retries
  // of a plan closer to the saving one (every step-up is provisional), a few rounds each.
  EXPECT_LE(s["measured"]["iteration_time"].get<double>() / s["baseline"]["iteration_time"].get<double>() - 1, 0.005)
      << s.dump();
  EXPECT_LE(s["slowdown"].get<double>(), 0.006) << s.dump();
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
  // Whichever frontier was kept (auto's or pwl's, planned too), the planned decision says where auto
  // fell back.
  std::string planned;
  for (const auto& d : s["decisions"])
    if (d["event"] == "planned") planned = d["detail"];
  EXPECT_NE(planned.find("piecewise-linear for stage 1 backward (where the exponential fit fails or misleads), "
                         "exponential elsewhere"),
            std::string::npos)
      << planned;
}

}  // namespace
}  // namespace perseus

namespace perseus {
namespace {

// Planning runs on a worker thread: while one job plans a large problem, another job on the same
// server profiles, plans, deploys and trains on, round after round.
TEST_F(TurnkeyTest, OneJobsPlanningDoesNotHoldAnotherJobsRounds) {
  const std::string a40 = profile_path("gpt3-175b+a40_bf16.csv");
  if (!std::filesystem::exists(a40))
    GTEST_SKIP() << "needs the authors' A40 profile beside the project (" << a40 << ")";
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
