// Zeus master's pipeline-frequency protocol on the same server (docs/design.md#zeus-compatibility): the
// bodies below are what Zeus's pydantic models send (JobInfo, RankInfo) and parse
// (FrequencySchedule), written out by hand.
#include <gtest/gtest.h>

#include <thread>

#include "perseus/util/atomic_file.hpp"
#include "server_fixture.hpp"

namespace perseus::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::vector<int> kZeusClocks = {1410, 1395, 1380, 1200, 1005};

json zeus_job(int pp, int dp = 1, int tp = 1, json metadata = nullptr) {
  return {{"job_id", ""},
          {"pp_degree", pp},
          {"dp_degree", dp},
          {"tp_degree", tp},
          {"world_size", pp * dp * tp},
          {"job_metadata", metadata}};
}

json zeus_rank(int rank, int pp_rank, int dp_rank = 0, int tp_rank = 0) {
  return {{"rank", rank},
          {"dp_rank", dp_rank},
          {"pp_rank", pp_rank},
          {"tp_rank", tp_rank},
          {"available_frequencies", kZeusClocks}};
}

// As Zeus's examples/pipeline_frequency_optimizer/run_optimization.py writes it (2 stages, 2 microbatches, 1F1B).
const char* kZeusPlan =
    "[\n"
    "[('forward', 1395), ('forward', 1380), ('backward', 1410), ('backward', 1200)],\n"
    "[('forward', 1410), ('backward', 1410), ('forward', 1005), ('backward', 1395)],\n"
    "]\n"
    "# Iteration 3 cost change: -1.25\n"
    "# Iteration 3 total cost: 812.5\n"
    "# Iteration 3 total cost with P2P: 1020.75\n";

std::string detail(const client::HttpReply& reply) { return json::parse(reply.body).at("detail").get<std::string>(); }

struct ZeusDialect : ServerDirTest {
  std::filesystem::path write_plan(const std::string& name, const std::string& text) {
    std::filesystem::create_directories(dir);
    write_file_atomic(dir / name, text);
    return dir / name;
  }
  // Registers a Zeus job of `pp` stages with every rank; returns its id.
  std::string start(TestServer& server, int pp, json metadata = nullptr) {
    auto reply = server.post("/register_job", zeus_job(pp, 1, 1, metadata));
    EXPECT_EQ(reply.status, 200) << reply.body;
    std::string id = json::parse(reply.body).get<std::string>();
    for (int r = 0; r < pp; ++r) {
      auto ranked = server.post("/register_rank/" + id, zeus_rank(r, r));
      EXPECT_EQ(ranked.status, 200) << ranked.body;
      EXPECT_EQ(ranked.body, "null");
    }
    return id;
  }
  // Every rank asks once, as Zeus's PipelineFrequencyOptimizer does in its constructor.
  std::vector<client::HttpReply> ask_all(TestServer& server, const std::string& id, int pp) {
    std::vector<std::future<client::HttpReply>> waiting;
    for (int r = 0; r < pp; ++r) waiting.push_back(server.get_async("/schedule/" + id + "?rank=" + std::to_string(r)));
    std::vector<client::HttpReply> replies;
    for (auto& w : waiting) replies.push_back(w.get());
    return replies;
  }
};

TEST_F(ZeusDialect, AZeusClientGetsItsPlanAsInstructionFrequencyPairs) {
  auto plan = write_plan("freqs_pipeline_00003.py", kZeusPlan);
  TestServer server(settings("PointSolution", {{"solution_path", plan.string()}}));
  std::string id = start(server, 2, "gpt3-xl");
  // YYYY-MM-DD-HH-MM-SS+dpD+ppP+tpT+Scheduler+job_metadata
  ASSERT_GT(id.size(), 20u);
  EXPECT_EQ(id.substr(19), "+dp1+pp2+tp1+PointSolution+gpt3-xl");
  auto replies = ask_all(server, id, 2);
  ASSERT_EQ(replies[0].status, 200) << replies[0].body;
  EXPECT_EQ(
      json::parse(replies[0].body),
      json::parse(
          R"({"rank": 0, "frequencies": [["forward", 1395], ["forward", 1380], ["backward", 1410], ["backward", 1200]]})"));
  EXPECT_EQ(
      json::parse(replies[1].body),
      json::parse(
          R"({"rank": 1, "frequencies": [["forward", 1410], ["backward", 1410], ["forward", 1005], ["backward", 1395]]})"));
  // Zeus's ProfilingResult is the artifact's: accepted.
  EXPECT_EQ(server.post("/result/" + id, result_body(0)).status, 200);
  // The records say what the clients got, in their dialect.
  ASSERT_TRUE(server.jobs->flush_records(std::chrono::seconds(10)));
  auto sched0 = dir / id / "ranks.json";
  EXPECT_NE(read_file(sched0).find("available_frequencies"), std::string::npos);
}

