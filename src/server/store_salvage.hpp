#pragma once
// What can be read of a damaged job store, copied row by row into a new one. Each table is read
// by rowid, and a region that cannot be read (a damaged page) is stepped over to the next rowid
// that can, so one bad page costs the rows on it, not the table. A store whose first page (the
// schema) is damaged is read through a copy whose first page is rebuilt from the known schema.
// Job ids are collected from every table and its primary-key index, so a job whose registration
// is lost can still be named.
#include <sqlite3.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "perseus/server/wire.hpp"

namespace perseus::server {

// A job's registration as the store keeps it (its id and secret included); throws when it cannot be read.
JobInfo job_info_from_stored(const std::string& text);

struct SalvageReport {
  std::vector<std::string> kept;               // jobs whose registration was copied
  std::vector<std::string> lost;               // jobs seen anywhere whose registration could not be read
  std::map<std::string, int> damaged_regions;  // per table (or index): regions that could not be read
  std::map<std::string, int> rows;             // per table: rows copied
  bool schema_rebuilt = false;                 // its first page was unreadable and was rebuilt
  std::string unreadable;                      // not empty: nothing could be read, and why
};

// The schema every store is created with (and the first page of a damaged store is rebuilt from).
extern const char* const kStoreSchema;

// Copies what can be read of `damaged` into `fresh` (a new store with the schema, inside one
// transaction). Never throws for what it reads.
SalvageReport salvage_store(const std::filesystem::path& damaged, sqlite3* fresh);

// One line for the log: what was kept, lost and unreadable.
std::string describe(const SalvageReport& report);

}  // namespace perseus::server
