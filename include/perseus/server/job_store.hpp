#pragma once
// The server's memory across restarts: every job, its ranks' registrations and its
// completed rounds, in SQLite (WAL mode, synchronous=FULL: a committed transaction survives a kill
// -9 and a power cut). A restarted server rebuilds each job by creating its scheduler again and
// replaying the rounds into it — next_schedule(), then Scheduler::replay() with each round's stored
// record (Scheduler::round_record(): bounded by the job's stages and pipelines, not its ranks) — so
// every scheduler's progress (which clocks were profiled, what they measured, which plan runs)
// comes back without any scheduler-specific code in the server.
//
// The writes are synchronous and throw StoreError on failure; the job manager runs them on its
// StoreCommitter (store_committer.hpp), several in one transaction, never on a job's strand.
// load() never throws for what one job stored: a job whose registration cannot be read is dropped,
// a rank whose registration cannot be read must register again, and a job whose rounds have a gap
// or an unreadable round resumes after the last round before it (the later ones are deleted);
// each with a warning naming the job.
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "perseus/server/wire.hpp"
#include "perseus/util/error.hpp"

namespace perseus::server {

struct StoredJob {
  JobInfo info;
  std::vector<RankInfo> ranks;
  int rounds = 0;                       // completed rounds
  std::vector<nlohmann::json> records;  // per completed round: Scheduler::round_record(); null: not kept
  bool ended = false;
  std::string end_detail;
};

// A store operation that failed, with SQLite's result code.
class StoreError : public Error {
 public:
  StoreError(const std::string& message, int code) : Error(message), code_(code) {}
  int code() const { return code_; }
  // The database or the disk failed (full, I/O error, locked by another process, damaged, read
  // only), not this write: every write of the transaction fails alike and may work later.
  bool store_fault() const;
  // The file is damaged (or not a database): retrying cannot help, only recovery (JobStore::recover).
  bool damaged() const;

 private:
  int code_;
};

// When a COMMIT returns: once the transaction is on the disk (full: it survives a power cut), or
// once it is in the operating system's hands (normal: it survives the process being killed, not
// a power cut). perseus serve uses full; normal is there to measure what it costs.
enum class StoreSync { full, normal };

class JobStore {
 public:
  // Opens (creating if needed) the database and checks it. A store that cannot be used as it is —
  // an empty file, one that is not a database, a damaged one (PRAGMA integrity_check, or rows that
  // cannot be read),
  // a directory or other non-file at its path — is moved aside to <file>.unreadable-<seconds since
  // the epoch> and what can be read of it is copied into a new one (store_salvage.hpp), with a
  // warning naming the file aside, the jobs kept and the jobs lost. Throws perseus::Error
  // (ErrorKind::cannot_write) naming the file only when no store can be made at all (a read-only folder).
  explicit JobStore(const std::filesystem::path& file, StoreSync sync = StoreSync::full);
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

  // Transactions (the committer's group commit): one savepoint per write, so that a write that
  // fails on its own (a constraint) is undone alone; every other failure ends the transaction.
  void begin();
  void commit();
  void rollback() noexcept;
  void savepoint();
  void release_savepoint();
  void rollback_to_savepoint() noexcept;

  // The file turned out damaged while the server runs (a write failed with StoreError::damaged):
  // moved aside and salvaged as at start. Jobs the server holds must be written again.
  void recover();

  // How long one write waits for a lock another process holds before it fails (and is retried).
  void set_busy_timeout(std::chrono::milliseconds timeout);

  const std::filesystem::path& file() const { return file_; }
  // Where the last unusable file was moved (empty when none was since this store was opened).
  const std::filesystem::path& set_aside() const { return set_aside_; }

 private:
  struct Db;
  void open_checked();
  void recover_because(const std::string& why);
  std::vector<StoredJob> load_once();
  void exec(const char* sql);
  std::unique_ptr<Db> db_;
  std::filesystem::path file_, set_aside_;
  std::chrono::milliseconds busy_timeout_{1000};
  StoreSync sync_;
};

}  // namespace perseus::server