TEST_F(ZeusDialect, AnArtifactPlanIsServedInItsOneFOneBOrder) {
  auto plan = write_plan("freqs_pipeline_00000.py", "[[1395, 1380, 1410, 1200], [1410, 1410, 1005, 1395]]\n");
  TestServer server(settings("PointSolution", {{"solution_path", plan.string()}}));
  std::string id = start(server, 2);
  EXPECT_EQ(id.substr(19), "+dp1+pp2+tp1+PointSolution") << "no job_metadata, nothing appended";
  auto replies = ask_all(server, id, 2);
  EXPECT_EQ(json::parse(replies[0].body)["frequencies"],
            json::parse(R"([["forward", 1395], ["forward", 1380], ["backward", 1410], ["backward", 1200]])"));
  EXPECT_EQ(json::parse(replies[1].body)["frequencies"],
            json::parse(R"([["forward", 1410], ["backward", 1410], ["forward", 1005], ["backward", 1395]])"));
}

TEST_F(ZeusDialect, AZeusPlanServesArtifactRanksAndChecksTheirOrder) {
  auto plan = write_plan("zeus.py", kZeusPlan);
  auto s = settings("PointSolution", {{"solution_path", plan.string()}, {"warmup_iters", 0}});
  TestServer server(s);
  auto reply = server.post("/register_job", job_body(2));
  std::string id = json::parse(reply.body).get<std::string>();
  ASSERT_EQ(server
                .post("/register_rank",
                      rank_body(id, 0, 0, {"load", "forward", "forward", "backward", "p2p", "backward"}, kZeusClocks))
                .status,
            200);
  ASSERT_EQ(
      server.post("/register_rank", rank_body(id, 1, 1, {"forward", "backward", "forward", "backward"}, kZeusClocks))
          .status,
      200);
  auto r0 = server.get_async("/schedule/" + id + "?rank=0");
  auto r1 = server.call("GET", "/schedule/" + id + "?rank=1");
  EXPECT_EQ(json::parse(r0.get().body)["power_states"], json({1395, 1395, 1380, 1410, 1410, 1200}));
  EXPECT_EQ(json::parse(r1.body)["power_states"], json({1410, 1410, 1005, 1395}));

  // A rank whose forwards and backwards come in another order than the plan names is refused.
  reply = server.post("/register_job", job_body(2));
  id = json::parse(reply.body).get<std::string>();
  ASSERT_EQ(
      server.post("/register_rank", rank_body(id, 0, 0, {"forward", "backward", "forward", "backward"}, kZeusClocks))
          .status,
      200);
  ASSERT_EQ(
      server.post("/register_rank", rank_body(id, 1, 1, {"forward", "backward", "forward", "backward"}, kZeusClocks))
          .status,
      200);
  auto bad0 = server.get_async("/schedule/" + id + "?rank=0");
  auto bad1 = server.call("GET", "/schedule/" + id + "?rank=1");
  EXPECT_EQ(bad1.status, 500);
  EXPECT_NE(detail(bad1).find("pipe_schedule[1] is backward but the plan has a forward there"), std::string::npos)
      << detail(bad1);
  EXPECT_EQ(bad0.get().status, 500);
}

