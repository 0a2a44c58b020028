// The job store's tolerance of what it finds on disk, and the bounded round records a restarted
// server replays: each scheduler's replay(round_record(results)) decides as observe(results) did.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <fstream>
#include <thread>

#include "perseus/server/background_writer.hpp"
#include "perseus/server/job_store.hpp"
#include "perseus/server/store_committer.hpp"
#include "perseus/simulate/cluster.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/profile/profile.hpp"
#include "server_fixture.hpp"
#include "simulate_fixtures.hpp"
#include "store_rows.hpp"

namespace perseus {
namespace {

using nlohmann::json;
using server::JobStore;
using server::ProfilingResult;

struct JobStoreTest : testing::ServerDirTest {
  std::filesystem::path db() { return dir / ".perseus.db"; }

  server::JobInfo job(const std::string& id) {
    auto info = server::job_info_from_json(testing::job_body(2));
    info.job_id = id;
    return info;
  }

  // Two jobs of two ranks with `rounds` rounds each.
  void fill(int rounds) {
    JobStore store(db());
    for (const char* id : {"a", "b"}) {
      store.add_job(job(id));
      for (int r = 0; r < 2; ++r)
        store.add_rank(id, server::rank_info_from_json(testing::rank_body(id, r, r, {"forward", "backward"})));
      for (int round = 0; round < rounds; ++round) store.add_round(id, round, json::array({round}));
    }
  }

  void sql(const std::string& statement) {
    sqlite3* handle = nullptr;
    ASSERT_EQ(sqlite3_open(db().c_str(), &handle), SQLITE_OK);
    char* message = nullptr;
    int rc = sqlite3_exec(handle, statement.c_str(), nullptr, nullptr, &message);
    std::string why = message ? message : "";
    sqlite3_free(message);
    sqlite3_close(handle);
    ASSERT_EQ(rc, SQLITE_OK) << why;
  }

  // Stores moved aside as unreadable in the folder.
  int files_set_aside() const {
    int aside = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      aside += e.path().filename().string().rfind(".perseus.db.unreadable-", 0) == 0;
    return aside;
  }

