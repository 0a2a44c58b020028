#include "perseus/server/job_store.hpp"

#include <sqlite3.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <stdexcept>

#include "perseus/util/safe_text.hpp"
#include "sqlite_statement.hpp"
#include "store_salvage.hpp"

namespace perseus::server {

namespace fs = std::filesystem;
using nlohmann::json;

bool StoreError::store_fault() const {
  switch (code_ & 0xff) {
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_READONLY:
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_CANTOPEN:
    case SQLITE_NOMEM:
    case SQLITE_PROTOCOL:
    case SQLITE_PERM:
      return true;
    default:
      return false;
  }
}

bool StoreError::damaged() const { return (code_ & 0xff) == SQLITE_CORRUPT || (code_ & 0xff) == SQLITE_NOTADB; }

const char* const kStoreSchema = R"(
PRAGMA page_size = 4096;
PRAGMA journal_mode = WAL;
PRAGMA foreign_keys = ON;
CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, info TEXT NOT NULL, ended INTEGER NOT NULL DEFAULT 0,
                                 end_detail TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS ranks (job_id TEXT NOT NULL REFERENCES jobs ON DELETE CASCADE, rank INTEGER NOT NULL,
                                  info TEXT NOT NULL, PRIMARY KEY (job_id, rank));
CREATE TABLE IF NOT EXISTS rounds (job_id TEXT NOT NULL REFERENCES jobs ON DELETE CASCADE, round INTEGER NOT NULL,
                                   results TEXT, PRIMARY KEY (job_id, round));
)";

struct JobStore::Db {
  sqlite3* handle = nullptr;
  ~Db() { close(); }
  void close() {
    sqlite3_close(handle);
    handle = nullptr;
  }
};

namespace {

// FULL: every COMMIT reaches the disk before the writes it holds are acknowledged, so an
// acknowledged registration survives a power cut as well as a kill -9 (NORMAL would survive only
// the kill). The group commit pays one fsync per batch of writes, not one per write
// (docs/benchmarks.md#job-store).
const char* synchronous(StoreSync sync) {
  return sync == StoreSync::full ? "PRAGMA synchronous = FULL;" : "PRAGMA synchronous = NORMAL;";
}

// Opens `file` and makes the schema; the SQLite result code, `why` set on failure.
int open_database(const fs::path& file, sqlite3*& handle, std::string& why, StoreSync sync = StoreSync::full) {
  int rc = sqlite3_open_v2(file.c_str(), &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    why = handle != nullptr ? sqlite3_errmsg(handle) : sqlite3_errstr(rc);
    return sqlite3_extended_errcode(handle);
  }
  sqlite3_extended_result_codes(handle, 1);
  sqlite3_busy_timeout(handle, 10000);  // at start only: another process may hold a lock for a while
  for (const char* sql : {kStoreSchema, synchronous(sync)}) {
    char* message = nullptr;
    rc = sqlite3_exec(handle, sql, nullptr, nullptr, &message);
    if (rc != SQLITE_OK) {
      why = message ? message : sqlite3_errstr(rc);
      sqlite3_free(message);
      return rc;
    }
  }
  return SQLITE_OK;
}

// "" when SQLite finds the file sound (its tables, and their indexes agreeing with them), else
// what it found first.
std::string integrity_check(sqlite3* handle) {
  try {
    Statement s(handle, "PRAGMA integrity_check(1)");
    std::string verdict = s.step() ? s.text(0) : "no verdict";
    return verdict == "ok" ? "" : verdict;
  } catch (const StoreError& e) {
    return e.what();
  }
}

fs::path with_suffix(const fs::path& file, const std::string& suffix) {
  auto out = file;
  out += suffix;
  return out;
}

// Renames `file` (and its -wal and -shm) to <file>.unreadable-<seconds>[-N]; returns the new name.
fs::path move_aside(const fs::path& file) {
  auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  fs::path aside = with_suffix(file, fmt::format(".unreadable-{}", seconds));
  std::error_code ec;
  for (int n = 2; fs::exists(fs::symlink_status(aside, ec)); ++n)
    aside = with_suffix(file, fmt::format(".unreadable-{}-{}", seconds, n));
  fs::rename(file, aside, ec);
  if (ec)
    throw Error(
        fmt::format("the job store {} cannot be used and cannot be moved aside: {}", file.string(), ec.message()),
        ErrorKind::cannot_write);
  for (const char* side : {"-wal", "-shm"}) fs::rename(with_suffix(file, side), with_suffix(aside, side), ec);
  return aside;
}

void remove_with_sides(const fs::path& file) {
  std::error_code ignored;
  for (const char* side : {"", "-wal", "-shm"}) fs::remove(with_suffix(file, side), ignored);
}

}  // namespace

JobInfo job_info_from_stored(const std::string& text) {
  json body = json::parse(text);
  std::string id = body.at("job_id").get<std::string>();
  body["job_id"] = "";
  JobInfo info = job_info_from_json(body);
  info.job_id = id;
  return info;
}