TEST_F(ZeusDialect, PointSolution3DServesEveryDataParallelRankItsStagesPlan) {
  auto plan = write_plan("freqs_pipeline_00003.py", kZeusPlan);
  TestServer server(settings("PointSolution3D", {{"solution_path", plan.string()}}));
  std::string id = json::parse(server.post("/register_job", zeus_job(2, 2)).body).get<std::string>();
  for (int r = 0; r < 4; ++r) ASSERT_EQ(server.post("/register_rank/" + id, zeus_rank(r, r % 2, r / 2)).status, 200);
  auto replies = ask_all(server, id, 4);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(replies[r].status, 200) << replies[r].body;
    json got = json::parse(replies[r].body);
    EXPECT_EQ(got["rank"], r);
    EXPECT_EQ(got["frequencies"][1],
              r % 2 == 0 ? json::parse(R"(["forward", 1380])") : json::parse(R"(["backward", 1410])"));
  }
}

TEST_F(ZeusDialect, ASchedulerThatNeedsTheInstructionOrderSaysSo) {
  TestServer server(settings("AllMaxFrequency"));
  std::string id = start(server, 2);
  auto replies = ask_all(server, id, 2);
  EXPECT_EQ(replies[0].status, 500);
  EXPECT_NE(detail(replies[0]).find("Zeus's client does not send its instruction order"), std::string::npos)
      << detail(replies[0]);
}

TEST_F(ZeusDialect, ZeusBodiesAreValidatedAsZeusValidatesThem) {
  TestServer server(settings());
  struct Case {
    json body;
    int status;
    std::string field;
  };
  json zero_pp = zeus_job(2);
  zero_pp["pp_degree"] = 0;
  json wrong_world = zeus_job(2);
  wrong_world["world_size"] = 3;
  json given_id = zeus_job(2);
  given_id["job_id"] = "mine";
  for (const auto& c : std::vector<Case>{{zero_pp, 422, "'pp_degree'"},
                                         {wrong_world, 422, "'world_size'"},
                                         {given_id, 422, "'job_id'"},
                                         {zeus_job(2, 1, 1, "a?b"), 422, "'job_metadata'"},
                                         {zeus_job(2, 1, 1, 7), 422, "'job_metadata'"},
                                         {zeus_job(2, 1, 1, std::string(201, 'x')), 422, "'job_metadata'"}}) {
    auto reply = server.post("/register_job", c.body);
    EXPECT_EQ(reply.status, c.status) << c.body.dump();
    EXPECT_NE(reply.body.find(c.field), std::string::npos) << reply.body;
  }
  // A Hugging Face model name: its '/' stays in the id (the routes take the rest of the path) and
  // becomes '_' only in the records' directory name.
  auto hf = server.post("/register_job", zeus_job(2, 1, 1, "meta-llama/Llama-2-7b"));
  ASSERT_EQ(hf.status, 200) << hf.body;
  std::string hf_id = json::parse(hf.body).get<std::string>();
  EXPECT_EQ(hf_id.substr(19), "+dp1+pp2+tp1+AllMaxFrequency+meta-llama/Llama-2-7b");
  EXPECT_EQ(server.post("/register_rank/" + hf_id, zeus_rank(0, 0)).status, 200);
  EXPECT_EQ(server.call("GET", "/jobs/" + hf_id).status, 200);
  EXPECT_EQ(server::records_dir_name(hf_id).find('/'), std::string::npos);
  std::string id = json::parse(server.post("/register_job", zeus_job(2, 1, 1, "")).body).get<std::string>();
  EXPECT_EQ(id.substr(19), "+dp1+pp2+tp1+AllMaxFrequency") << "an empty job_metadata adds nothing, as in Zeus";
  json rank = zeus_rank(0, 0);
  rank["available_frequencies"] = json::array();
  EXPECT_EQ(server.post("/register_rank/" + id, rank).status, 422);
  rank["available_frequencies"] = {1410, -5};
  auto reply = server.post("/register_rank/" + id, rank);
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(detail(reply).find("'available_frequencies[1]'"), std::string::npos);
  rank = zeus_rank(0, 0);
  rank["rank"] = -1;
  EXPECT_EQ(server.post("/register_rank/" + id, rank).status, 422);
  EXPECT_EQ(server.post("/register_rank", zeus_rank(0, 0)).status, 422)
      << "Zeus's RankInfo has no job_id: the path names it";
  EXPECT_EQ(server.post("/register_rank/nope", zeus_rank(0, 0)).status, 404);
  EXPECT_EQ(server.post("/register_rank/" + id, zeus_rank(0, 0)).status, 200);
  EXPECT_EQ(server.post("/register_rank/" + id, zeus_rank(0, 0)).status, 200) << "a retry";
}

