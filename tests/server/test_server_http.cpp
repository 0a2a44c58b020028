// The HTTP API of `perseus serve`: every route, the round barrier, records, and every error the
// job manager documents.
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <thread>

#include "perseus/util/atomic_file.hpp"
#include "perseus/util/error.hpp"
#include "server_fixture.hpp"

namespace perseus::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::vector<std::string> kTwoMicrobatches = {"forward", "forward", "backward", "backward"};

struct ServerTest : ServerDirTest {
  // Registers a pp-stage job with every rank; returns the job id.
  std::string start_job(TestServer& server, int pp) {
    auto reply = server.post("/register_job", job_body(pp));
    EXPECT_EQ(reply.status, 200) << reply.body;
    std::string id = json::parse(reply.body).get<std::string>();
    for (int r = 0; r < pp; ++r)
      EXPECT_EQ(server.post("/register_rank", rank_body(id, r, r, kTwoMicrobatches)).status, 200);
    return id;
  }
};

// YYYY-MM-DD-HH-MM-SS (std::regex trips a GCC 12 warning under the sanitizers).
bool is_timestamp(const std::string& text) {
  if (text.size() != 19) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    bool dash = i == 4 || i == 7 || i == 10 || i == 13 || i == 16;
    if (dash ? text[i] != '-' : !std::isdigit(static_cast<unsigned char>(text[i]))) return false;
  }
  return true;
}

std::string detail(const client::HttpReply& reply) { return json::parse(reply.body).at("detail").get<std::string>(); }

TEST_F(ServerTest, InfoReportsTheSettings) {
  TestServer server(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1410}}));
  auto reply = server.call("GET", "/info");
  ASSERT_EQ(reply.status, 200);
  json info = json::parse(reply.body);
  EXPECT_EQ(info["scheduler"], "TwoFrequencies");
  EXPECT_EQ(info["scheduler_args"]["forward_freq"], 1200);
  EXPECT_EQ(info["mode"], "frequency");
  EXPECT_EQ(info["dump_data"], true);
  EXPECT_EQ(info["dump_dir"], dir.string());
  EXPECT_EQ(info["log_level"], "INFO");
}

TEST_F(ServerTest, JobIdFollowsTheArtifactFormat) {
  TestServer server(settings());
  auto reply = server.post("/register_job", job_body(4, 2, 1, 8));
  ASSERT_EQ(reply.status, 200);
  std::string id = json::parse(reply.body).get<std::string>();
  EXPECT_TRUE(is_timestamp(id.substr(0, 19))) << id;
  EXPECT_EQ(id.substr(19), "+merak+gpt3+uniform+dp2+pp4+tp1+mbs4+nmb8+AllMaxFrequency");
  // A second job in the same second still gets its own id.
  std::string second = json::parse(server.post("/register_job", job_body(4, 2, 1, 8)).body).get<std::string>();
  EXPECT_NE(id, second);
}

TEST_F(ServerTest, BadRequestsGet422NamingTheField) {
  TestServer server(settings());
  auto malformed = server.call("POST", "/register_job", "{\"pp_degree\": 2,");
  EXPECT_EQ(malformed.status, 422);
  EXPECT_NE(detail(malformed).find("'body'"), std::string::npos);

  json wrong_type = job_body(2);
  wrong_type["pp_degree"] = "two";
  auto reply = server.post("/register_job", wrong_type);
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(detail(reply).find("'pp_degree'"), std::string::npos) << detail(reply);

  json bad_world = job_body(2);
  bad_world["world_size"] = 3;
  reply = server.post("/register_job", bad_world);
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(detail(reply).find("'world_size'"), std::string::npos);

  json missing = job_body(2);
  missing.erase("num_microbatches");
  reply = server.post("/register_job", missing);
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(detail(reply).find("'num_microbatches': missing"), std::string::npos);

  std::string id = json::parse(server.post("/register_job", job_body(2)).body).get<std::string>();
  reply = server.post("/register_rank", rank_body(id, 0, 0, {"forward", "jump"}));
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(detail(reply).find("'pipe_schedule[1]'"), std::string::npos);
  reply = server.post("/register_rank", rank_body(id, 0, 0, kTwoMicrobatches, {1410, 1410}));
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(detail(reply).find("'power_state_range[1]'"), std::string::npos);
  reply = server.post("/register_rank", rank_body(id, 0, 5, kTwoMicrobatches));
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(detail(reply).find("'pp_rank'"), std::string::npos);

  reply = server.call("GET", "/schedule/" + id);
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(detail(reply).find("'rank'"), std::string::npos);
  reply = server.call("GET", "/schedule/" + id + "?rank=abc");
  EXPECT_EQ(reply.status, 422);

  json bad_result = result_body(0);
  bad_result["iter_energy"] = {1.0, "x"};
  reply = server.post("/result/" + id, bad_result);
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(detail(reply).find("'iter_energy[1]'"), std::string::npos);
}

