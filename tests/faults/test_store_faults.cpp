// The job store under disk faults, against a real `perseus serve`: a full disk, a database locked
// by another process and an unreadable row. The server answers every round throughout (its writes
// wait and retry on their own thread) and a restart afterwards resumes every job.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "perseus/client/http_client.hpp"
#include "process_fixture.hpp"
#include "server_fixture.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

// A two-stage job driven round by round over HTTP, as its two ranks would.
struct Job {
  Job(const std::string& url, const std::string& model) : url(url) {
    client::HttpClient c(url);
    auto body = job_body(2);
    body["model_name"] = model;
    auto reply = c.request("POST", "/register_job", body.dump(), 10s);
    EXPECT_EQ(reply.status, 200) << reply.body;
    id = json::parse(reply.body).get<std::string>();
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(c.request("POST", "/register_rank", rank_body(id, r, r, {"forward", "backward"}).dump(), 10s).status,
                200);
  }

  // One round: both ranks ask (the barrier), then both report. False when a request failed.
  bool round(std::chrono::milliseconds limit = 10s) {
    std::string path = "/schedule/" + client::encode_path_segment(id);
    auto ask = [&](int rank) {
      return client::HttpClient(url).request("GET", path + "?rank=" + std::to_string(rank), "", limit);
    };
    auto first = std::async(std::launch::async, ask, 0);
    if (ask(1).status != 200 || first.get().status != 200) return false;
    client::HttpClient c(url);
    for (int r = 0; r < 2; ++r)
      if (c.request("POST", "/result/" + client::encode_path_segment(id), result_body(r).dump(), limit).status != 200)
        return false;
    return true;
  }

  json status() const {
    auto reply = client::HttpClient(url).request("GET", "/jobs/" + client::encode_path_segment(id), "", 10s);
    return reply.status == 200 ? json::parse(reply.body) : json(nullptr);
  }

  std::string url, id;
};

// Rounds a job has finished and the server has recorded (the next round's start waits on neither).
bool stored_rounds(const fs::path& db, const std::string& id, int rounds) {
  sqlite3* handle = nullptr;
  if (sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK)
    return sqlite3_close(handle), false;
  sqlite3_stmt* s = nullptr;
  int n = -1;
  if (sqlite3_prepare_v2(handle, "SELECT count(*) FROM rounds WHERE job_id = ?", -1, &s, nullptr) == SQLITE_OK) {
    sqlite3_bind_text(s, 1, id.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(s) == SQLITE_ROW) n = sqlite3_column_int(s, 0);
  }
  sqlite3_finalize(s);
  sqlite3_close(handle);
  return n == rounds;
}

// The server started again on the same records: every job comes back at the round it had finished.
void expect_restart_resumes(const fs::path& dir, int port, const std::vector<std::pair<Job*, int>>& jobs) {
  ServeProcess again(dir, "AllMaxFrequency", "{}", "", "", port);
  ASSERT_EQ(again.port, port) << again.log();
  for (auto [job, rounds] : jobs) {
    json s = job->status();
    ASSERT_TRUE(s.is_object()) << job->id << " is not served after the restart: " << again.log();
    EXPECT_EQ(s["round"], rounds) << job->id;
    EXPECT_TRUE(job->round()) << job->id << " serves rounds again";
  }
}

