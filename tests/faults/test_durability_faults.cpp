// Acknowledged means durable, against a real `perseus serve` killed with SIGKILL at random moments
// while several clients register jobs (both dialects) and run rounds: after a restart every
// registration and every round it answered 200 is there. The disk is slow in most instances (each
// fsync of the dump folder 1-8 ms longer, through disk_full_preload.cpp), so that commits run
// behind the requests and a server that answered before its commit would be caught. Randomized;
// PERSEUS_FAULT_INSTANCES sets how many kills (default 4, about a second each).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "job_driver.hpp"
#include "process_fixture.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Every job one client got a 200 for, with what it got 200s for.
struct Acknowledged {
  std::mutex mutex;
  std::vector<DrivenJob> jobs;
  void add(const DrivenJob& job) {
    std::lock_guard lock(mutex);
    jobs.push_back(job);
  }
};

// One client: jobs one after another, each registered and run for a few rounds, until the server goes.
void client_loop(const std::string& url, int client, unsigned seed, Acknowledged& acknowledged) {
  std::mt19937 random(seed);
  for (int n = 0;; ++n) {
    DrivenJob job;
    bool zeus = client == 0;  // one client speaks Zeus's dialect: registrations only
    bool started =
        job.start(url, fmt::format("model{}", client),
                  zeus ? std::optional<std::string>(fmt::format("org/model-{}-{}", client, n)) : std::nullopt, 2s);
    if (!job.id.empty()) acknowledged.add(job);
    if (!started) return;
    int rounds = zeus ? 0 : std::uniform_int_distribution<int>(1, 6)(random);
    for (int i = 0; i < rounds; ++i) {
      bool ok = job.round(2s);
      {
        std::lock_guard lock(acknowledged.mutex);
        for (auto& j : acknowledged.jobs)
          if (j.id == job.id) j.acked_rounds = job.acked_rounds;
      }
      if (!ok) return;
    }
  }
}

TEST(Durability, KillNineUnderLoadLosesNoAcknowledgedRegistrationOrRound) {
  auto dir = test_dir();
  std::random_device seeds;
  fs::create_directories(dir / "dump");
  for (int instance = 0, count = fault_instances(4); instance < count; ++instance) {
    unsigned seed = seeds();
    std::mt19937 random(seed);
    const int slow_us = instance % 4 == 3 ? 0 : std::uniform_int_distribution<int>(1000, 8000)(random);
    SCOPED_TRACE(fmt::format("instance {} (seed {}): each fsync {} us longer", instance, seed, slow_us));
    std::string slow_disk = fmt::format(
        "export LD_PRELOAD='{}' PERSEUS_DISK_FULL_DIR='{}' PERSEUS_DISK_SLOW_US={} "
        "ASAN_OPTIONS=\"${{ASAN_OPTIONS:+$ASAN_OPTIONS:}}verify_asan_link_order=0\";",
        PERSEUS_DISK_FULL_PRELOAD, fs::canonical(dir / "dump").string(), slow_us);
    auto serve = std::make_unique<ServeProcess>(dir, "AllMaxFrequency", "{}", "--max-jobs 100000", slow_disk);
    ASSERT_NE(serve->port, 0) << serve->log();
    int port = serve->port;
    Acknowledged acknowledged;
    std::vector<std::thread> clients;
    for (int c = 0; c < 5; ++c)
      clients.emplace_back(client_loop, serve->url(), c, seed + static_cast<unsigned>(c), std::ref(acknowledged));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(150, 700)(random)));
    serve->stop(SIGKILL);
    for (auto& t : clients) t.join();
    ASSERT_GT(acknowledged.jobs.size(), 0u);
    serve = std::make_unique<ServeProcess>(dir, "AllMaxFrequency", "{}", "--max-jobs 100000", "", port);
    ASSERT_EQ(serve->port, port) << serve->log();
    int rounds = 0;
    for (const auto& job : acknowledged.jobs) {
      nlohmann::json s = job.status();
      ASSERT_TRUE(s.is_object()) << "job " << job.id << " was acknowledged, then lost: " << serve->log();
      EXPECT_GE(s["registered"].get<int>(), job.acked_ranks) << job.id;
      EXPECT_GE(s["round"].get<int>(), job.acked_rounds) << job.id << ": an acknowledged round was lost";
      rounds += job.acked_rounds;
    }
    std::printf("instance %d (fsync +%d us): %zu jobs and %d rounds acknowledged before the kill\n", instance, slow_us,
                acknowledged.jobs.size(), rounds);
    serve->stop(SIGKILL);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace perseus::testing