TEST_F(ServerTest, UnknownJobRankAndRouteGet404) {
  TestServer server(settings());
  std::string id = start_job(server, 2);
  EXPECT_EQ(server.call("GET", "/schedule/nope?rank=0").status, 404);
  EXPECT_EQ(server.call("GET", "/schedule/" + id + "?rank=2").status, 404);
  EXPECT_EQ(server.call("GET", "/schedule/" + id + "?rank=-1").status, 404);
  EXPECT_EQ(server.post("/result/" + id, result_body(7)).status, 404);
  EXPECT_EQ(server.post("/register_rank", rank_body("nope", 0, 0, kTwoMicrobatches)).status, 404);
  EXPECT_EQ(server.call("GET", "/nothing").status, 404);
  EXPECT_EQ(server.call("POST", "/info").status, 405);
}

TEST_F(ServerTest, ScheduleIsABarrierAndRoundsAreRecorded) {
  TestServer server(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1000}}));
  std::string id = start_job(server, 2);
  // '+' may come percent-encoded, as some HTTP libraries send it.
  auto first = server.get_async("/schedule/" + client::encode_path_segment(id) + "?rank=0");
  EXPECT_EQ(first.wait_for(300ms), std::future_status::timeout) << "rank 0 must wait for rank 1";
  auto second = server.call("GET", "/schedule/" + id + "?rank=1");
  ASSERT_EQ(second.status, 200) << second.body;
  auto reply0 = first.get();
  ASSERT_EQ(reply0.status, 200);
  json schedule = json::parse(reply0.body);
  EXPECT_EQ(schedule["rank"], 0);
  EXPECT_EQ(schedule["power_states"], json({1200, 1200, 1000, 1000}));

  // Asking again before reporting is a retry and gets the same schedule; results return at once; a
  // second one is a retry too: acknowledged, not counted (the first one stands).
  auto again = server.call("GET", "/schedule/" + id + "?rank=0");
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(json::parse(again.body), schedule);
  EXPECT_EQ(server.post("/result/" + id, result_body(0)).status, 200);
  EXPECT_EQ(server.post("/result/" + id, result_body(0, 9.0)).status, 200);
  auto next0 = server.get_async("/schedule/" + id + "?rank=0");  // early asker for round 1
  EXPECT_EQ(server.post("/result/" + id, result_body(1, 2.0, 50.0)).status, 200);
  EXPECT_EQ(server.call("GET", "/schedule/" + id + "?rank=1").status, 200);
  EXPECT_EQ(next0.get().status, 200);

  fs::path job_dir = dir / id;
  ASSERT_TRUE(server.jobs->flush_records(10s));  // records are written on their own thread
  json ranks = json::parse(read_file(job_dir / "ranks.json"));
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0]["power_state_range"], json({1410, 1200, 1000}));
  json prof = json::parse(read_file(job_dir / "0.prof.json"));
  ASSERT_EQ(prof.size(), 2u);
  EXPECT_EQ(prof[0]["iter_time"], json({1.0, 1.0}));
  EXPECT_EQ(prof[1]["iter_time"], json({2.0, 2.0}));
  // A result retried after its round ended (the server was paused past the client's deadline) is
  // acknowledged too, never a 409 that would turn the client off.
  EXPECT_EQ(server.post("/result/" + id, result_body(1, 2.0, 50.0)).status, 200);
  json sched = json::parse(read_file(job_dir / "0.sched.json"));
  EXPECT_EQ(sched[1]["power_states"], json({1200, 1200, 1000, 1000}));
  // perseus.json is the artifact's ServerInfo, exactly the fields its load_info() reads.
  json info = json::parse(read_file(job_dir / "perseus.json"));
  EXPECT_EQ(info, json({{"scheduler", "TwoFrequencies"},
                        {"scheduler_args", {{"forward_freq", 1200}, {"backward_freq", 1000}}},
                        {"log_level", "INFO"},
                        {"mode", "frequency"},
                        {"dump_data", true},
                        {"dump_dir", dir.string()}}));
  json meta = json::parse(read_file(job_dir / "job.json"));
  EXPECT_EQ(meta["server"]["scheduler"], "TwoFrequencies");
  EXPECT_EQ(meta["job"]["job_id"], id);
  EXPECT_FALSE(fs::exists(job_dir / "1.prof.json"));
}

