// POST /result bodies are decoded by simdjson (profiling_result_from_text); these pin down that it
// reads what the client writes, exactly, and rejects what the other decoders reject, naming the field.
#include <gtest/gtest.h>

#include "perseus/protocol/job_outcome.hpp"
#include "perseus/protocol/models.hpp"
#include "perseus/protocol/physical_bounds.hpp"
#include "perseus/protocol/replies.hpp"

namespace perseus::protocol {
namespace {

using nlohmann::json;

std::string detail_of(const std::string& body) {
  try {
    profiling_result_from_text(body);
  } catch (const RequestError& e) {
    EXPECT_EQ(e.refusal(), protocol::Refusal::invalid_request);
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << body;
  return "";
}

json valid() {
  return {{"rank", 3},
          {"iter_time", {1.25, 2}},
          {"iter_energy", {310.5, 1e-3}},
          {"time_breakdown", {{"forward", {{0.1, 0.30000000000000004}, {5e-324, 86400.0}}}}},
          {"energy_breakdown", json::object()}};
}

TEST(ResultParser, ReadsBackEveryNumberBitForBit) {
  ProfilingResult in;
  in.rank = 1023;
  in.iter_time = {0.1 + 0.2, 1.0 / 3.0};
  in.iter_energy = {123456.789, 2.5e-7};
  in.time_breakdown["forward"] = {{0.012345678912345678, 1e-9}, {}};
  in.energy_breakdown["backward"] = {{4.0, 7.125}};
  ProfilingResult out = profiling_result_from_text(to_json(in).dump());
  EXPECT_EQ(out.rank, 1023);
  EXPECT_EQ(out.iter_time, in.iter_time);
  EXPECT_EQ(out.iter_energy, in.iter_energy);
  EXPECT_EQ(out.time_breakdown, in.time_breakdown);
  EXPECT_EQ(out.energy_breakdown, in.energy_breakdown);
}

TEST(ResultParser, IntegersAndIntegralFloatsAreNumbersAndRanks) {
  json body = valid();
  body["rank"] = 2.0;  // what a Python client may send
  ProfilingResult r = profiling_result_from_text(body.dump());
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.iter_time, (std::vector<double>{1.25, 2.0}));
  EXPECT_EQ(r.time_breakdown.at("forward")[1][1], 86400.0);
  body.erase("time_breakdown");
  body.erase("energy_breakdown");
  EXPECT_TRUE(profiling_result_from_text(body.dump()).time_breakdown.empty());  // optional, as in the artifact
}

// A value no measurement can have makes sums and means infinite downstream (a baseline of +Inf):
// refused, naming it. A time is at most a day, an energy at most a day at the most a GPU draws.
TEST(ResultParser, ValuesNoMeasurementCanHaveAreRefusedNamingThem) {
  auto with = [](const char* key, json value) {
    json body = valid();
    body[key] = std::move(value);
    return detail_of(body.dump());
  };
  EXPECT_NE(with("iter_time", {1.0, 1e308}).find("field 'iter_time[1]': 1e+308 s is no measurement"),
            std::string::npos);
  EXPECT_NE(with("iter_time", {86400.5}).find("between 0 and 86400 s"), std::string::npos);
  EXPECT_NE(with("iter_energy", {-1.0, 2.0}).find("field 'iter_energy[0]'"), std::string::npos);
  EXPECT_NE(with("iter_energy", {1e300, 2.0}).find("J (a day at the most a GPU draws)"), std::string::npos);
  EXPECT_NE(with("time_breakdown", {{"forward", {{0.1}, {-0.5}}}}).find("field 'time_breakdown.forward[1][0]'"),
            std::string::npos);
  EXPECT_NE(with("energy_breakdown", {{"backward", {{1e200}}}}).find("field 'energy_breakdown.backward[0][0]'"),
            std::string::npos);
  json edge = valid();
  edge["iter_time"] = {86400, 0};
  edge["iter_energy"] = {kMaxMeasuredJoules, 0};
  EXPECT_NO_THROW(profiling_result_from_text(edge.dump())) << "the bounds themselves are measurements";
}

TEST(ResultParser, MalformedJsonIsA422NamingTheBody) {
  EXPECT_NE(detail_of(R"({"rank": 0, "iter_time": [1,)").find("malformed JSON at byte"), std::string::npos);
  EXPECT_NE(detail_of("").find("field 'body'"), std::string::npos);
  // Valid JSON to nlohmann (it becomes infinity) but not a finite double: still named.
  EXPECT_NE(detail_of(R"({"rank": 0, "iter_time": [1e400], "iter_energy": []})").find("field 'body'"),
            std::string::npos);
  // The other bodies too: nlohmann reports such a number as out of range, not as a parse error.
  try {
    parse_body(R"({"pp_degree": 1e400})");
    ADD_FAILURE() << "accepted 1e400";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.refusal(), protocol::Refusal::invalid_request);
    EXPECT_NE(std::string(e.what()).find("1e400"), std::string::npos) << e.what();
  }
}

TEST(ResultParser, EveryFieldIsCheckedAndNamed) {
  EXPECT_EQ(detail_of("[1, 2]"), "field 'body': expected a JSON object, got a list");
  auto with = [](const char* key, json value) {
    json body = valid();
    if (value.is_discarded()) body.erase(key);
    else body[key] = std::move(value);
    return detail_of(body.dump());
  };
  EXPECT_EQ(with("rank", json(json::value_t::discarded)), "field 'rank': missing");
  EXPECT_EQ(with("rank", "0"), "field 'rank': expected an integer, got a string");
  EXPECT_EQ(with("rank", 1.5), "field 'rank': expected an integer, got a number");
  EXPECT_EQ(with("rank", -1), "field 'rank': must be at least 0, got -1");
  EXPECT_EQ(with("rank", 4294967296LL), "field 'rank': out of range");
  EXPECT_EQ(with("iter_time", json(json::value_t::discarded)), "field 'iter_time': missing");
  EXPECT_EQ(with("iter_time", {{"a", 1}}), "field 'iter_time': expected a list, got an object");
  EXPECT_EQ(with("iter_energy", {1.0, "x"}), "field 'iter_energy[1]': expected a number, got a string");
  EXPECT_EQ(with("iter_energy", {1.0, true}), "field 'iter_energy[1]': expected a number, got a boolean");
  EXPECT_EQ(with("iter_energy", {nullptr}), "field 'iter_energy[0]': expected a number, got null");
  EXPECT_EQ(with("time_breakdown", {1}), "field 'time_breakdown': expected an object, got a list");
  EXPECT_EQ(with("time_breakdown", {{"forward", 1}}),
            "field 'time_breakdown.forward': expected a list of lists, got an integer");
  EXPECT_EQ(with("energy_breakdown", {{"backward", {{1.0}, {2.0, "3"}}}}),
            "field 'energy_breakdown.backward[1][1]': expected a number, got a string");
  EXPECT_EQ(with("energy_breakdown", {{"backward", {{1.0}, 2.0}}}),
            "field 'energy_breakdown.backward[1]': expected a list, got a number");
}

}  // namespace
}  // namespace perseus::protocol

