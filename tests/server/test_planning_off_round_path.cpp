// Planning never on the round path, on a whole server: while one job's plan choice runs (held here,
// deterministically, at the scheduler's before_plan_choice hook), another job on the same server
// runs its rounds to the end, and the held job waits at its barrier without a round passing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <iostream>
#include <semaphore>
#include <thread>

#include "perseus/client/http_client.hpp"
#include "perseus/simulate/cluster.hpp"
#include "server_fixture.hpp"
#include "simulate_fixtures.hpp"

namespace perseus {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// Holds the first plan choice made through hook() until released (at the latest on destruction, so
// that a failing test does not leave a planning thread blocked).
struct HeldChoice {
  ~HeldChoice() { release(); }
  std::function<void()> hook() {
    return [this] {
      if (seen_++ != 0) return;
      entered_.release();
      released_.acquire();
    };
  }
  bool wait_until_held(std::chrono::seconds limit) { return entered_.try_acquire_for(limit); }
  void release() {
    if (!done_.exchange(true)) released_.release();
  }
  int seen() const { return seen_.load(); }

 private:
  std::atomic<int> seen_{0};
  std::atomic<bool> done_{false};
  std::binary_semaphore entered_{0}, released_{0};
};

struct PlanningOffTheRoundPath : testing::ServerDirTest {};

TEST_F(PlanningOffTheRoundPath, AnotherJobRunsItsRoundsToTheEndWhileAJobsPlanChoiceIsHeld) {
  HeldChoice held;
  auto perseus = server::configure_scheduler("Perseus", {{"wait_for_plan", true}});
  server::SchedulerFactory factory = [perseus, &held](const server::SchedulerContext& context) {
    server::SchedulerContext c = context;
    if (c.job.model_name == "held") c.before_plan_choice = held.hook();
    return perseus(c);
  };
  testing::TestServer server(settings("Perseus", {{"wait_for_plan", true}}), "", {}, factory);
  auto job_round = [&server](const std::string& id) {
    return json::parse(server.call("GET", "/jobs/" + client::encode_path_segment(id)).body).at("round").get<int>();
  };

  // The other job's rounds with the server to itself, to compare with (printed, not asserted).
  auto timed = [&server](const std::string& model) {
    auto config = testing::gpt3_cluster(server.url, 2, 300);
    config.model_name = model;  // a job id of its own
    const auto started = std::chrono::steady_clock::now();
    auto run = simulate::simulate_cluster(config);
    return std::pair{run, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()};
  };
  const auto [alone, alone_seconds] = timed("alone");
  ASSERT_EQ(alone.iterations, 300);

  auto held_config = testing::gpt3_cluster(server.url, 2, 300);
  held_config.model_name = "held";
  held_config.request_timeout_s = 600;  // its ranks wait at the barrier while the choice is held
  std::promise<std::string> held_id;
  held_config.on_registered = [&held_id](const std::string& id, const std::string&) { held_id.set_value(id); };
  auto held_run = std::async(std::launch::async, [&held_config] { return simulate::simulate_cluster(held_config); });
  ASSERT_TRUE(held.wait_until_held(120s)) << "the held job never chose a plan";
  const std::string held_job = held_id.get_future().get();
  const int held_at = job_round(held_job);

  // The same job again, now beside the held one: registered, profiled, planned, chose its own plan
  // and ran on it, to the end.
  const auto [other, seconds] = timed("other");
  EXPECT_EQ(other.iterations, 300);
  const json other_status = json::parse(server.call("GET", "/jobs/" + client::encode_path_segment(other.job_id)).body);
  EXPECT_EQ(other_status["phase"], "done");
  EXPECT_GT(other_status["deployed_iterations"].get<long long>(), 0);
  const int other_rounds = other_status["round"].get<int>();
  std::cout << "[ measured ] the other job: " << other_rounds << " rounds in " << seconds << " s ("
            << 1e3 * seconds / other_rounds
            << " ms per round) while the held job's choice ran; alone before: " << alone_seconds << " s ("
            << 1e3 * alone_seconds / other_rounds << " ms per round)\n";

  // The held job did not move meanwhile: its choice is still running and its ranks wait.
  EXPECT_EQ(held.seen(), 1);
  EXPECT_EQ(job_round(held_job), held_at);
  EXPECT_EQ(json::parse(server.call("GET", "/jobs/" + client::encode_path_segment(held_job)).body)["phase"],
            "planning");

  held.release();
  auto held_summary = held_run.get();
  EXPECT_EQ(held_summary.iterations, 300);
  EXPECT_GT(job_round(held_job), held_at);
}

}  // namespace
}  // namespace perseus