// A rank whose schedule came after its round began ran the round on its previous schedule and says
// so ("stale"): the round mixes schedules, so it is not recorded nor shown to the scheduler; the
// same schedules run again under the same round number.
TEST_F(ServerTest, ARoundWithAStaleResultRunsAgain) {
  TestServer server(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1000}}));
  std::string id = start_job(server, 2);
  auto round = [&] {
    auto first = server.get_async("/schedule/" + id + "?rank=0");
    auto second = server.call("GET", "/schedule/" + id + "?rank=1");
    EXPECT_EQ(second.status, 200);
    EXPECT_EQ(first.get().status, 200);
    return json::parse(second.body);
  };
  json schedule = round();
  json stale = result_body(1, 5.0);
  stale["stale"] = true;
  EXPECT_EQ(server.post("/result/" + id, result_body(0)).status, 200);
  EXPECT_EQ(server.post("/result/" + id, stale).status, 200);
  EXPECT_EQ(round(), schedule);
  ASSERT_TRUE(server.jobs->flush_records(10s));
  EXPECT_FALSE(fs::exists(dir / id / "0.prof.json")) << "a stale round is not recorded";
  EXPECT_EQ(json::parse(server.call("GET", "/jobs/" + id).body)["round"], 0);
  EXPECT_EQ(server.post("/result/" + id, result_body(0)).status, 200);
  EXPECT_EQ(server.post("/result/" + id, result_body(1, 2.0)).status, 200);
  round();
  ASSERT_TRUE(server.jobs->flush_records(10s));  // records are written on their own thread
  json prof = json::parse(read_file(dir / id / "0.prof.json"));
  EXPECT_EQ(prof[1]["iter_time"], json({2.0, 2.0}));
  EXPECT_EQ(json::parse(server.call("GET", "/jobs/" + id).body)["round"], 1);
  stale["stale"] = "yes";
  auto bad = server.post("/result/" + id, stale);
  EXPECT_EQ(bad.status, 422);
  EXPECT_NE(bad.body.find("stale"), std::string::npos) << bad.body;
}

TEST_F(ServerTest, RegistrationRetriesAreIdempotentAndConflictsRefused) {
  TestServer server(settings());
  std::string id = json::parse(server.post("/register_job", job_body(2)).body).get<std::string>();
  EXPECT_EQ(server.post("/register_rank", rank_body(id, 0, 0, kTwoMicrobatches)).status, 200);
  EXPECT_EQ(server.post("/register_rank", rank_body(id, 0, 0, kTwoMicrobatches)).status, 200);
  EXPECT_EQ(server.post("/register_rank", rank_body(id, 0, 0, {"forward", "backward"})).status, 409);
  EXPECT_EQ(server.post("/register_rank", rank_body(id, 1, 0, kTwoMicrobatches)).status, 409);  // same coordinates
  // The artifact's path form of the route works too.
  json body = rank_body("", 1, 1, kTwoMicrobatches);
  body.erase("job_id");
  EXPECT_EQ(server.post("/register_rank/" + id, body).status, 200);
}

// A client whose schedule request timed out retries; the first answer went to the connection it
// closed. The retry must get the round's schedule, not a 409 for a second request of the round.
TEST_F(ServerTest, AScheduleRequestTheClientGaveUpOnIsAnsweredAgainOnRetry) {
  TestServer server(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1000}}));
  std::string id = start_job(server, 2);
  {
    client::HttpClient impatient(server.url);
    EXPECT_THROW(impatient.request("GET", "/schedule/" + id + "?rank=0", "", 100ms), Error);
  }
  ASSERT_EQ(server.call("GET", "/schedule/" + id + "?rank=1").status, 200);  // the round starts
  auto retry = server.call("GET", "/schedule/" + id + "?rank=0");
  ASSERT_EQ(retry.status, 200) << retry.body;
  EXPECT_EQ(json::parse(retry.body)["power_states"], json({1200, 1200, 1000, 1000}));
  EXPECT_EQ(server.post("/result/" + id, result_body(0)).status, 200);
  EXPECT_EQ(server.post("/result/" + id, result_body(1)).status, 200);
  auto next0 = server.get_async("/schedule/" + id + "?rank=0");
  EXPECT_EQ(server.call("GET", "/schedule/" + id + "?rank=1").status, 200);
  EXPECT_EQ(next0.get().status, 200);
}

