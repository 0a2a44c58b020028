// The web page at GET / and what it draws from: the token's one exemption, the Perseus scheduler's
// bounded history and frontier, and the deployed plan's timeline (the browser test, label
// `process`, is tests/browser/test_web_page.py).
#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "perseus/client/http_client.hpp"
#include "perseus/server/web_page.hpp"
#include "perseus/simulate/cluster.hpp"
#include "server_fixture.hpp"
#include "simulate_fixtures.hpp"

namespace perseus {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
namespace http = boost::beast::http;

struct RawReply {
  int status = 0;
  std::string content_type, policy, body;
};

// One request on its own connection, with the reply's headers (HttpClient gives only the body).
RawReply raw_request(const std::string& url, http::verb method, const std::string& target,
                     const std::string& token = "") {
  auto port = url.substr(url.rfind(':') + 1);
  boost::asio::io_context io;
  boost::asio::ip::tcp::resolver resolver(io);
  boost::beast::tcp_stream stream(io);
  stream.connect(resolver.resolve("127.0.0.1", port));
  http::request<http::string_body> request(method, target, 11);
  request.set(http::field::host, "127.0.0.1");
  if (!token.empty()) request.set(http::field::authorization, "Bearer " + token);
  request.prepare_payload();
  http::write(stream, request);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(stream, buffer, response);
  return {static_cast<int>(response.result_int()), std::string(response[http::field::content_type]),
          std::string(response["Content-Security-Policy"]), response.body()};
}

std::string path_of(const std::string& job_id) { return "/jobs/" + client::encode_path_segment(job_id); }

struct WebPageTest : testing::ServerDirTest {};

TEST_F(WebPageTest, GetRootAnswersTheSelfContainedPage) {
  testing::TestServer server(settings());
  RawReply page = raw_request(server.url, http::verb::get, "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_EQ(page.body, std::string(server::web_page()));
  for (const char* part :
       {"<!DOCTYPE html>", "<noscript>", "id=\"jobs\"", "id=\"job\"", "id=\"history\"", "id=\"frontier\"",
        "id=\"timeline\"", "id=\"decisions\"", "id=\"straggler\"", "id=\"token-form\"", "sessionStorage", "fetch(",
        "/timeline.svg", "/frontier", "frontier-ends", "</html>"})
    EXPECT_NE(page.body.find(part), std::string::npos) << part;
  // Nothing from elsewhere: no external script, style, font or image, and a policy that forbids them.
  for (const char* outside : {"src=\"http", "href=\"http", "url(http", "@import", "<link", "<script src"})
    EXPECT_EQ(page.body.find(outside), std::string::npos) << outside;
  EXPECT_NE(page.policy.find("default-src 'none'"), std::string::npos) << page.policy;
  EXPECT_NE(page.policy.find("connect-src 'self'"), std::string::npos) << page.policy;
  EXPECT_EQ(raw_request(server.url, http::verb::post, "/").status, 405);
}

// GET / is the one request the token does not guard: the page holds no job data.
TEST_F(WebPageTest, OnlyGetRootAnswersWithoutTheToken) {
  const std::string token = "0123456789abcdef-token";
  testing::TestServer server(settings(), token);
  EXPECT_EQ(raw_request(server.url, http::verb::get, "/").status, 200);
  for (const char* target :
       {"/jobs", "/info", "/jobs/x", "/jobs/x/frontier", "/jobs/x/timeline.svg", "/?", "/?job=x", "//", "/index.html"})
    EXPECT_EQ(raw_request(server.url, http::verb::get, target).status, 401) << target;
  for (auto method : {http::verb::post, http::verb::put, http::verb::delete_})
    EXPECT_EQ(raw_request(server.url, method, "/").status, 401) << method;
  EXPECT_EQ(raw_request(server.url, http::verb::get, "/jobs", token).status, 200);
  EXPECT_EQ(raw_request(server.url, http::verb::get, "/jobs", token + "x").status, 401);
  EXPECT_EQ(raw_request(server.url, http::verb::get, "/", token + "x").status, 200);  // the page asks for it
}

TEST_F(WebPageTest, PicturesOfAJobWithoutAPlanAre404WithADetail) {
  testing::TestServer server(settings("AllMaxFrequency"));
  std::string id = json::parse(server.post("/register_job", testing::job_body(2)).body).get<std::string>();
  for (const char* what : {"/frontier", "/timeline.svg"}) {
    auto reply = server.call("GET", path_of(id) + what);
    EXPECT_EQ(reply.status, 404) << what;
    EXPECT_FALSE(json::parse(reply.body).at("detail").get<std::string>().empty()) << reply.body;
    EXPECT_EQ(server.call("GET", path_of("no-such-job") + what).status, 404) << what;
    EXPECT_EQ(server.call("POST", path_of(id) + what, "{}").status, 405) << what;
  }
  auto bare = server.call("GET", "/jobs/frontier");  // a job id, not a picture of one
  EXPECT_EQ(bare.status, 404);
  EXPECT_NE(bare.body.find("unknown job 'frontier'"), std::string::npos) << bare.body;
  // The summaries carry saving and slowdown for the page's list: null from a scheduler that measures none.
  json jobs = json::parse(server.call("GET", "/jobs").body);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].at("saving"), nullptr);
  EXPECT_EQ(jobs[0].at("slowdown"), nullptr);
}