JobStore::JobStore(const fs::path& file, StoreSync sync) : db_(std::make_unique<Db>()), file_(file), sync_(sync) {
  open_checked();
}

JobStore::~JobStore() = default;

void JobStore::open_checked() {
  std::error_code ec;
  if (file_.has_parent_path()) fs::create_directories(file_.parent_path(), ec);
  if (ec)
    throw Error(fmt::format("cannot create the folder of the job store {}: {}", file_.string(), ec.message()),
                ErrorKind::cannot_write);
  // A salvage that was interrupted between its two renames.
  fs::path salvaged = with_suffix(file_, ".salvaged");
  if (!fs::exists(fs::symlink_status(file_, ec)) && fs::is_regular_file(salvaged, ec)) fs::rename(salvaged, file_, ec);
  if (auto status = fs::symlink_status(file_, ec); fs::exists(status) && !fs::is_regular_file(status)) {
    set_aside_ = move_aside(file_);
    spdlog::error("the job store {} is not a file: moved it to {} and started a new store; no job is resumed",
                  file_.string(), set_aside_.string());
  }
  // A store is never empty once made (its schema is written at once): this one lost its contents.
  const bool existed = fs::is_regular_file(file_, ec);
  const bool emptied = existed && fs::file_size(file_, ec) == 0;
  std::string why;
  int rc = open_database(file_, db_->handle, why, sync_);
  // Unreadable as a store: damaged pages, a header that is not SQLite's, or one whose format numbers
  // no SQLite writes ("unsupported file format": a plain error from reading an existing file's schema,
  // which runs on any sound file). Anything else (no space, no permission, a lock) is the machine's.
  const bool unreadable = (rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB ||
                          ((rc & 0xff) == SQLITE_ERROR && existed && !emptied);
  if (rc == SQLITE_OK) why = emptied ? "it is empty" : integrity_check(db_->handle);
  else if (!unreadable)
    throw Error(fmt::format("cannot use the job store {}: {}", file_.string(), why), ErrorKind::cannot_write);
  if (!why.empty()) recover_because(why);
  set_busy_timeout(busy_timeout_);
}

void JobStore::recover() { recover_because("a write found it damaged"); }

void JobStore::recover_because(const std::string& why) {
  db_->close();
  fs::path salvaged = with_suffix(file_, ".salvaged");
  remove_with_sides(salvaged);
  sqlite3* fresh = nullptr;
  std::string problem;
  if (open_database(salvaged, fresh, problem) != SQLITE_OK) {
    sqlite3_close(fresh);
    throw Error(fmt::format("cannot make a new job store {}: {}", salvaged.string(), problem), ErrorKind::cannot_write);
  }
  SalvageReport report = salvage_store(file_, fresh);
  sqlite3_close(fresh);
  fs::path aside = set_aside_ = move_aside(file_);
  std::error_code ec;
  fs::rename(salvaged, file_, ec);
  if (ec)
    throw Error(fmt::format("cannot put the new job store in place of {}: {}", file_.string(), ec.message()),
                ErrorKind::cannot_write);
  spdlog::error("the job store {} is damaged ({}): moved it to {} and started a new store with what could be read: {}",
                file_.string(), safe_text(why, 300), aside.string(), describe(report));
  int rc = open_database(file_, db_->handle, problem, sync_);
  if (rc != SQLITE_OK)
    throw Error(fmt::format("cannot use the job store {}: {}", file_.string(), problem), ErrorKind::cannot_write);
  set_busy_timeout(busy_timeout_);
}

void JobStore::set_busy_timeout(std::chrono::milliseconds timeout) {
  busy_timeout_ = timeout;
  sqlite3_busy_timeout(db_->handle, static_cast<int>(timeout.count()));
}

void JobStore::exec(const char* sql) {
  char* message = nullptr;
  int rc = sqlite3_exec(db_->handle, sql, nullptr, nullptr, &message);
  if (rc == SQLITE_OK) return;
  std::string why = message ? message : sqlite3_errstr(rc);
  sqlite3_free(message);
  throw StoreError(fmt::format("job store: {}", why), sqlite3_extended_errcode(db_->handle));
}

void JobStore::begin() { exec("BEGIN IMMEDIATE"); }
void JobStore::commit() { exec("COMMIT"); }
void JobStore::rollback() noexcept {
  if (sqlite3_get_autocommit(db_->handle) == 0) sqlite3_exec(db_->handle, "ROLLBACK", nullptr, nullptr, nullptr);
}
void JobStore::savepoint() { exec("SAVEPOINT one_write"); }
void JobStore::release_savepoint() { exec("RELEASE one_write"); }
void JobStore::rollback_to_savepoint() noexcept {
  sqlite3_exec(db_->handle, "ROLLBACK TO one_write; RELEASE one_write", nullptr, nullptr, nullptr);
}

void JobStore::add_job(const JobInfo& info) {
  Statement(db_->handle, "INSERT OR REPLACE INTO jobs (job_id, info) VALUES (?, ?)")
      .bind(1, info.job_id)
      .bind(2, to_json(info).dump())
      .step();
}

void JobStore::add_rank(const std::string& job_id, const RankInfo& rank) {
  Statement(db_->handle, "INSERT OR REPLACE INTO ranks (job_id, rank, info) VALUES (?, ?, ?)")
      .bind(1, job_id)
      .bind(2, rank.rank)
      .bind(3, to_json(rank).dump())
      .step();
}

void JobStore::add_round(const std::string& job_id, int round, const json& record) {
  Statement s(db_->handle, "INSERT OR REPLACE INTO rounds (job_id, round, results) VALUES (?, ?, ?)");
  s.bind(1, job_id).bind(2, round);
  if (record.is_null()) s.bind_null(3);
  else s.bind(3, record.dump(-1, ' ', false, json::error_handler_t::replace));
  s.step();
}

void JobStore::end_job(const std::string& job_id, const std::string& detail) {
  Statement(db_->handle, "UPDATE jobs SET ended = 1, end_detail = ? WHERE job_id = ?")
      .bind(1, detail)
      .bind(2, job_id)
      .step();
}

void JobStore::forget_job(const std::string& job_id) {
  Statement(db_->handle, "DELETE FROM jobs WHERE job_id = ?").bind(1, job_id).step();
}

std::vector<StoredJob> JobStore::load() {
  try {
    return load_once();
  } catch (const StoreError& e) {
    if (!e.damaged()) throw;
    recover_because(e.what());
    return load_once();
  }
}

std::vector<StoredJob> JobStore::load_once() {
  std::map<std::string, StoredJob> jobs;
  std::vector<std::string> unreadable;
  {
    Statement s(db_->handle, "SELECT job_id, info, ended, end_detail FROM jobs");
    while (s.step()) {
      std::string id = s.text(0);
      try {
        StoredJob job;
        job.info = job_info_from_stored(s.text(1));
        if (job.info.job_id != id) throw std::runtime_error(fmt::format("it names job '{}'", job.info.job_id));
        job.ended = s.integer(2) != 0;
        job.end_detail = s.text(3);
        jobs.emplace(id, std::move(job));
      } catch (const StoreError&) {
        throw;
      } catch (const std::exception& e) {
        spdlog::warn("job store {}: dropped job {}: its stored registration cannot be read ({})", file_.string(),
                     safe_text(id, 300), e.what());
        unreadable.push_back(id);
      }
    }
  }
  {
    Statement s(db_->handle, "SELECT job_id, rank, info FROM ranks ORDER BY job_id, rank");
    while (s.step()) {
      auto it = jobs.find(s.text(0));
      if (it == jobs.end()) continue;
      try {
        RankInfo rank = rank_info_from_json(json::parse(s.text(2)));
        if (rank.rank != s.integer(1)) throw std::runtime_error(fmt::format("it names rank {}", rank.rank));
        it->second.ranks.push_back(std::move(rank));
      } catch (const std::exception& e) {
        spdlog::warn(
            "job store {}: job {}: rank {}'s stored registration cannot be read ({}); the job waits for it "
            "to register again",
            file_.string(), it->first, s.integer(1), e.what());
      }
    }
  }
  std::map<std::string, int> cut;  // job -> the first round not resumed
  {
    Statement s(db_->handle, "SELECT job_id, round, results FROM rounds ORDER BY job_id, round");
    while (s.step()) {
      auto it = jobs.find(s.text(0));
      if (it == jobs.end() || cut.count(it->first) != 0) continue;
      StoredJob& job = it->second;
      std::string why;
      json record;
      if (s.integer(1) != job.rounds) {
        why = "is missing";
      } else if (!s.is_null(2)) {
        try {
          record = json::parse(s.text(2));
        } catch (const std::exception& e) {
          why = fmt::format("cannot be read ({})", e.what());
        }
      }
      if (!why.empty()) {
        spdlog::warn(
            "job store {}: job {}: round {} {}; the job resumes after round {} (later stored rounds are "
            "dropped)",
            file_.string(), it->first, job.rounds, why, job.rounds - 1);
        cut[it->first] = job.rounds;
        continue;
      }
      ++job.rounds;
      job.records.push_back(std::move(record));
    }
  }
  // Deleted now, so that a later start does not take the dropped rows for the rounds after the cut.
  try {
    for (const auto& id : unreadable) forget_job(id);
    for (const auto& [id, round] : cut)
      Statement(db_->handle, "DELETE FROM rounds WHERE job_id = ? AND round >= ?").bind(1, id).bind(2, round).step();
  } catch (const std::exception& e) {
    spdlog::warn("job store {}: could not delete the rows it dropped: {}", file_.string(), e.what());
  }
  std::vector<StoredJob> out;
  for (auto& [id, job] : jobs) out.push_back(std::move(job));
  return out;
}

}  // namespace perseus::server
