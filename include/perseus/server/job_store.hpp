#pragma once
// The server's memory across restarts (DESIGN §6): every job, its ranks' registrations and its
// completed rounds, in SQLite (WAL mode, one transaction per change, so a kill -9 loses at most the
// round in progress). A restarted server rebuilds each job by creating its scheduler again and
// replaying the rounds into it — next_schedule(), then observe() with the stored results — so
// every scheduler's progress (which clocks were profiled, what they measured, which plan runs)
// comes back without any scheduler-specific code. Results are kept only for schedulers whose
// progress depends on them (Scheduler::observes_results()).
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "perseus/server/models.hpp"

namespace perseus::server {

struct StoredJob {
  JobInfo info;
  std::vector<RankInfo> ranks;
  int rounds = 0;  // completed rounds
  std::vector<std::optional<std::vector<ProfilingResult>>> results;  // per completed round; nullopt: not kept
  bool ended = false;
  std::string end_detail;
};

class JobStore {
 public:
  // Opens (creating if needed) the database; throws perseus::Error naming the file.
  explicit JobStore(const std::filesystem::path& file);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  void add_job(const JobInfo& info);
  void add_rank(const std::string& job_id, const RankInfo& rank);
  // `results` null: the scheduler does not need them to resume.
  void add_round(const std::string& job_id, int round, const std::vector<ProfilingResult>* results);
  void end_job(const std::string& job_id, const std::string& detail);
  void forget_job(const std::string& job_id);
  std::vector<StoredJob> load();

  const std::filesystem::path& file() const { return file_; }

 private:
  struct Db;
  std::unique_ptr<Db> db_;
  std::filesystem::path file_;
};

}  // namespace perseus::server
