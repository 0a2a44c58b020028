#include "perseus/server/job_store.hpp"

#include <sqlite3.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <stdexcept>

#include "perseus/util/error.hpp"

namespace perseus::server {

using nlohmann::json;

struct JobStore::Db {
  sqlite3* handle = nullptr;
  ~Db() { sqlite3_close(handle); }
};

namespace {

constexpr const char* kSchema = R"(
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
PRAGMA foreign_keys = ON;
CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, info TEXT NOT NULL, ended INTEGER NOT NULL DEFAULT 0,
                                 end_detail TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS ranks (job_id TEXT NOT NULL REFERENCES jobs ON DELETE CASCADE, rank INTEGER NOT NULL,
                                  info TEXT NOT NULL, PRIMARY KEY (job_id, rank));
CREATE TABLE IF NOT EXISTS rounds (job_id TEXT NOT NULL REFERENCES jobs ON DELETE CASCADE, round INTEGER NOT NULL,
                                   results TEXT, PRIMARY KEY (job_id, round));
)";

// One prepared statement, bound, stepped to completion, finalized.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK)
      throw Error(fmt::format("job store: {}", sqlite3_errmsg(db)));
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement& bind(int i, const std::string& text) {
    sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, int value) {
    sqlite3_bind_int(stmt_, i, value);
    return *this;
  }
  Statement& bind_null(int i) {
    sqlite3_bind_null(stmt_, i);
    return *this;
  }
  // true while there is a row.
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw Error(fmt::format("job store: {}", sqlite3_errmsg(db_)));
  }
  std::string text(int column) const {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
    return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, column))) : std::string();
  }
  bool is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
  int integer(int column) const { return sqlite3_column_int(stmt_, column); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

JobInfo job_info_from_stored(const std::string& text) {
  json body = json::parse(text);
  std::string id = body.at("job_id").get<std::string>();
  body["job_id"] = "";
  JobInfo info = job_info_from_json(body);
  info.job_id = id;
  return info;
}

// Opens `file` and makes the schema; the SQLite result code, `why` set on failure.
int open_database(const std::filesystem::path& file, sqlite3*& handle, std::string& why) {
  if (sqlite3_open(file.c_str(), &handle) != SQLITE_OK) {
    why = sqlite3_errmsg(handle);
    return sqlite3_errcode(handle);
  }
  sqlite3_busy_timeout(handle, 10000);  // at start only: another process may hold a lock for a while
  char* message = nullptr;
  int rc = sqlite3_exec(handle, kSchema, nullptr, nullptr, &message);
  if (rc != SQLITE_OK) {
    why = message ? message : sqlite3_errstr(rc);
    sqlite3_free(message);
  }
  return rc;
}

}  // namespace

JobStore::JobStore(const std::filesystem::path& file) : db_(std::make_unique<Db>()), file_(file) {
  std::error_code ignored;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ignored);
  std::string why;
  int rc = open_database(file, db_->handle, why);
  if ((rc & 0xff) == SQLITE_NOTADB || (rc & 0xff) == SQLITE_CORRUPT) {
    // Refusing to start would keep every job away until someone deletes the file by hand.
    auto aside = file;
    aside += fmt::format(
        ".unreadable-{}",
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
    spdlog::error(
        "the job store {} cannot be read ({}): moved it to {} and started a new one; jobs it held are not "
        "resumed",
        file.string(), why, aside.string());
    sqlite3_close(db_->handle);
    db_->handle = nullptr;
    std::filesystem::rename(file, aside, ignored);
    for (const char* suffix : {"-wal", "-shm"}) {
      auto side = file;
      side += suffix;
      auto side_aside = aside;
      side_aside += suffix;
      std::filesystem::rename(side, side_aside, ignored);
    }
    rc = open_database(file, db_->handle, why);
  }
  if (rc != SQLITE_OK) throw Error(fmt::format("cannot use the job store {}: {}", file.string(), why));
  set_busy_timeout(std::chrono::milliseconds(1000));
}

JobStore::~JobStore() = default;

void JobStore::set_busy_timeout(std::chrono::milliseconds timeout) {
  sqlite3_busy_timeout(db_->handle, static_cast<int>(timeout.count()));
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
      } catch (const std::exception& e) {
        spdlog::warn("job store {}: dropped job {}: its stored registration cannot be read ({})", file_.string(), id,
                     e.what());
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
