// GET /metrics: the Prometheus text format, what it says of jobs and of the server, and who may read it.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <cstring>
#include <set>
#include <sstream>
#include <string>

#include "perseus/client/http_client.hpp"
#include "perseus/server/metrics.hpp"
#include "perseus/server/route_table.hpp"
#include "perseus/simulate/cluster.hpp"
#include "server_fixture.hpp"
#include "simulate_fixtures.hpp"

namespace perseus {
namespace {

using nlohmann::json;

// A strict reader of the exposition format: every line a comment (# HELP / # TYPE, each family
// once and before its samples) or `name{labels} value`. Samples by "name{labels}" text.
struct Exposition {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;  // family -> type
  std::vector<std::string> errors;

  explicit Exposition(const std::string& text) {
    static const std::regex sample(
        R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? (\S+)$)");
    static const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*$)");
    static const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
    std::set<std::string> helped;
    std::istringstream in(text);
    std::string line;
    std::smatch m;
    while (std::getline(in, line)) {
      if (std::regex_match(line, m, help)) {
        if (!helped.insert(m[1]).second) errors.push_back("second HELP: " + line);
      } else if (std::regex_match(line, m, type)) {
        if (!types.emplace(m[1], m[2]).second) errors.push_back("second TYPE: " + line);
      } else if (std::regex_match(line, m, sample)) {
        std::string name = m[1];
        std::string family = name;
        for (const char* suffix : {"_bucket", "_sum", "_count"})
          if (!types.count(family) && family.size() > std::strlen(suffix) &&
              family.compare(family.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
            family = family.substr(0, family.size() - std::strlen(suffix));
        if (!types.count(family)) errors.push_back("sample before its TYPE: " + line);
        samples[name + std::string(m[2])] = std::stod(m[5]);
      } else {
        errors.push_back("malformed: " + line);
      }
    }
  }
  double at(const std::string& key) const {
    auto it = samples.find(key);
    if (it == samples.end()) throw std::out_of_range("no sample " + key);
    return it->second;
  }
  std::size_t families_with_prefix(const std::string& prefix) const {
    std::size_t n = 0;
    for (const auto& [name, t] : types) n += name.rfind(prefix, 0) == 0;
    return n;
  }
};

TEST(Metrics, RoutesAreAFixedSetWhateverThePath) {
  EXPECT_EQ(server::route_of("/schedule/job+1"), "schedule");
  EXPECT_EQ(server::route_of("/jobs"), "jobs");
  EXPECT_EQ(server::route_of("/jobs/a/b"), "jobs");
  EXPECT_EQ(server::route_of("/metrics"), "metrics");
  EXPECT_EQ(server::route_of("/"), "page");
  EXPECT_EQ(server::route_of("/jobsx"), "other");
  EXPECT_EQ(server::route_of("/anything/else"), "other");
  EXPECT_EQ(server::route_of(""), "other");
}

// The router and the metrics read one route table: every route a request is served on is counted
// under its name, and a path no route serves under "other" unless its first segment names one.
TEST(Metrics, TheRouterAndTheMetricsShareOneRouteTable) {
  for (const auto& spec : server::kRoutes) {
    if (spec.route == server::Route::page) continue;
    const std::string bare = "/" + std::string(spec.name);
    EXPECT_EQ(server::route_of(bare), spec.name);
    EXPECT_EQ(server::route_of(bare + "/job+1"), spec.name);
    EXPECT_EQ(server::match_route(bare).route, spec.bare ? spec.route : server::Route::other) << bare;
    const std::string one_job = bare + "/job+1";
    const auto with_id = server::match_route(one_job);  // its rest points into one_job
    EXPECT_EQ(with_id.route, spec.with_id ? spec.route : server::Route::other) << bare;
    if (spec.with_id) {
      EXPECT_EQ(with_id.rest, "job+1");
    }
    EXPECT_EQ(server::match_route(bare + "/").route, server::Route::other) << "an empty job id";
    EXPECT_TRUE(server::route_takes(spec.route, spec.methods[0]));
    EXPECT_FALSE(server::route_takes(spec.route, "PATCH"));
  }
  EXPECT_EQ(server::match_route("/").route, server::Route::page);
  EXPECT_EQ(server::match_route("/jobs/a/frontier").rest, "a/frontier");
  EXPECT_TRUE(server::route_takes(server::Route::straggler, "DELETE"));
  EXPECT_FALSE(server::route_takes(server::Route::jobs, "DELETE"));
  EXPECT_EQ(server::match_route("/nothing").route, server::Route::other);
}

TEST(Metrics, JobStatusesBecomeWellFormedFamiliesWithEscapedLabels) {
  server::JobStatus job;
  job.job_id = "a\"b\\c\nd";
  job.phase = server::JobPhase::deployed;
  job.round = 12;
  job.registered = job.world_size = 16;
  job.measured = server::RoundMeasuredStatus{11, 2.9, 13000.0};  // the planning scheduler's mean is shown instead
  auto& own = job.own.emplace();
  own.baseline = server::BaselineStatus{2.84, 14680.0, {}, {}, 5, 0, 0};
  own.saving = online::Estimate{0.1485, 0.14, 0.157};
  own.slowdown = online::Estimate{0.001, -0.002, 0.004};
  own.plan.emplace().step_ups = 2;
  auto& planning = own.online.emplace();
  planning.measured = server::MeasuredStatus{2.845, 12500.0, 10};
  planning.energy_saved = 5.5e6;
  server::JobStatus other;
  other.job_id = "plain";
  other.phase = server::JobPhase::running;
  other.round = 3;
  other.measured = server::RoundMeasuredStatus{2, 3.5, 100.0};
  server::HttpMetrics http;
  http.request_done("schedule", 200, 0.003);
  http.request_done("schedule", 200, 30.0);
  http.request_done("result", 422, 0.0001);
  http.connection_opened();
  Exposition e(server::render_metrics({job, other}, http.snapshot(), {7, 1, 0}, "0.1.0"));
  ASSERT_TRUE(e.errors.empty()) << ::testing::PrintToString(e.errors);
  const std::string id = R"(job_id="a\"b\\c\nd")";
  EXPECT_EQ(e.at("perseus_job_phase{" + id + ",phase=\"deployed\"}"), 1);
  EXPECT_EQ(e.at("perseus_job_phase{" + id + ",phase=\"warmup\"}"), 0);
  EXPECT_EQ(e.at("perseus_job_phase{job_id=\"plain\",phase=\"running\"}"), 1);
  EXPECT_EQ(e.at("perseus_job_saving_ratio{" + id + "}"), 0.1485);
  EXPECT_EQ(e.at("perseus_job_saving_ratio_bound{" + id + ",bound=\"high\"}"), 0.157);
  EXPECT_EQ(e.at("perseus_job_energy_saved_joules_total{" + id + "}"), 5.5e6);
  EXPECT_EQ(e.at("perseus_job_straggler_slowdown_ratio{" + id + "}"), 1);
  EXPECT_EQ(e.at("perseus_job_step_ups_total{" + id + "}"), 2);
  EXPECT_EQ(e.at("perseus_job_measured_iteration_seconds{" + id + "}"), 2.845);
  EXPECT_EQ(e.at("perseus_job_measured_energy_joules{job_id=\"plain\"}"), 100.0);
  EXPECT_EQ(e.at("perseus_job_slowdown_ratio_bound{" + id + ",bound=\"low\"}"), -0.002);
  EXPECT_EQ(e.at("perseus_job_baseline_energy_joules{" + id + "}"), 14680.0);
  EXPECT_EQ(e.samples.count("perseus_job_saving_ratio{job_id=\"plain\"}"), 0u);              // none: no sample, not 0
  EXPECT_EQ(e.samples.count("perseus_job_straggler_slowdown_ratio{job_id=\"plain\"}"), 0u);  // no scheduler yet
  EXPECT_EQ(e.types.at("perseus_job_energy_saved_joules_total"), "counter");
  EXPECT_EQ(e.at("perseus_jobs{phase=\"deployed\"}"), 1);
  EXPECT_EQ(e.at(R"(perseus_http_requests_total{route="schedule",code="200"})"), 2);
  // The histogram is cumulative and ends with +Inf = count.
  EXPECT_EQ(e.at(R"(perseus_http_request_duration_seconds_bucket{route="schedule",le="0.005"})"), 1);
  EXPECT_EQ(e.at(R"(perseus_http_request_duration_seconds_bucket{route="schedule",le="10"})"), 1);
  EXPECT_EQ(e.at(R"(perseus_http_request_duration_seconds_bucket{route="schedule",le="60"})"), 2);
  EXPECT_EQ(e.at(R"(perseus_http_request_duration_seconds_bucket{route="schedule",le="+Inf"})"), 2);
  EXPECT_EQ(e.at(R"(perseus_http_request_duration_seconds_count{route="schedule"})"), 2);
  EXPECT_EQ(e.types.at("perseus_http_request_duration_seconds"), "histogram");
  EXPECT_EQ(e.at("perseus_store_writes_total"), 7);
  EXPECT_EQ(e.at("perseus_http_connections_open"), 1);
}

struct MetricsServerTest : testing::ServerDirTest {};

TEST_F(MetricsServerTest, ATurnkeyJobsMetricsAgreeWithItsStatusAndTheEnergySavedWithWhatItRan) {
  testing::TestServer server(settings("Perseus", {{"wait_for_plan", true}}));
  auto config = testing::gpt3_cluster(server.url, 2, 300);
  config.report_every = 1;
  auto run = simulate::simulate_cluster(config);
  auto reply = server.call("GET", "/metrics");
  ASSERT_EQ(reply.status, 200) << reply.body;
  Exposition e(reply.body);
  ASSERT_TRUE(e.errors.empty()) << ::testing::PrintToString(e.errors);
  EXPECT_GE(e.families_with_prefix("perseus_"), 10u);
  json s = json::parse(server.call("GET", "/jobs/" + client::encode_path_segment(run.job_id)).body);
  const std::string job = "{job_id=\"" + run.job_id + "\"}";
  EXPECT_EQ(e.at("perseus_job_saving_ratio" + job), s["saving"].get<double>());
  EXPECT_EQ(e.at("perseus_job_round" + job), s["round"].get<double>());
  EXPECT_EQ(e.at("perseus_job_phase{job_id=\"" + run.job_id + "\",phase=\"done\"}"), 1);
  // Energy saved: (baseline - measured energy per iteration) x the deployed iterations, the last
  // ones of the run, as simulate measured them.
  const long long deployed = s["deployed_iterations"].get<long long>();
  ASSERT_GT(deployed, 50);
  ASSERT_LE(deployed, static_cast<long long>(run.reports.size()));
  double measured = 0;
  for (auto it = run.reports.end() - deployed; it != run.reports.end(); ++it) measured += it->energy;
  double expected = s["baseline"]["energy"].get<double>() * double(deployed) - measured;
  EXPECT_GT(expected, 0);
  EXPECT_NEAR(e.at("perseus_job_energy_saved_joules_total" + job), expected, 0.01 * expected);
  EXPECT_GT(e.at(R"(perseus_http_requests_total{route="schedule",code="200"})"), 0);
  EXPECT_GT(e.at("perseus_store_writes_total"), 0);
}

TEST_F(MetricsServerTest, WithATokenMetricsNeedItUnlessPublicAndOtherRoutesAlwaysDo) {
  const std::string token = "0123456789abcdef-token";
  {
    testing::TestServer server(settings(), token);
    client::HttpClient anonymous(server.url, "");
    EXPECT_EQ(anonymous.request("GET", "/metrics", "", std::chrono::milliseconds(0)).status, 401);
    EXPECT_EQ(server.call("GET", "/metrics").status, 200);  // the token holder
  }
  server::HttpLimits limits;
  limits.public_metrics = true;
  testing::TestServer server(settings(), token, limits);
  client::HttpClient anonymous(server.url, "");
  auto metrics = anonymous.request("GET", "/metrics", "", std::chrono::milliseconds(0));
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("perseus_build_info"), std::string::npos);
  EXPECT_EQ(anonymous.request("GET", "/jobs", "", std::chrono::milliseconds(0)).status, 401);
  EXPECT_EQ(anonymous.request("POST", "/metrics", "", std::chrono::milliseconds(0)).status, 401);
  EXPECT_EQ(server.call("POST", "/metrics").status, 405);
}

}  // namespace
}  // namespace perseus
