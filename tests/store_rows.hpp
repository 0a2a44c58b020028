#pragma once
// What a plain SQLite reader gets back from a (damaged) job store, row by row: the oracle a
// recovery is held to (every registration it can read must be kept).
#include <sqlite3.h>

#include <filesystem>
#include <map>
#include <string>

namespace perseus::testing {

// The registrations of `db`'s jobs table read one rowid at a time (a row that cannot be read is
// skipped): job id -> the stored registration. Reads a copy made in `scratch` (removed after).
inline std::map<std::string, std::string> readable_jobs(const std::filesystem::path& db,
                                                        const std::filesystem::path& scratch) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> out;
  fs::remove_all(scratch);
  fs::create_directories(scratch);
  if (fs::is_regular_file(db)) {
    fs::copy_file(db, scratch / "copy.db");
    sqlite3* handle = nullptr;
    if (sqlite3_open(fs::path(scratch / "copy.db").c_str(), &handle) == SQLITE_OK) {
      for (sqlite3_int64 rowid = 1; rowid <= 256; ++rowid) {
        sqlite3_stmt* row = nullptr;
        if (sqlite3_prepare_v2(handle, "SELECT job_id, info FROM jobs WHERE rowid = ?", -1, &row, nullptr) ==
            SQLITE_OK) {
          sqlite3_bind_int64(row, 1, rowid);
          if (sqlite3_step(row) == SQLITE_ROW && sqlite3_column_text(row, 0) != nullptr &&
              sqlite3_column_text(row, 1) != nullptr)
            out[reinterpret_cast<const char*>(sqlite3_column_text(row, 0))] =
                reinterpret_cast<const char*>(sqlite3_column_text(row, 1));
        }
        sqlite3_finalize(row);
      }
    }
    sqlite3_close(handle);
  }
  fs::remove_all(scratch);
  return out;
}

}  // namespace perseus::testing