TEST(ConstantTimeEqual, ComparesWholeStrings) {
  EXPECT_TRUE(server::constant_time_equal("s3cret-token-123", "s3cret-token-123"));
  EXPECT_FALSE(server::constant_time_equal("s3cret-token-123", "s3cret-token-124"));
  EXPECT_FALSE(server::constant_time_equal("s3cret-token-12", "s3cret-token-123"));
  EXPECT_FALSE(server::constant_time_equal("s3cret-token-1234", "s3cret-token-123"));
  EXPECT_FALSE(server::constant_time_equal("", "s3cret-token-123"));
  EXPECT_FALSE(server::constant_time_equal("x", ""));
  EXPECT_TRUE(server::constant_time_equal("", ""));
}

TEST_F(ServerTest, WithATokenEveryRouteNeedsTheBearerToken) {
  const std::string token = "0123456789abcdef-token";
  TestServer server(settings(), token);
  for (const auto& [method, target] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/info"}, {"POST", "/register_job"}, {"GET", "/schedule/x?rank=0"}, {"POST", "/heartbeat/x"}}) {
    client::HttpClient anonymous(server.url);  // server.call sends the token
    auto reply = anonymous.request(method, target, "{}", 5s);
    EXPECT_EQ(reply.status, 401) << method << " " << target;
    EXPECT_NE(detail(reply).find("bearer token"), std::string::npos);
    client::HttpClient wrong(server.url, token + "x");
    EXPECT_EQ(wrong.request(method, target, "{}", 5s).status, 401) << method << " " << target;
  }
  client::HttpClient right(server.url, token);
  EXPECT_EQ(right.request("GET", "/info", "", 5s).status, 200);
  auto job = right.request("POST", "/register_job", job_body(1).dump(), 5s);
  EXPECT_EQ(job.status, 200) << job.body;
  EXPECT_EQ(json::parse(right.request("GET", "/info", "", 5s).body).count("token"), 0u) << "the token is never shown";
}

TEST_F(ServerTest, WorldSizeAboveTheLimitIsRefusedWith422) {
  auto s = settings();
  s.max_world_size = 64;
  TestServer server(s);
  auto body = job_body(8, 8, 2);  // 128 ranks
  auto reply = server.post("/register_job", body);
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(detail(reply).find("field 'world_size': 128 is above this server's limit of 64"), std::string::npos)
      << reply.body;
  EXPECT_EQ(server.post("/register_job", job_body(8, 8, 1)).status, 200);  // 64 is fine
  EXPECT_EQ(server.jobs->job_count(), 1u);
  // 2^31-1 with a matching product is refused (422) before anything is allocated, not an internal error.
  json huge = job_body(1);
  huge["pp_degree"] = 2147483647;
  huge["world_size"] = 2147483647;
  reply = server.post("/register_job", huge);
  EXPECT_EQ(reply.status, 422) << reply.body;
}

TEST_F(ServerTest, ScheduleRequestBeforeAllRanksRegisteredWaits) {
  TestServer server(settings());
  std::string id = json::parse(server.post("/register_job", job_body(2)).body).get<std::string>();
  ASSERT_EQ(server.post("/register_rank", rank_body(id, 0, 0, kTwoMicrobatches)).status, 200);
  EXPECT_EQ(server.call("GET", "/schedule/" + id + "?rank=1").status, 404);  // not registered yet
  auto waiting = server.get_async("/schedule/" + id + "?rank=0");
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);
  ASSERT_EQ(server.post("/register_rank", rank_body(id, 1, 1, kTwoMicrobatches)).status, 200);
  EXPECT_EQ(server.call("GET", "/schedule/" + id + "?rank=1").status, 200);
  auto reply = waiting.get();
  EXPECT_EQ(json::parse(reply.body)["power_states"], json({1410, 1410, 1410, 1410}));
}

