// A dump folder that fills up mid-run (every write under it fails with ENOSPC, through
// disk_full_preload.cpp), against a real `perseus serve`: rounds go on; a registration that cannot
// be stored is refused with 503 (never acknowledged, then dropped) and goes through once the disk
// has room; after a kill -9 and a restart everything acknowledged is there, the rounds run while
// the disk was full included. Randomized (the disk is full for 1 to 4 rounds);
// PERSEUS_FAULT_INSTANCES sets how many runs (default 2, ~1.5 s each).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "job_driver.hpp"
#include "process_fixture.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

TEST(DiskFull, AFullDumpFolderRefusesRegistrationsLosesNothingAcknowledgedAndRoundsGoOn) {
  std::random_device seeds;
  for (int instance = 0, count = fault_instances(2); instance < count; ++instance) {
    unsigned seed = seeds();
    std::mt19937 random(seed);
    const int full_rounds = std::uniform_int_distribution<int>(1, 4)(random);
    SCOPED_TRACE(fmt::format("instance {} (seed {}): the disk is full for {} rounds", instance, seed, full_rounds));
    auto dir = test_dir();
    fs::create_directories(dir / "dump");
    fs::path flag = dir / "disk-is-full";
    std::string env = fmt::format(
        "export LD_PRELOAD='{}' PERSEUS_DISK_FULL_DIR='{}' PERSEUS_DISK_FULL_FLAG='{}' "
        "ASAN_OPTIONS=\"${{ASAN_OPTIONS:+$ASAN_OPTIONS:}}verify_asan_link_order=0\";",
        PERSEUS_DISK_FULL_PRELOAD, fs::canonical(dir / "dump").string(), flag.string());
    auto serve = std::make_unique<ServeProcess>(dir, "AllMaxFrequency", "{}", "", env);
    ASSERT_NE(serve->port, 0) << serve->log();
    int port = serve->port;
    DrivenJob running, waiting;
    ASSERT_TRUE(running.start(serve->url(), "running"));
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(running.round());
    std::ofstream(flag) << "full\n";  // the disk fills up
    DrivenJob refused;
    for (int i = 0; i < full_rounds; ++i) {
      ASSERT_TRUE(running.round()) << "round " << running.acked_rounds << " while the disk is full: " << serve->log();
      EXPECT_FALSE(refused.start(serve->url(), "refused")) << "a registration was acknowledged on a full disk";
      if (!refused.id.empty()) break;
    }
    auto reply = refused.call("POST", "/register_job", job_body(2).dump(), 5s);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->status, 503) << reply->body;
    EXPECT_NE(reply->body.find("try again"), std::string::npos) << reply->body;
    fs::remove(flag);  // room again: the client's retries go through
    bool registered = false;
    for (int attempt = 0; attempt < 100 && !registered; ++attempt) {
      registered = waiting.start(serve->url(), "waiting");
      if (!registered) std::this_thread::sleep_for(50ms);
    }
    ASSERT_TRUE(registered) << serve->log();
    ASSERT_TRUE(running.round());
    // The rounds run while the disk was full reach their records too.
    std::string last = fmt::format("{}.prof.json", running.acked_rounds - 2);
    EXPECT_TRUE(eventually([&] { return fs::exists(dir / "dump" / running.id / last); }, 10s)) << serve->log();
    serve->stop(SIGKILL);
    serve = std::make_unique<ServeProcess>(dir, "AllMaxFrequency", "{}", "", "", port);
    ASSERT_EQ(serve->port, port) << serve->log();
    nlohmann::json s = running.status();
    ASSERT_TRUE(s.is_object()) << serve->log();
    EXPECT_EQ(s["round"].get<int>(), running.acked_rounds) << "rounds acknowledged on a full disk were lost";
    s = waiting.status();
    ASSERT_TRUE(s.is_object()) << serve->log();
    EXPECT_EQ(s["registered"], 2);
    serve->stop(SIGTERM);
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace perseus::testing