namespace perseus::protocol {
namespace {

TEST(JobOutcomeText, IsTheArtifactsMarkerThenWhy) {
  EXPECT_EQ(to_detail(JobOutcome::done("the plans ran")), "[profiling-done] the plans ran");
  EXPECT_EQ(to_detail(JobOutcome::failed("rank 3 left")), "[job-failed] rank 3 left");
  EXPECT_EQ(outcome_from_detail("[job-failed] rank 3 left"), JobOutcome::failed("rank 3 left"));
  EXPECT_EQ(outcome_from_detail("[profiling-done] x"), JobOutcome::done("x"));
  EXPECT_EQ(outcome_from_detail("internal error"), std::nullopt);
  EXPECT_TRUE(says_done("scheduler: [profiling-done] x"));
  EXPECT_FALSE(says_done("[job-failed] x"));
}

TEST(RefusalStatus, EachKindHasItsHttpStatus) {
  EXPECT_EQ(http_status(Refusal::invalid_request), 422);
  EXPECT_EQ(http_status(Refusal::forbidden), 403);
  EXPECT_EQ(http_status(Refusal::not_found), 404);
  EXPECT_EQ(http_status(Refusal::conflict), 409);
  EXPECT_EQ(http_status(Refusal::job_ended), 500);
  EXPECT_EQ(http_status(Refusal::over_capacity), 503);
  EXPECT_EQ(http_status(Refusal::server_stopping), 503);
  EXPECT_EQ(http_status(Refusal::malformed), 400);
  EXPECT_EQ(http_status(Refusal::unauthorized), 401);
  EXPECT_EQ(http_status(Refusal::method_not_allowed), 405);
  EXPECT_EQ(http_status(Refusal::too_large), 413);
  EXPECT_EQ(http_status(Refusal::header_too_large), 431);
  EXPECT_EQ(http_status(Refusal::internal), 500);
  EXPECT_EQ(http_status(Refusal::not_stored), 503);
}

}  // namespace
}  // namespace perseus::protocol