TEST_F(ServerTest, ARankThatNeverAsksFailsTheJobWithAReason) {
  auto s = settings();
  s.round_timeout_s = 0.5;
  TestServer server(s);
  std::string stuck = start_job(server, 2);
  std::string healthy = start_job(server, 2);
  auto waiting = server.get_async("/schedule/" + stuck + "?rank=0");
  // The other job runs its round meanwhile.
  auto h0 = server.get_async("/schedule/" + healthy + "?rank=0");
  EXPECT_EQ(server.call("GET", "/schedule/" + healthy + "?rank=1").status, 200);
  EXPECT_EQ(h0.get().status, 200);
  auto reply = waiting.get();
  EXPECT_EQ(reply.status, 500);
  EXPECT_NE(detail(reply).find("[job-failed]"), std::string::npos);
  EXPECT_NE(detail(reply).find("ranks [1] did not ask for the schedule"), std::string::npos) << detail(reply);
  // Later requests get the same answer.
  EXPECT_EQ(detail(server.call("GET", "/schedule/" + stuck + "?rank=1")), detail(reply));
  EXPECT_EQ(server.call("GET", "/info").status, 200);
}

TEST_F(ServerTest, ARankThatLeavesReleasesTheRanksWaitingAtTheBarrier) {
  TestServer server(settings());
  std::string id = start_job(server, 2);
  auto waiting = server.get_async("/schedule/" + id + "?rank=0");
  EXPECT_EQ(waiting.wait_for(100ms), std::future_status::timeout);
  EXPECT_EQ(server.post("/leave/" + id, json{{"rank", 1}, {"reason", 7}}).status, 422);
  EXPECT_EQ(server.post("/leave/" + id, json{{"reason", "x"}}).status, 422);
  EXPECT_EQ(server.post("/leave/" + id, json{{"rank", 2}}).status, 404);
  EXPECT_EQ(server.post("/leave/nope", json{{"rank", 0}}).status, 404);
  EXPECT_EQ(server.call("GET", "/leave/" + id).status, 405);
  // A long reason is cut at a character boundary, never inside the 2-byte 'é'.
  std::string reason = "NVML: insufficient permissions " + std::string(968, '.') + "\u00e9";  // bytes 999-1000
  ASSERT_EQ(server.post("/leave/" + id, json{{"rank", 1}, {"reason", reason}}).status, 200);
  auto reply = waiting.get();
  EXPECT_EQ(reply.status, 500);
  std::string text = detail(reply);
  EXPECT_NE(text.find("[job-failed] rank 1 cannot take part: NVML: insufficient permissions"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("\xc3"), std::string::npos) << "cut before the character, not inside it";
  EXPECT_NE(text.find(std::string(968, '.')), std::string::npos);
  EXPECT_EQ(server.post("/leave/" + id, json{{"rank", 0}}).status, 200) << "leaving an ended job is harmless";
  EXPECT_EQ(detail(server.call("GET", "/schedule/" + id + "?rank=1")), text);
}

TEST_F(ServerTest, JobsAndJobStatusSayWhatEachJobIsDoing) {
  TestServer server(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1000}}));
  auto job = job_body(2, 2);  // 2 stages x 2 pipelines
  std::string id = json::parse(server.post("/register_job", job).body).get<std::string>();
  for (int r = 0; r < 4; ++r)
    ASSERT_EQ(
        server.post("/register_rank", rank_body(id, r, r % 2, kTwoMicrobatches, {1410, 1200, 1000}, r / 2)).status,
        200);
  std::string waiting = json::parse(server.post("/register_job", job_body(2)).body).get<std::string>();

  json all = json::parse(server.call("GET", "/jobs").body);
  ASSERT_EQ(all.size(), 2u);
  for (const auto& summary : all) {
    EXPECT_EQ(summary["scheduler"], "TwoFrequencies");
    EXPECT_EQ(summary["phase"], summary["job_id"] == id ? "running" : "registering");
  }
  std::vector<std::future<client::HttpReply>> asks;
  for (int r = 0; r < 4; ++r) asks.push_back(server.get_async("/schedule/" + id + "?rank=" + std::to_string(r)));
  for (auto& a : asks) ASSERT_EQ(a.get().status, 200);
  // Pipeline dp 1 is slower; a round's first iteration (its warm-up after the clock change) is left out.
  for (int r = 0; r < 4; ++r) {
    json result = result_body(r);
    double t = r / 2 == 0 ? 1.0 : 1.5;
    result["iter_time"] = {9.0, t, t, t};
    result["iter_energy"] = {999.0, 100.0 + r, 100.0 + r, 100.0 + r};
    ASSERT_EQ(server.post("/result/" + id, result).status, 200);
  }
  json status = json::parse(server.call("GET", "/jobs/" + id).body);
  EXPECT_EQ(status["phase"], "running");
  EXPECT_EQ(status["round"], 1);
  EXPECT_EQ(status["registered"], 4);
  EXPECT_EQ(status["measured"], json({{"round", 0}, {"iteration_time", 1.5}, {"energy", 406.0}}));
  EXPECT_EQ(status["pipelines"], json::parse(R"([{"dp_rank": 0, "iteration_time": 1.0, "energy": 201.0},
                                                 {"dp_rank": 1, "iteration_time": 1.5, "energy": 205.0}])"));
  EXPECT_TRUE(status["plan"].is_null() && status["straggler"].is_null()) << "the turnkey scheduler's, not this one's";
  EXPECT_EQ(server.call("GET", "/jobs/nope").status, 404);
  EXPECT_EQ(server.call("POST", "/jobs").status, 405);
  EXPECT_EQ(json::parse(server.call("GET", "/jobs/" + waiting).body)["measured"], nullptr);
}