// 560 one-iteration rounds (about 540 deployed) and a unit time that makes ~1,900 frontier points:
// both the history and the frontier are cut to their bounds.
TEST_F(WebPageTest, PerseusHistoryFrontierAndTimelineAreBoundedAndKeptAfterTheJobEnded) {
  testing::TestServer server(settings("Perseus", {{"wait_for_plan", true}, {"unit_time", 0.0004}}));
  auto config = testing::gpt3_cluster(server.url, 1, 560);
  config.round_iterations = 1;
  config.report_every = 280;
  json while_running;
  RawReply timeline;
  auto summary = simulate::simulate_cluster(config, [&](const simulate::WindowReport& r) {
    if (r.last != 280) return;
    std::string id = json::parse(server.call("GET", "/jobs").body)[0]["job_id"];
    while_running = json::parse(server.call("GET", path_of(id)).body);
    timeline = raw_request(server.url, http::verb::get, path_of(id) + "/timeline.svg");
  });
  ASSERT_EQ(while_running["phase"], "deployed");
  EXPECT_EQ(timeline.status, 200);
  EXPECT_EQ(timeline.content_type, "image/svg+xml");
  EXPECT_NE(timeline.body.find("<svg"), std::string::npos);
  EXPECT_NE(timeline.body.find(while_running["plan"]["label"].get<std::string>()), std::string::npos);
  EXPECT_NE(timeline.body.find("class=\"instruction\""), std::string::npos);

  json s = json::parse(server.call("GET", path_of(summary.job_id)).body);
  ASSERT_EQ(s["phase"], "done");
  // The history: the last 500 deployed rounds, in order, the last one what the status reports.
  const json& history = s.at("history");
  ASSERT_EQ(history.size(), 500u);
  for (std::size_t k = 1; k < history.size(); ++k)
    EXPECT_EQ(history[k]["round"].get<int>(), history[k - 1]["round"].get<int>() + 1) << k;
  EXPECT_EQ(history.back()["round"], s["round"]);
  EXPECT_DOUBLE_EQ(history.back()["saving"].get<double>(), s["saving"].get<double>());
  EXPECT_DOUBLE_EQ(history.back()["slowdown"].get<double>(), s["slowdown"].get<double>());
  // GET /jobs's summary carries the same saving and slowdown.
  json listed = json::parse(server.call("GET", "/jobs").body)[0];
  EXPECT_EQ(listed["saving"], s["saving"]);
  EXPECT_EQ(listed["slowdown"], s["slowdown"]);

  // The frontier, cut to 1,000 points (its first and last kept), in the job's units.
  auto reply = server.call("GET", path_of(summary.job_id) + "/frontier");
  ASSERT_EQ(reply.status, 200) << reply.body;
  json frontier = json::parse(reply.body);
  ASSERT_GT(frontier["frontier_points"].get<int>(), 1000);
  EXPECT_EQ(frontier["frontier_points"], s["plan"]["frontier_points"]);
  const json& points = frontier["points"];
  ASSERT_EQ(points.size(), 1000u);
  for (const auto& p : points) EXPECT_TRUE(p[0].get<double>() > 0 && p[1].get<double>() > 0) << p;
  // [time, energy, planned time, planned energy, dominated]: a dominated point has a faster one at
  // most as costly among those shown or thinned out; the fastest never is.
  for (const auto& p : points) ASSERT_EQ(p.size(), 5u) << p;
  EXPECT_FALSE(points.back()[4].get<bool>());
  for (std::size_t i = 0; i < points.size(); ++i) {
    bool beaten = false;
    for (const auto& q : points)
      beaten |= q[0].get<double>() <= points[i][0].get<double>() && q[1].get<double>() < points[i][1].get<double>();
    if (beaten) {
      EXPECT_TRUE(points[i][4].get<bool>()) << i;
    }
  }
  // Slowest and cheapest first, fastest last (in between, emulated times may wiggle a little).
  EXPECT_GT(points.front()[0].get<double>(), points.back()[0].get<double>());
  EXPECT_LT(points.front()[1].get<double>(), points.back()[1].get<double>());
  EXPECT_NEAR(frontier["deployed"]["time"].get<double>(), s["plan"]["predicted_time"].get<double>(), 1e-9);
  EXPECT_NEAR(frontier["deployed"]["energy"].get<double>(), s["plan"]["predicted_energy"].get<double>(), 1e-6);
  EXPECT_EQ(frontier["deployed"]["label"], s["plan"]["label"]);
  EXPECT_DOUBLE_EQ(frontier["baseline"]["time"].get<double>(), s["baseline"]["iteration_time"].get<double>());
  EXPECT_DOUBLE_EQ(frontier["baseline"]["energy"].get<double>(), s["baseline"]["energy"].get<double>());
  // All-max as the emulator predicts it is the measured baseline, in time exactly (the scale) and
  // in energy within the simulated GPUs' 0.1%.
  EXPECT_NEAR(frontier["all_max"]["time"].get<double>(), s["baseline"]["iteration_time"].get<double>(), 1e-9);
  EXPECT_NEAR(frontier["all_max"]["energy"].get<double>() / s["baseline"]["energy"].get<double>(), 1, 1e-3);
  EXPECT_DOUBLE_EQ(frontier["measured"]["energy"].get<double>(), s["measured"]["energy"].get<double>());

  // Kept after the job ended, as its status is.
  EXPECT_EQ(raw_request(server.url, http::verb::get, path_of(summary.job_id) + "/timeline.svg").status, 200);
}

}  // namespace
}  // namespace perseus