  std::map<std::string, server::StoredJob> load() {
    JobStore store(db());
    std::map<std::string, server::StoredJob> out;
    for (auto& j : store.load()) out[j.info.job_id] = std::move(j);
    return out;
  }
};

TEST_F(JobStoreTest, AGapResumesThatJobAfterTheLastRoundBeforeItAndLeavesTheOthersWhole) {
  fill(5);
  sql("DELETE FROM rounds WHERE job_id = 'a' AND round = 3");
  auto jobs = load();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs["a"].rounds, 3);
  EXPECT_EQ(jobs["a"].records.back(), json::array({2}));
  EXPECT_EQ(jobs["b"].rounds, 5);
  EXPECT_EQ(jobs["b"].ranks.size(), 2u);
  // The rounds after the gap are gone: once round 3 is stored again they cannot look contiguous.
  {
    JobStore store(db());
    store.add_round("a", 3, json::array({33}));
  }
  EXPECT_EQ(load()["a"].rounds, 4);
}

TEST_F(JobStoreTest, AnUnreadableRoundRankOrJobIsDroppedNamingItAndTheRestLoads) {
  fill(4);
  sql("UPDATE rounds SET results = '{bad' WHERE job_id = 'a' AND round = 1;"
      "UPDATE ranks SET info = 'nonsense' WHERE job_id = 'b' AND rank = 1;"
      "INSERT INTO jobs (job_id, info) VALUES ('c', '[1, 2');");
  auto jobs = load();
  ASSERT_EQ(jobs.size(), 2u) << "job c's registration cannot be read: dropped";
  EXPECT_EQ(jobs["a"].rounds, 1);
  EXPECT_EQ(jobs["a"].ranks.size(), 2u);
  EXPECT_EQ(jobs["b"].rounds, 4);
  ASSERT_EQ(jobs["b"].ranks.size(), 1u) << "rank 1 must register again";
  EXPECT_EQ(jobs["b"].ranks[0].rank, 0);
  EXPECT_EQ(load().count("c"), 0u);
}

TEST_F(JobStoreTest, AFileThatIsNotADatabaseIsMovedAsideAndANewStoreStarts) {
  std::filesystem::create_directories(dir);
  std::ofstream(db()) << std::string(4096, 'x');
  EXPECT_TRUE(load().empty());
  EXPECT_EQ(files_set_aside(), 1);
  fill(1);
  EXPECT_EQ(load().size(), 2u);
}

// A header whose format numbers no SQLite writes (past its magic string, the rest of page 1 is the
// header and the schema table): SQLite says "unsupported file format" when it reads the schema, a plain
// error, not one of damage. The file is moved aside and a new store starts, as for a damaged page.
TEST_F(JobStoreTest, AHeaderWithFormatNumbersNoSQLiteWritesIsMovedAsideAndANewStoreStarts) {
  fill(2);
  {
    std::fstream file(db(), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(36);
    const std::string bytes(64, static_cast<char>(0xab));  // the schema format number (44) among them
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  EXPECT_NO_THROW((void)load());
  EXPECT_EQ(files_set_aside(), 1);
  fill(1);
  EXPECT_EQ(load().size(), 2u);
}

// Group commit: each write's done() runs after the transaction holding it committed; a store
// fault refuses the acknowledged writes of that transaction and keeps the kept ones for the next;
// a write that fails on its own is left out alone.
TEST_F(JobStoreTest, TheCommitterAcknowledgesAfterCommitRefusesOnAStoreFaultAndKeepsWhatItMust) {
  JobStore store(db());
  server::StoreCommitter::Options options;
  options.first_retry = std::chrono::milliseconds(1);
  options.max_retry = std::chrono::milliseconds(5);
  server::StoreCommitter committer(store, options);
  std::mutex mutex;
  std::map<std::string, bool> done;
  auto record = [&](const std::string& what) {
    return [&, what](bool committed) {
      std::lock_guard lock(mutex);
      done[what] = committed;
    };
  };
  auto in_store = [&](const std::string& id) {
    JobStore reader(db());
    for (const auto& j : reader.load())
      if (j.info.job_id == id) return true;
    return false;
  };
  ASSERT_TRUE(committer.submit([&](JobStore& s) { s.add_job(job("a")); },
                               [&](bool committed) {
                                 // Committed before it is acknowledged: another connection reads it already.
                                 EXPECT_TRUE(committed);
                                 EXPECT_TRUE(in_store("a"));
                                 record("a")(committed);
                               }));
  ASSERT_TRUE(committer.flush(std::chrono::seconds(10)));
  // A store fault in a transaction: its acknowledged writes are refused, the kept ones retried.
  std::atomic<int> faults{2};
  committer.keep("kept b", 100, [&](JobStore& s) {
    if (faults-- > 0) throw server::StoreError("disk full", SQLITE_FULL);
    s.add_job(job("b"));
  });
  ASSERT_TRUE(committer.submit([&](JobStore& s) { s.add_job(job("c")); }, record("c")));
  // A write that fails alone (not the store): left out, the others of its transaction commit.
  ASSERT_TRUE(committer.flush(std::chrono::seconds(10)));
  ASSERT_TRUE(committer.submit([](JobStore&) { throw std::runtime_error("a bug"); }, record("bug")));
  ASSERT_TRUE(committer.submit([&](JobStore& s) { s.add_job(job("d")); }, record("d")));
  ASSERT_TRUE(committer.flush(std::chrono::seconds(10)));
  std::lock_guard lock(mutex);
  EXPECT_TRUE(done["a"]);
  EXPECT_TRUE(in_store("b")) << "a kept write is written once the store works";
  EXPECT_EQ(done.count("c") == 1 && !done["c"], !in_store("c")) << "refused if and only if not stored";
  EXPECT_FALSE(done["bug"]);
  EXPECT_TRUE(done["d"]);
  EXPECT_TRUE(in_store("d"));
  EXPECT_GE(committer.failures(), 1u);
  EXPECT_FALSE(committer.failing());
}

// A store damaged anywhere loses only what cannot be read: every registration a plain reader gets
// back row by row comes back, and the damaged file is kept aside. Every page in turn, damaged four
// ways: all of it, its header and cells but not its end, its end, a few bytes in its middle.
TEST_F(JobStoreTest, ADamagedPageCostsOnlyItsRowsAndTheFileIsKeptAside) {
  {
    JobStore store(db());
    for (int j = 0; j < 40; ++j) {
      std::string id = fmt::format("job{:02}-{}", j, std::string(60, 'x'));  // several pages of jobs
      store.add_job(job(id));
      store.add_round(id, 0, json::array({j}));
    }
  }
  const auto pristine = testing::readable_jobs(db(), dir / "oracle");
  ASSERT_EQ(pristine.size(), 40u);
  auto size = std::filesystem::file_size(db());
  int everything_lost = 0, damaged = 0;
  struct Span {
    std::size_t from, length;
  };
  const Span spans[] = {{0, 4096}, {0, 3900}, {196, 3900}, {2000, 64}};
  for (std::uintmax_t page = 1; page < size / 4096; ++page) {
    for (std::size_t s = 0; s < std::size(spans); ++s) {
      SCOPED_TRACE(fmt::format("page {}, bytes {} to {}", page, spans[s].from, spans[s].from + spans[s].length));
      auto copy = dir / fmt::format("copy{}-{}.db", page, s);
      std::filesystem::copy_file(db(), copy, std::filesystem::copy_options::overwrite_existing);
      {
        std::mt19937 random(static_cast<unsigned>(page * 8 + s));
        std::string noise(spans[s].length, '\0');
        for (auto& b : noise) b = static_cast<char>(random());
        std::fstream f(copy, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(page * 4096 + spans[s].from));
        f.write(noise.data(), static_cast<std::streamsize>(noise.size()));
      }
      auto readable = testing::readable_jobs(copy, dir / "oracle");
      std::set<std::string> kept;
      {
        JobStore store(copy);
        for (const auto& j : store.load()) kept.insert(j.info.job_id);
        if (!store.set_aside().empty()) {
          EXPECT_TRUE(std::filesystem::exists(store.set_aside()));
        }
        if (readable.size() < pristine.size()) {
          EXPECT_FALSE(store.set_aside().empty()) << "a store a plain reader trips over is not kept aside";
        }
        damaged += !store.set_aside().empty();
      }
      for (const auto& [id, info] : readable)
        if (pristine.contains(id) && pristine.at(id) == info) {
          EXPECT_TRUE(kept.contains(id)) << id << "'s registration can be read, yet it was not kept";
        }
      everything_lost += kept.empty();
    }
  }
  EXPECT_GT(damaged, 0);
  // Only the jobs table's root page, which points to all its leaves, costs every job (they are named).
  EXPECT_LE(everything_lost, static_cast<int>(std::size(spans))) << "of " << size / 4096 - 1 << " pages";
}

TEST(BackgroundWriter, RetriesAFailingWriteInOrderAndDropsWhatDoesNotFit) {
  server::BackgroundWriter::Options options;
  options.first_retry = std::chrono::milliseconds(1);
  options.max_retry = std::chrono::milliseconds(2);
  options.max_queued_bytes = 100;
  server::BackgroundWriter writer(options);
  std::atomic<int> failures_left{3};
  std::vector<int> done;
  std::mutex mutex;
  auto record = [&](int n) {
    std::lock_guard lock(mutex);
    done.push_back(n);
  };
  EXPECT_TRUE(writer.post("first", 40, [&] {
    if (failures_left-- > 0) throw std::runtime_error("disk full");
    record(1);
  }));
  EXPECT_TRUE(writer.post("second", 40, [&] { record(2); }));
  // The first write may still be queued or failing: a third one over the bound is dropped.
  bool third = writer.post("third", 40, [&] { record(3); });
  ASSERT_TRUE(writer.flush(std::chrono::seconds(10)));
  std::vector<int> expected = third ? std::vector<int>{1, 2, 3} : std::vector<int>{1, 2};
  EXPECT_EQ(done, expected);
  EXPECT_EQ(writer.failures(), 3u);
  EXPECT_EQ(writer.dropped(), third ? 0u : 1u);
}

// --- Round records: bounded by stages by default, every rank on request, the last N rounds kept ----

struct RecordsTest : testing::ServerDirTest {
  // A job of 2 stages x 2 pipelines run for `rounds` rounds; its records folder.
  std::filesystem::path run(server::ServerSettings s, int rounds) {
    testing::TestServer server(s);
    std::string id = json::parse(server.post("/register_job", testing::job_body(2, 2)).body);
    for (int r = 0; r < 4; ++r)
      EXPECT_EQ(server
                    .post("/register_rank",
                          testing::rank_body(id, r, r % 2, {"forward", "backward"}, {1410, 1200, 1000}, r / 2))
                    .status,
                200);
    std::string path = "/schedule/" + client::encode_path_segment(id);
    for (int round = 0; round < rounds; ++round) {
      std::vector<std::future<client::HttpReply>> asks;
      for (int r = 0; r < 4; ++r) asks.push_back(server.get_async(path + "?rank=" + std::to_string(r)));
      for (auto& a : asks) EXPECT_EQ(a.get().status, 200);
      for (int r = 0; r < 4; ++r)
        EXPECT_EQ(server.post("/result/" + client::encode_path_segment(id), testing::result_body(r, 1.0 + r)).status,
                  200);
    }
    EXPECT_TRUE(server.jobs->flush_records(std::chrono::seconds(10)));
    return dir / id;
  }
};

TEST_F(RecordsTest, ARoundRecordsOneResultPerStageUnlessEveryRankIsAskedFor) {
  auto job = run(settings("AllMaxFrequency3D"), 1);
  json prof = json::parse(read_file(job / "0.prof.json"));
  ASSERT_EQ(prof.size(), 2u);  // stages, not ranks
  EXPECT_EQ(prof[1]["rank"], 1);
  EXPECT_EQ(prof[1]["iter_time"], json({4.0, 4.0}));                   // the slowest of ranks 1 and 3
  EXPECT_EQ(prof[1]["iter_energy"], json({200.0, 200.0}));             // both ranks' energy
  EXPECT_EQ(json::parse(read_file(job / "0.sched.json")).size(), 2u);  // one schedule per stage: all equal
  std::filesystem::remove_all(dir);
  auto s = settings("AllMaxFrequency3D");
  s.record_ranks = true;
  job = run(s, 1);
  EXPECT_EQ(json::parse(read_file(job / "0.prof.json")).size(), 4u);
  EXPECT_EQ(json::parse(read_file(job / "0.sched.json")).size(), 4u);
}

TEST_F(RecordsTest, RetentionKeepsTheLastRoundsFiles) {
  auto s = settings("AllMaxFrequency3D");
  s.record_rounds = 2;
  auto job = run(s, 4);
  for (int round = 0; round < 4; ++round)
    for (const char* kind : {"prof", "sched"})
      EXPECT_EQ(std::filesystem::exists(job / fmt::format("{}.{}.json", round, kind)), round >= 2) << round << kind;
}

// --- Replay: a restarted server's scheduler decides as the one that saw every rank's results ------

struct Recording {
  server::SchedulerContext context;
  std::vector<std::vector<server::PowerStateSchedule>> schedules;  // per round
  std::vector<std::vector<ProfilingResult>> results;               // per round, every rank
};

class Recorder final : public server::Scheduler {
 public:
  Recorder(std::unique_ptr<Scheduler> inner, Recording& out) : inner_(std::move(inner)), out_(out) {}
  std::vector<server::PowerStateSchedule> next_schedule() override {
    auto s = inner_->next_schedule();
    out_.schedules.push_back(s);
    return s;
  }
  void observe(const std::vector<ProfilingResult>& results) override {
    out_.results.push_back(results);
    inner_->observe(results);
  }
  bool observes_results() const override { return inner_->observes_results(); }
  json round_record(const std::vector<ProfilingResult>& results) const override {
    return inner_->round_record(results);
  }
  void replay(const json& record) override { inner_->replay(record); }
  bool ready() const override { return inner_->ready(); }
  server::SchedulerStatus status() const override { return inner_->status(); }

 private:
  std::unique_ptr<Scheduler> inner_;
  Recording& out_;
};

bool same(const std::vector<server::PowerStateSchedule>& a, const std::vector<server::PowerStateSchedule>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].rank != b[i].rank || a[i].power_states != b[i].power_states) return false;
  return true;
}

simulate::SimulationConfig cluster(const std::string& url, int iterations) {
  auto c = testing::gpt3_cluster(url, 2, iterations);
  c.num_microbatches = 8;
  c.tensor_parallel = 2;
  c.noise = 0.02;  // tensor-parallel ranks and pipelines measure different times
  c.seed = 3;
  return c;
}

void expect_replay_decides_the_same(const std::string& scheduler, const json& args, int iterations,
                                    const std::filesystem::path& dir) {
  server::ServerSettings settings;
  settings.scheduler = scheduler;
  settings.scheduler_args = args;
  settings.dump_dir = dir.string();
  auto inner = server::configure_scheduler(scheduler, args);
  Recording live;
  {
    testing::TestServer server(settings, "", {}, [&](const server::SchedulerContext& context) {
      live.context = context;
      // The server's wake holds its strand, which must not outlive the server's io_context; the
      // restored scheduler below has no server and is polled with ready().
      live.context.wake = [] {};
      return std::make_unique<Recorder>(inner(context), live);
    });
    (void)simulate::simulate_cluster(cluster(server.url, iterations));
  }
  ASSERT_GT(live.results.size(), 5u) << scheduler;
  auto restored = inner(live.context);
  std::size_t record_bytes = 0, result_bytes = 0;
  for (std::size_t round = 0; round < live.results.size(); ++round) {
    for (int i = 0; i < 10000 && !restored->ready(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(same(restored->next_schedule(), live.schedules[round])) << scheduler << ", round " << round;
    json record = json::parse(restored->round_record(live.results[round]).dump());  // as stored
    record_bytes += record.dump().size();
    for (const auto& r : live.results[round]) result_bytes += protocol::to_json(r).dump().size();
    restored->replay(record);
  }
  if (live.schedules.size() > live.results.size()) {  // the round that was running at the end
    for (int i = 0; i < 10000 && !restored->ready(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_TRUE(same(restored->next_schedule(), live.schedules.back())) << scheduler;
  }
  // Bounded by stages and pipelines: far below every rank's results.
  EXPECT_LT(record_bytes * 4, result_bytes) << scheduler;
}

using RoundRecordTest = testing::ServerDirTest;

TEST_F(RoundRecordTest, PerseusReplaysTheSameDecisionsFromItsPerStageAndPipelineRecords) {
  expect_replay_decides_the_same("Perseus", {{"wait_for_plan", true}}, 260, dir);
}

TEST_F(RoundRecordTest, ThreeDSchedulersReplayTheSameDecisionsFromPerStageRecords) {
  expect_replay_decides_the_same("InstructionProfiler3D", {{"minimum_power_state", 1200}}, 400, dir);
}

}  // namespace
}  // namespace perseus
