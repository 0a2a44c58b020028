// Any bytes, any length, any nesting: every reply and message built from what a request or a file
// said stays valid and short, every parser refuses deep nesting, and a result no GPU could have
// measured never reaches a scheduler.
#include <gtest/gtest.h>

#include <string>

#include "perseus/plan/plan_files.hpp"
#include "perseus/protocol/physical_bounds.hpp"
#include "perseus/protocol/replies.hpp"
#include "perseus/util/error.hpp"
#include "perseus/util/safe_text.hpp"
#include "server_fixture.hpp"

namespace perseus::testing {
namespace {

using nlohmann::json;
using protocol::error_body;
using protocol::kMaxDetailBytes;
using protocol::percent_decode;
using protocol::rank_parameter;

std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(SafeText, ReplacesInvalidUtf8AndControlCharacters) {
  EXPECT_EQ(safe_text("abc é ✓ 𝄞"), "abc é ✓ 𝄞");
  EXPECT_EQ(safe_text("\xff"), "\xEF\xBF\xBD");
  EXPECT_EQ(safe_text("a\xC3"), "a\xEF\xBF\xBD");                                // a character cut short
  EXPECT_EQ(safe_text("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // an overlong '/'
  EXPECT_EQ(safe_text("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(safe_text("line\nbreak\x7f"), "line\\x0abreak\\x7f");
  for (int b = 0; b < 256; ++b)  // every result serialises
    EXPECT_NO_THROW(json(safe_text(std::string(1, static_cast<char>(b)) + "x")).dump()) << b;
}

TEST(SafeText, CutsLongTextOnACharacterBoundaryAndSaysHowLong) {
  std::string text = std::string(99, 'x') + "é" + std::string(1000, 'y');
  std::string cut = safe_text(text, 100);
  EXPECT_EQ(cut, std::string(99, 'x') + "... (1101 bytes in all)");
  EXPECT_NO_THROW(json(cut).dump());
}

TEST(SafeText, DumpsInvalidUtf8AndDescribesContainersWithoutTheirContents) {
  EXPECT_THROW(json("\xff").dump(), json::type_error);  // what a plain dump does
  EXPECT_EQ(safe_dump(json("a\xff")), "\"a\xEF\xBF\xBD\"");
  EXPECT_EQ(describe_json(json::parse(nested(60))), "a list of 1 items");
  EXPECT_EQ(describe_json(json{{"a", 1}, {"b", 2}}), "an object of 2 fields");
  EXPECT_EQ(describe_json(json(-3)), "-3");
  EXPECT_EQ(describe_json(json(std::string(5000, 'z'))).size() < 400, true);
}

TEST(SafeText, JsonDeeperThanTheLimitIsRefusedBeforeParsing) {
  EXPECT_NO_THROW(check_json_depth(nested(kMaxJsonDepth)));
  EXPECT_THROW(check_json_depth(nested(kMaxJsonDepth + 1)), JsonTooDeep);
  EXPECT_NO_THROW(check_json_depth("\"" + std::string(1000, '[') + "\""));  // inside a string
  EXPECT_NO_THROW(check_json_depth(R"({"a": "\"[[[[", "b": [1]})", 2));
  try {
    check_json_depth(R"({"a": [[1]]})", 2);
    FAIL();
  } catch (const JsonTooDeep& e) {
    EXPECT_STREQ(e.what(), "nested deeper than 2 levels at byte 7");
  }
}

TEST(Replies, ErrorBodiesAndTargetsAreValidForAnyBytes) {
  EXPECT_EQ(json::parse(error_body("job '\xff\xC3' not found"))["detail"], "job '\xEF\xBF\xBD\xEF\xBF\xBD' not found");
  EXPECT_LE(json::parse(error_body(std::string(100000, 'x')))["detail"].get<std::string>().size(),
            kMaxDetailBytes + 40);
  EXPECT_EQ(percent_decode("/jobs/%FF%2B"), "/jobs/\xff+");
  try {
    rank_parameter("rank=%FF");
    FAIL();
  } catch (const protocol::RequestError& e) {
    EXPECT_EQ(e.refusal(), protocol::Refusal::invalid_request);
    EXPECT_NO_THROW(json::parse(error_body(e.what())));
  }
}

TEST(PhysicalBounds, OnlyWhatAGpuCouldHaveMeasuredPasses) {
  protocol::ProfilingResult ok{
      0, {1.0, 1.0}, {200.0, 210.0}, {{"forward", {{0.2}, {0.2}}}}, {{"forward", {{50.0}, {50.0}}}}};
  EXPECT_EQ(protocol::implausible_result(ok, 300), "");
  auto with = [&](auto change) {
    auto r = ok;
    change(r);
    return protocol::implausible_result(r, 300);
  };
  EXPECT_EQ(with([](auto& r) { r.iter_energy[1] = -5; }), "iteration 1 used -5 J");
  EXPECT_EQ(with([](auto& r) { r.iter_energy[0] = 0; }), "iteration 0 used 0 J");
  EXPECT_EQ(with([](auto& r) { r.iter_time[0] = 0; }), "iteration 0 took 0 s");
  EXPECT_NE(with([](auto& r) { r.iter_time[0] = std::numeric_limits<double>::infinity(); }), "");
  EXPECT_NE(with([](auto& r) { r.iter_energy[0] = 1001; }).find("drew 1001 W on average"), std::string::npos);
  EXPECT_EQ(with([](auto& r) { r.iter_energy[0] = 370; }), "") << "within the slack";
  EXPECT_NE(
      with([](auto& r) { r.energy_breakdown["forward"][0][0] = -1; }).find("the energy of 'forward' in iteration 0"),
      std::string::npos);
  EXPECT_NE(with([](auto& r) { r.time_breakdown["forward"][1][0] = 5; }).find("longer than the iteration"),
            std::string::npos);
  EXPECT_NE(with([](auto& r) { r.energy_breakdown["forward"][1][0] = 500; }).find("more than the iteration"),
            std::string::npos);
  EXPECT_NE(with([](auto& r) { r.iter_time.pop_back(); }), "");
  EXPECT_NE(with([](auto& r) { r.iter_time.clear(), r.iter_energy.clear(); }).find("no iteration was measured"),
            std::string::npos);
  EXPECT_EQ(with([](auto& r) { r.energy_breakdown["forward"][0][0] = 0; }), "") << "a short instruction may read 0 J";
  EXPECT_EQ(protocol::max_power_w(protocol::RankInfo{}), protocol::kMaxPlausibleGpuPowerW);
  protocol::RankInfo gpu300;
  gpu300.max_power_w = 300;
  EXPECT_EQ(protocol::plausible_blocking_power(83.6, {gpu300}), 83.6);
  EXPECT_EQ(protocol::plausible_blocking_power(1001, {gpu300}), std::nullopt) << "1,001 W on a 300 W GPU";
  EXPECT_EQ(protocol::plausible_blocking_power(-1, {gpu300}), std::nullopt);
  EXPECT_EQ(protocol::plausible_blocking_power(1001, {protocol::RankInfo{}}), 1001.0);
}

TEST(PlanFiles, ANestedJsonPlanIsAnErrorNotACrash) {
  for (const std::string& text :
       {R"({"frequencies": [)" + nested(100000) + "]}", R"({"format": )" + nested(10000) + R"(, "frequencies": [[1]]})",
        R"({"frequencies": [[)" + nested(60) + "]]}"}) {
    try {
      parse_json_plan(text, "deep.json");
      FAIL();
    } catch (const Error& e) {
      EXPECT_LT(std::string(e.what()).size(), 500u) << e.what();
      EXPECT_NE(std::string(e.what()).find("deep.json"), std::string::npos);
    }
  }
}

struct HostileRequests : ServerDirTest {};

TEST_F(HostileRequests, InvalidUtf8InPathsAndQueriesGetsAnErrorReply) {
  TestServer server(settings());
  for (const char* target : {"/jobs/%FF", "/jobs/%C3", "/schedule/x?rank=%FF", "/result/%FF", "/jobs/%C3%28"}) {
    auto reply = server.call(target[1] == 'r' ? "POST" : "GET", target);
    EXPECT_TRUE(reply.status == 404 || reply.status == 422) << target << " " << reply.status;
    EXPECT_TRUE(json::parse(reply.body).contains("detail")) << target;
  }
  EXPECT_EQ(server.call("GET", "/info").status, 200);
}

TEST_F(HostileRequests, NestedBodiesAreRefusedWithoutEchoingThem) {
  TestServer server(settings());
  std::string id = json::parse(server.post("/register_job", job_body(1)).body).get<std::string>();
  // A 140 KB heartbeat of nested arrays: refused before anything walks it.
  auto reply = server.call("POST", "/heartbeat/" + id, R"({"rank": 0, "progress": )" + nested(70000) + "}");
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(reply.body.find("nested deeper than 64 levels"), std::string::npos) << reply.body.substr(0, 300);
  // Shallow enough to parse: the message names its type, never its contents.
  reply = server.call("POST", "/heartbeat/" + id, R"({"rank": 0, "progress": )" + nested(40) + "}");
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(reply.body.find("expected a non-negative integer, got a list of 1 items"), std::string::npos) << reply.body;
  for (const char* route : {"/register_job", "/register_rank", "/result/x", "/leave/x", "/straggler/x"}) {
    reply = server.call("POST", route, "{\"a\": " + nested(5000) + "}");
    EXPECT_EQ(reply.status, 422) << route;
    EXPECT_LT(reply.body.size(), 300u) << route;
  }
  EXPECT_EQ(server.call("GET", "/info").status, 200);
}

TEST_F(HostileRequests, ARankWithAnUnphysicalResultMakesTheRoundRunAgainThenEndsTheJob) {
  TestServer server(settings("InstructionProfiler"));  // a scheduler that uses what it is told
  std::string id = json::parse(server.post("/register_job", job_body(1)).body).get<std::string>();
  json rank = rank_body(id, 0, 0, {"forward", "forward", "backward", "backward"});
  rank["max_power_w"] = 300;
  ASSERT_EQ(server.post("/register_rank", rank).status, 200);
  auto round = [&](double energy) {
    EXPECT_EQ(server.call("GET", "/schedule/" + id + "?rank=0").status, 200);
    EXPECT_EQ(server.post("/result/" + id, result_body(0, 1.0, energy)).status, 200);
    return json::parse(server.call("GET", "/jobs/" + id).body);
  };
  EXPECT_EQ(round(100.0)["round"], 1);
  json status = round(1001.0);  // 1,001 W on a 300 W GPU
  EXPECT_EQ(status["round"], 1) << "the round runs again";
  EXPECT_EQ(status["measured"]["energy"], 100.0) << "the rejected result is not recorded";
  EXPECT_EQ(round(100.0)["round"], 2) << "a good result ends the repeats";
  for (int i = 0; i < protocol::kMaxRejectedRounds; ++i) EXPECT_EQ(round(1001.0)["phase"], "running");
  status = round(1001.0);
  EXPECT_EQ(status["phase"], "failed");
  EXPECT_EQ(server.call("GET", "/schedule/" + id + "?rank=0").status, 500);
  EXPECT_NE(status.dump().find("rank 0's results are no measurement (iteration 0 drew 1001 W on average"),
            std::string::npos)
      << status.dump();
}

// An iteration of 1e308 s would make the round's time, and the baseline savings are measured
// against, infinite: refused before it reaches the job, naming the field.
TEST_F(HostileRequests, AResultNoGpuCouldMeasureAnywhereIsRefusedNamingTheField) {
  TestServer server(settings());
  std::string id = json::parse(server.post("/register_job", job_body(1)).body).get<std::string>();
  ASSERT_EQ(server.post("/register_rank", rank_body(id, 0, 0, {"forward", "backward"})).status, 200);
  ASSERT_EQ(server.call("GET", "/schedule/" + id + "?rank=0").status, 200);
  for (double time : {1e308, 86401.0, -1.0}) {
    auto reply = server.post("/result/" + id, result_body(0, time, 100.0));
    EXPECT_EQ(reply.status, 422) << time;
    EXPECT_NE(reply.body.find("field 'iter_time[0]'"), std::string::npos) << reply.body;
  }
  auto reply = server.post("/result/" + id, result_body(0, 1.0, -5.0));
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(reply.body.find("field 'iter_energy[0]'"), std::string::npos) << reply.body;
  json status = json::parse(server.call("GET", "/jobs/" + id).body);
  EXPECT_EQ(status["reported"], 0) << "nothing of them reached the round";
}

}  // namespace
}  // namespace perseus::testing
