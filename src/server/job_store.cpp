#include "perseus/server/job_store.hpp"

#include <sqlite3.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <map>

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

}  // namespace

JobStore::JobStore(const std::filesystem::path& file) : db_(std::make_unique<Db>()), file_(file) {
  std::error_code ignored;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ignored);
  if (sqlite3_open(file.c_str(), &db_->handle) != SQLITE_OK)
    throw Error(fmt::format("cannot open the job store {}: {}", file.string(), sqlite3_errmsg(db_->handle)));
  sqlite3_busy_timeout(db_->handle, 5000);
  char* message = nullptr;
  if (sqlite3_exec(db_->handle, kSchema, nullptr, nullptr, &message) != SQLITE_OK) {
    std::string why = message ? message : "unknown error";
    sqlite3_free(message);
    throw Error(fmt::format("cannot use the job store {}: {}", file.string(), why));
  }
}

JobStore::~JobStore() = default;

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

void JobStore::add_round(const std::string& job_id, int round, const std::vector<ProfilingResult>* results) {
  Statement s(db_->handle, "INSERT OR REPLACE INTO rounds (job_id, round, results) VALUES (?, ?, ?)");
  s.bind(1, job_id).bind(2, round);
  if (results) {
    json all = json::array();
    for (const auto& r : *results) all.push_back(to_json(r));
    s.bind(3, all.dump());
  } else {
    s.bind_null(3);
  }
  s.step();
}

void JobStore::end_job(const std::string& job_id, const std::string& detail) {
  Statement(db_->handle, "UPDATE jobs SET ended = 1, end_detail = ? WHERE job_id = ?").bind(1, detail).bind(2, job_id).step();
}

void JobStore::forget_job(const std::string& job_id) {
  Statement(db_->handle, "DELETE FROM jobs WHERE job_id = ?").bind(1, job_id).step();
}

std::vector<StoredJob> JobStore::load() {
  std::map<std::string, StoredJob> jobs;
  {
    Statement s(db_->handle, "SELECT job_id, info, ended, end_detail FROM jobs");
    while (s.step()) {
      StoredJob& job = jobs[s.text(0)];
      job.info = job_info_from_stored(s.text(1));
      job.ended = s.integer(2) != 0;
      job.end_detail = s.text(3);
    }
  }
  {
    Statement s(db_->handle, "SELECT job_id, info FROM ranks ORDER BY job_id, rank");
    while (s.step()) {
      auto it = jobs.find(s.text(0));
      if (it == jobs.end()) continue;
      it->second.ranks.push_back(rank_info_from_json(json::parse(s.text(1))));
    }
  }
  {
    Statement s(db_->handle, "SELECT job_id, round, results FROM rounds ORDER BY job_id, round");
    while (s.step()) {
      auto it = jobs.find(s.text(0));
      if (it == jobs.end()) continue;
      StoredJob& job = it->second;
      if (s.integer(1) != job.rounds)
        throw Error(fmt::format("job store {}: job {} is missing round {}", file_.string(), s.text(0), job.rounds));
      ++job.rounds;
      if (s.is_null(2)) {
        job.results.emplace_back();
        continue;
      }
      std::vector<ProfilingResult> results;
      for (const auto& r : json::parse(s.text(2))) results.push_back(profiling_result_from_text(r.dump()));
      job.results.emplace_back(std::move(results));
    }
  }
  std::vector<StoredJob> out;
  for (auto& [id, job] : jobs) out.push_back(std::move(job));
  return out;
}

}  // namespace perseus::server
