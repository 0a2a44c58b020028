#pragma once
// An in-process `perseus serve` on a free loopback port, run on its own thread, plus helpers to
// call it the way a training rank would.
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "perseus/client/http_client.hpp"
#include "perseus/server/http_server.hpp"

namespace perseus::testing {

struct TestServer {
  // `factory`: the scheduler, when not the one settings name; `port`: 0 for a free one.
  explicit TestServer(server::ServerSettings settings, const std::string& token = "", server::HttpLimits limits = {},
                      server::SchedulerFactory factory = {}, unsigned short port = 0)
      : token(token) {
    if (!factory) factory = server::configure_scheduler(settings.scheduler, settings.scheduler_args);
    jobs = std::make_unique<server::JobManager>(boost::asio::make_strand(io), settings, factory);
    http = std::make_unique<server::HttpServer>(io, *jobs, "127.0.0.1", port, token, limits);
    url = "http://127.0.0.1:" + std::to_string(http->port());
    // Two I/O threads, as on a two-core machine, so the tests exercise the strands.
    for (auto& t : threads) t = std::thread([this] { io.run(); });
  }
  ~TestServer() {
    http->stop();
    boost::asio::post(jobs->executor(), [this] { jobs->shutdown("test over"); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    io.stop();
    for (auto& t : threads) t.join();
  }

  client::HttpReply call(const std::string& method, const std::string& target, const std::string& body = "") {
    client::HttpClient c(url, token);  // with a token, as the administrator
    return c.request(method, target, body, std::chrono::milliseconds(0));
  }
  client::HttpReply post(const std::string& target, const nlohmann::json& body) {
    return call("POST", target, body.dump());
  }
  std::future<client::HttpReply> get_async(const std::string& target) {
    return std::async(std::launch::async, [this, target] { return call("GET", target); });
  }

  boost::asio::io_context io;
  std::unique_ptr<server::JobManager> jobs;
  std::unique_ptr<server::HttpServer> http;
  std::string token;
  std::string url;
  std::thread threads[2];
};

// A test with its own records directory (removed before and after) and server settings that
// write there.
struct ServerDirTest : ::testing::Test {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("perseus-server-" + std::to_string(::getpid()) + "-" +
                               ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "-" +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  void SetUp() override { std::filesystem::remove_all(dir); }
  void TearDown() override { std::filesystem::remove_all(dir); }
  server::ServerSettings settings(const std::string& scheduler = "AllMaxFrequency",
                                  nlohmann::json args = nlohmann::json::object()) {
    server::ServerSettings s;
    s.scheduler = scheduler;
    s.scheduler_args = std::move(args);
    s.dump_dir = dir.string();
    return s;
  }
};

inline nlohmann::json job_body(int pp, int dp = 1, int tp = 1, int microbatches = 2) {
  return {{"job_id", ""},
          {"pp_degree", pp},
          {"dp_degree", dp},
          {"tp_degree", tp},
          {"world_size", pp * dp * tp},
          {"framework", "merak"},
          {"model_name", "gpt3"},
          {"partition_method", "uniform"},
          {"microbatch_size", 4},
          {"num_microbatches", microbatches}};
}

inline nlohmann::json rank_body(const std::string& job, int rank, int pp_rank, std::vector<std::string> schedule,
                                std::vector<int> clocks = {1410, 1200, 1000}, int dp_rank = 0, int tp_rank = 0) {
  return {{"job_id", job},
          {"rank", rank},
          {"dp_rank", dp_rank},
          {"pp_rank", pp_rank},
          {"tp_rank", tp_rank},
          {"pipe_schedule", schedule},
          {"power_state_range", clocks}};
}

inline nlohmann::json result_body(int rank, double time = 1.0, double energy = 100.0) {
  return {
      {"rank", rank},
      {"iter_time", {time, time}},
      {"iter_energy", {energy, energy}},
      {"time_breakdown", {{"forward", {{0.1, 0.1}, {0.1, 0.1}}}, {"backward", {{0.2, 0.2}, {0.2, 0.2}}}}},
      {"energy_breakdown", {{"forward", {{10.0, 10.0}, {10.0, 10.0}}}, {"backward", {{20.0, 20.0}, {20.0, 20.0}}}}}};
}

}  // namespace perseus::testing