TEST_F(ServerTest, AnEndedJobIsForgottenAfterItsRetentionButItsRecordsStay) {
  auto s = settings();
  s.round_timeout_s = 0.2;
  s.job_retention_s = 2;
  TestServer server(s);
  std::string id = start_job(server, 2);
  auto failed = server.call("GET", "/schedule/" + id + "?rank=0");  // rank 1 never asks
  ASSERT_EQ(failed.status, 500);
  EXPECT_NE(detail(failed).find("[job-failed]"), std::string::npos);
  EXPECT_EQ(detail(server.call("GET", "/schedule/" + id + "?rank=1")), detail(failed));  // kept for late ranks
  int status = 500;
  for (auto deadline = std::chrono::steady_clock::now() + 20s;
       status == 500 && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(100ms);
    status = server.call("GET", "/schedule/" + id + "?rank=1").status;
  }
  EXPECT_EQ(status, 404);
  ASSERT_TRUE(server.jobs->flush_records(10s));
  EXPECT_TRUE(fs::exists(dir / id / "perseus.json"));
  EXPECT_EQ(json::parse(server.call("GET", "/info").body)["job_retention_s"], 2.0);
}

TEST_F(ServerTest, FinishedSchedulerAnswersProfilingDone) {
  fs::create_directories(dir / "plans");
  write_file_atomic(dir / "plans" / "freqs_pipeline_00001.py",
                    "[[1200, 1200, 1000, 1000], [1000, 1000, 1200, 1200]]\n");
  TestServer server(settings("PointSolution", {{"solution_path", (dir / "plans").string()}, {"warmup_iters", 1}}));
  std::string id = start_job(server, 2);
  auto round = [&](int expected_first) {
    auto r0 = server.get_async("/schedule/" + id + "?rank=0");
    auto r1 = server.call("GET", "/schedule/" + id + "?rank=1");
    auto first = r0.get();
    EXPECT_EQ(first.status, 200) << first.body;
    if (first.status == 200) {
      EXPECT_EQ(json::parse(first.body)["power_states"][0], expected_first);
    }
    server.post("/result/" + id, result_body(0));
    server.post("/result/" + id, result_body(1));
  };
  round(1410);  // warm-up at the top clock
  round(1200);  // the plan: stage 0 forwards at 1200, backwards at 1000
  auto r0 = server.get_async("/schedule/" + id + "?rank=0");
  auto r1 = server.call("GET", "/schedule/" + id + "?rank=1");
  auto done = r0.get();
  EXPECT_EQ(done.status, 500);
  EXPECT_EQ(detail(done).rfind("[profiling-done]", 0), 0u) << detail(done);
  EXPECT_EQ(r1.status, 500);
}

}  // namespace
}  // namespace perseus::testing
