#pragma once
// The server's memory across restarts: every job, its ranks' registrations and its
// completed rounds, in SQLite (WAL mode, one transaction per change, so a kill -9 loses at most the
// round in progress). A restarted server rebuilds each job by creating its scheduler again and
// replaying the rounds into it — next_schedule(), then Scheduler::replay() with each round's stored
// record (Scheduler::round_record(): bounded by the job's stages and pipelines, not its ranks) — so
// every scheduler's progress (which clocks were profiled, what they measured, which plan runs)
// comes back without any scheduler-specific code in the server.
//
// The writes are synchronous and throw perseus::Error on failure; the job manager runs them on its
// BackgroundWriter (retried there), never on a job's strand. load() never throws for what one job
// stored: a job whose registration cannot be read is dropped, a rank whose registration cannot be
// read must register again, and a job whose rounds have a gap or an unreadable round resumes after
// the last round before it (the later ones are deleted); each with a warning naming the job.
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "perseus/server/wire.hpp"

namespace perseus::server {

struct StoredJob {
  JobInfo info;
  std::vector<RankInfo> ranks;
  int rounds = 0;                       // completed rounds
  std::vector<nlohmann::json> records;  // per completed round: Scheduler::round_record(); null: not kept
  bool ended = false;
  std::string end_detail;
};

class JobStore {
 public:
  // Opens (creating if needed) the database. A file that is not a database (or is corrupt) is moved
  // aside to <file>.unreadable-<seconds since the epoch> with an error line, and a new one is made.
  // Throws perseus::Error naming the file when it cannot be opened or made at all.
  explicit JobStore(const std::filesystem::path& file);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  void add_job(const JobInfo& info);
  void add_rank(const std::string& job_id, const RankInfo& rank);
  // `record` null: the scheduler does not need the round's results to resume.
  void add_round(const std::string& job_id, int round, const nlohmann::json& record);
  void end_job(const std::string& job_id, const std::string& detail);
  void forget_job(const std::string& job_id);
  std::vector<StoredJob> load();

  // How long one write waits for a lock another process holds before it fails (and is retried).
  void set_busy_timeout(std::chrono::milliseconds timeout);

  const std::filesystem::path& file() const { return file_; }

 private:
  struct Db;
  std::unique_ptr<Db> db_;
  std::filesystem::path file_;
};

}  // namespace perseus::server