TEST(StoreFaults, ADiskFullForThreeRoundsNeitherStopsRoundsNorLosesThem) {
  auto dir = test_dir();
  ServeProcess serve(dir, "AllMaxFrequency", "{}");  // its log lines of the fault are lost with the rest
  ASSERT_NE(serve.port, 0);
  Job job(serve.url(), "full");
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(job.round());
  ASSERT_TRUE(eventually([&] { return stored_rounds(dir / "dump" / ".perseus.db", job.id, 2); }));
  // "Disk full": the server may not write a byte past the start of any file.
  std::string pid = std::to_string(serve.pid);
  ASSERT_EQ(std::system(("prlimit --pid " + pid + " --fsize=1:unlimited").c_str()), 0);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(job.round()) << "round " << 2 + i << " while the disk is full";
  EXPECT_TRUE(ServeProcess::alive(serve.pid));
  ASSERT_EQ(std::system(("prlimit --pid " + pid + " --fsize=unlimited:unlimited").c_str()), 0);
  ASSERT_TRUE(job.round());
  ASSERT_TRUE(eventually([&] { return stored_rounds(dir / "dump" / ".perseus.db", job.id, 6); }, 20s)) << serve.log();
  EXPECT_TRUE(eventually([&] { return fs::exists(dir / "dump" / job.id / "4.prof.json"); }, 10s));
  // Its error line went to the full disk too; the line after says the write failed and was retried.
  EXPECT_NE(serve.log().find("failed attempts"), std::string::npos) << serve.log();
  int port = serve.port;
  serve.stop(SIGTERM);
  expect_restart_resumes(dir, port, {{&job, 6}});
  fs::remove_all(dir);
}

TEST(StoreFaults, ADatabaseLockedByAnotherProcessDoesNotSlowRoundsAndItsWritesCatchUp) {
  auto dir = test_dir();
  ServeProcess serve(dir, "AllMaxFrequency", "{}");
  ASSERT_NE(serve.port, 0);
  Job job(serve.url(), "locked");
  ASSERT_TRUE(job.round());
  fs::path db = dir / "dump" / ".perseus.db";
  ASSERT_TRUE(eventually([&] { return stored_rounds(db, job.id, 1); }));
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN EXCLUSIVE; INSERT INTO jobs (job_id, info) VALUES ('lock', '{}');", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  // Six rounds while the lock is held: each write waits up to its busy timeout on the writer's
  // thread, never on a round (six rounds behind a 1 s timeout each would take over 6 s).
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(job.round(5s)) << "round " << 1 + i << " while the store is locked";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 6s) << "rounds waited for the locked store";
  std::this_thread::sleep_for(1500ms);  // at least one write timed out on the lock and is being retried
  EXPECT_FALSE(stored_rounds(db, job.id, 7));
  ASSERT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  ASSERT_TRUE(eventually([&] { return stored_rounds(db, job.id, 7); }, 20s)) << serve.log();
  std::string log = serve.log();
  EXPECT_NE(log.find("written when it works again"), std::string::npos) << log;
  EXPECT_NE(log.find("failed attempts"), std::string::npos) << log;
  int port = serve.port;
  serve.stop(SIGTERM);
  expect_restart_resumes(dir, port, {{&job, 7}});
  fs::remove_all(dir);
}

TEST(StoreFaults, AnUnreadableRoundResumesThatJobEarlierAndEveryOtherJobWhole) {
  auto dir = test_dir();
  auto serve = std::make_unique<ServeProcess>(dir, "AllMaxFrequency", "{}");
  ASSERT_NE(serve->port, 0);
  int port = serve->port;
  Job bad(serve->url(), "bad"), good(serve->url(), "good");
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(bad.round() && good.round());
  fs::path db = dir / "dump" / ".perseus.db";
  ASSERT_TRUE(eventually([&] { return stored_rounds(db, bad.id, 4) && stored_rounds(db, good.id, 4); }));
  serve->stop(SIGTERM);
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
  std::string corrupt = "UPDATE rounds SET results = '{not json' WHERE round = 2 AND job_id = '" + bad.id + "'";
  ASSERT_EQ(sqlite3_exec(handle, corrupt.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(handle);
  serve = std::make_unique<ServeProcess>(dir, "AllMaxFrequency", "{}", "", "", port);
  ASSERT_EQ(serve->port, port);
  std::string log = serve->log();
  EXPECT_NE(log.find("job " + bad.id + ": round 2 cannot be read"), std::string::npos) << log;
  EXPECT_EQ(bad.status()["round"], 2) << "resumed after its last readable round";
  EXPECT_EQ(good.status()["round"], 4);
  EXPECT_TRUE(bad.round() && good.round());
  serve.reset();
  expect_restart_resumes(dir, port, {{&bad, 3}, {&good, 5}});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace perseus::testing
