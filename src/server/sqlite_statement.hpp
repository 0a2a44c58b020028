#pragma once
// One prepared SQLite statement: bound, stepped, finalized; failures throw StoreError with
// SQLite's result code (the job store and its salvage share it).
#include <sqlite3.h>

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "perseus/server/job_store.hpp"

namespace perseus::server {

// The error of the last call on `db` (extended code, so that SQLITE_IOERR_* and the like stay apart).
inline StoreError store_error(sqlite3* db, int rc, const std::string& what = "") {
  const char* message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return StoreError(
      what.empty() ? fmt::format("job store: {}", message) : fmt::format("job store: {}: {}", what, message), rc);
}

class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    int rc = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
    if (rc != SQLITE_OK) throw store_error(db, sqlite3_extended_errcode(db));
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, const std::string& text) {
    sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, int value) {
    sqlite3_bind_int(stmt_, i, value);
    return *this;
  }
  Statement& bind64(int i, std::int64_t value) {
    sqlite3_bind_int64(stmt_, i, value);
    return *this;
  }
  Statement& bind_null(int i) {
    sqlite3_bind_null(stmt_, i);
    return *this;
  }
  Statement& bind_value(int i, const sqlite3_value* value) {
    sqlite3_bind_value(stmt_, i, value);
    return *this;
  }
  // true while there is a row.
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw store_error(db_, sqlite3_extended_errcode(db_));
  }
  void reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  std::string text(int column) const {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
    return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, column))) : std::string();
  }
  bool is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
  int integer(int column) const { return sqlite3_column_int(stmt_, column); }
  std::int64_t integer64(int column) const { return sqlite3_column_int64(stmt_, column); }
  sqlite3_value* value(int column) const { return sqlite3_column_value(stmt_, column); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace perseus::server