// Zeus's client never reports results: its job is deployed, not failed by --round-timeout, and
// is forgotten after --max-job-idle-time (ZEUS_PFO_MAX_JOB_IDLE_TIME).
TEST_F(ZeusDialect, AZeusJobIsForgottenAfterTheIdleTimeNotFailed) {
  auto plan = write_plan("freqs_pipeline_00003.py", kZeusPlan);
  auto s = settings("PointSolution", {{"solution_path", plan.string()}});
  // The round timeout also bounds the ranks' registration: long enough that a loaded machine registers
  // both ranks within it.
  s.round_timeout_s = 0.5;
  s.max_job_idle_s = 1.5;
  TestServer server(s);
  std::string id = start(server, 2);
  ask_all(server, id, 2);
  std::this_thread::sleep_for(800ms);  // past the round timeout
  auto again = server.call("GET", "/schedule/" + id + "?rank=1");
  EXPECT_EQ(again.status, 200) << "asking again gets the same plan, the job did not fail: " << again.body;
  std::this_thread::sleep_for(2500ms);  // past the idle time since that last ask
  EXPECT_EQ(server.call("GET", "/schedule/" + id + "?rank=1").status, 404);
}

TEST_F(ZeusDialect, AZeusJobSurvivesARestart) {
  auto plan = write_plan("freqs_pipeline_00003.py", kZeusPlan);
  auto s = settings("PointSolution", {{"solution_path", plan.string()}});
  std::string id;
  {
    TestServer server(s);
    id = start(server, 2, "run-1");
  }
  TestServer again(s);
  auto replies = ask_all(again, id, 2);
  ASSERT_EQ(replies[1].status, 200) << replies[1].body;
  EXPECT_EQ(json::parse(replies[1].body)["frequencies"][2], json::parse(R"(["forward", 1005])"));
}

// A plan made for another GPU model: clocks this rank's GPU lacks.
class ForeignPlan final : public server::Scheduler {
 public:
  explicit ForeignPlan(const server::SchedulerContext& context) : ranks_(static_cast<int>(context.ranks.size())) {}
  std::vector<server::PowerStateSchedule> next_schedule() override {
    std::vector<server::PowerStateSchedule> out;
    for (int r = 0; r < ranks_; ++r) out.push_back({r, {1410, 1250, 900}});
    return out;
  }
  void observe(const std::vector<server::ProfilingResult>&) override {}

 private:
  int ranks_;
};

TEST_F(ZeusDialect, APlanClockTheGpuLacksIsServedAsTheNearestSupportedOneBelowIt) {
  TestServer server(settings(), "", {},
                    [](const server::SchedulerContext& c) { return std::make_unique<ForeignPlan>(c); });
  json job = {{"pp_degree", 1}, {"dp_degree", 1}, {"tp_degree", 1}, {"world_size", 1}, {"job_metadata", "foreign"}};
  std::string id = json::parse(server.post("/register_job", job).body).get<std::string>();
  json rank = {{"job_id", id},
               {"rank", 0},
               {"dp_rank", 0},
               {"pp_rank", 0},
               {"tp_rank", 0},
               {"pipe_schedule", {"forward", "backward", "forward"}},
               {"power_state_range", {1410, 1305, 1200, 1005}}};
  ASSERT_EQ(server.post("/register_rank", rank).status, 200);
  auto reply = server.call("GET", "/schedule/" + client::encode_path_segment(id) + "?rank=0");
  ASSERT_EQ(reply.status, 200) << reply.body;
  // 1250 -> 1200 (below it), 900 (below everything) -> 1005, the lowest the GPU has.
  EXPECT_EQ(json::parse(reply.body)["power_states"], json({1410, 1200, 1005}));
}

}  // namespace
}  // namespace perseus::testing
