#include "store_salvage.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <vector>

#include "perseus/util/safe_text.hpp"

namespace perseus::server {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kPageSize = 4096;  // kStoreSchema sets it
// Seeks spent stepping over damaged regions of one table, at most (each is one B-tree descent).
constexpr int kMaxProbes = 20000;

enum class Step { row, done, error };

struct Prepared {
  Prepared(sqlite3* db, const std::string& sql) {
    ok = sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK;
  }
  ~Prepared() { sqlite3_finalize(stmt); }
  Prepared(const Prepared&) = delete;
  Prepared& operator=(const Prepared&) = delete;
  Step read(std::int64_t key) {
    sqlite3_reset(stmt);
    sqlite3_bind_int64(stmt, 1, key);
    int rc = sqlite3_step(stmt);
    return rc == SQLITE_ROW ? Step::row : rc == SQLITE_DONE ? Step::done : Step::error;
  }
  sqlite3_stmt* stmt = nullptr;
  bool ok = false;
};

// Calls `on_row` once for every row of `table` that can be read, in rowid order and then from the
// end backwards (column 0 is the rowid, then `columns`); returns the regions it had to step over, or -1 when nothing
// can be read.
// `essentials`, where given, stand for `columns` in a lookup by key that cannot read all of them (a
// damaged value or record header past the ones a reader needs, which a plain reader of those gets back).
int walk_table(sqlite3* db, const std::string& table, const std::string& columns,
               const std::function<void(sqlite3_stmt*)>& on_row, const std::string& essentials = "") {
  // `rowid >= after + 1`, not `rowid > after`: past a damaged page, the seek for the first key of the
  // next page works where the seek for the key before it (on the damaged page) does not.
  Prepared next(db, fmt::format("SELECT rowid, {} FROM {} WHERE rowid >= ?1 ORDER BY rowid LIMIT 1", columns, table));
  Prepared probe(db, fmt::format("SELECT rowid FROM {} WHERE rowid >= ?1 ORDER BY rowid LIMIT 1", table));
  Prepared exact(db, fmt::format("SELECT rowid, {} FROM {} WHERE rowid = ?1", columns, table));
  Prepared essential(
      db, fmt::format("SELECT rowid, {} FROM {} WHERE rowid = ?1", essentials.empty() ? columns : essentials, table));
  if (!next.ok || !probe.ok || !exact.ok || !essential.ok) return -1;
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t after = std::numeric_limits<std::int64_t>::min();
  int regions = 0, probes = 0, rows = 0;
  std::set<std::int64_t> read;  // rowids passed to on_row
  // The keys in [from, to) not read yet, each looked up on its own (rowids are dense here: every table
  // is appended to): all of them in a short gap, its ends in a long one.
  auto look_up_between = [&](std::int64_t from, std::int64_t to) {
    constexpr std::int64_t kLookUps = 2048;
    auto look_up = [&](std::int64_t key) {
      if (read.count(key) != 0 || ++probes >= kMaxProbes) return;
      Step step = exact.read(key);
      if (step == Step::row) return read.insert(key), on_row(exact.stmt), void(++rows);
      if (step == Step::error && !essentials.empty() && ++probes < kMaxProbes && essential.read(key) == Step::row)
        read.insert(key), on_row(essential.stmt), ++rows;
    };
    if (to <= from || to - from <= 2 * kLookUps) {
      for (std::int64_t key = from; key < to && probes < kMaxProbes; ++key) look_up(key);
    } else {
      for (std::int64_t key = from; key < from + kLookUps && probes < kMaxProbes; ++key) look_up(key);
      for (std::int64_t key = to - kLookUps; key < to && probes < kMaxProbes; ++key) look_up(key);
    }
  };
  for (;;) {
    if (after == kMax) break;
    Step step = next.read(after + 1);
    if (step == Step::row) {
      std::int64_t rowid = sqlite3_column_int64(next.stmt, 0);
      if (rowid <= after) break;  // a damaged page that still parses: no order to follow
      on_row(next.stmt);
      read.insert(rowid);
      ++rows;
      after = rowid;
      continue;
    }
    if (step == Step::done) break;
    ++regions;
    // The row right after may be readable by its key alone (its payload is what is damaged): skip it.
    Step first = probe.read(after + 1);
    if (first == Step::done) break;
    if (first == Step::row) {
      // A damaged page that still parses can answer a seek with a key before it: walking back from
      // there went round the same rows for ever (the walk from the end and the lookups below read
      // what lies past it).
      const std::int64_t skipped = sqlite3_column_int64(probe.stmt, 0);
      if (skipped <= after) break;
      after = skipped;
      continue;
    }
    // A damaged page: find the smallest key past it whose seek works, doubling, then halving.
    const std::int64_t start = after;
    std::int64_t bad = after + 1, good = 0;
    bool found = false;
    for (std::int64_t jump = 1; ++probes<kMaxProbes; jump = jump> kMax / 2 ? kMax : 2 * jump) {
      std::int64_t key = bad > kMax - jump ? kMax : bad + jump;
      if (probe.read(key) != Step::error) {
        good = key, found = true;
        break;
      }
      bad = key;
      if (key == kMax) break;
    }
    if (!found) break;
    while (good - bad > 1 && ++probes < kMaxProbes) {
      std::int64_t middle = bad + (good - bad) / 2;
      if (probe.read(middle) != Step::error) good = middle;
      else bad = middle;
    }
    // A seek that passes a damaged cell fails, where a lookup of a key in an intact cell of the same
    // page (or of the next) does not.
    look_up_between(std::max<std::int64_t>(start, 0) + 1, good);  // rowids start at 1
    after = good - 1;
  }
  // A damaged page can hold a cell that still parses but with a wrong rowid, larger than those of
  // the rows after it: the walk above jumped past them. Walking back from the end until the first
  // row it cannot follow (an error, a rowid out of order) reads them; rows already read are stepped
  // over, not stopped at, since the wrong rowid itself was read first and the rows it hid lie below it.
  Prepared previous(
      db, fmt::format("SELECT rowid, {} FROM {} WHERE rowid < ?1 ORDER BY rowid DESC LIMIT 1", columns, table));
  for (std::int64_t before = kMax; previous.ok && previous.read(before) == Step::row;) {
    std::int64_t rowid = sqlite3_column_int64(previous.stmt, 0);
    if (rowid >= before) break;
    if (read.insert(rowid).second) on_row(previous.stmt), ++rows;
    before = rowid;
  }
  // A cell whose rowid is out of order also misleads the seeks around it (each a binary search over
  // cells taken to be sorted): rows that a lookup by key finds can lie in no walk's way. The gaps
  // between the rowids read, and the keys just past the last, are looked up key by key.
  const std::vector<std::int64_t> keys(read.begin(), read.end());
  std::int64_t below = 0;
  for (std::int64_t key : keys) {
    if (key > below + 1) look_up_between(below + 1, key);
    below = std::max(below, key);
  }
  constexpr std::int64_t kPast = 256;
  if (below < kMax - kPast) look_up_between(below + 1, below + 1 + kPast);
  return rows == 0 && regions > 0 && after == std::numeric_limits<std::int64_t>::min() ? -1 : regions;
}

// Job ids an index holds, read from both ends (a damaged page stops a scan, not the other one).
int ids_from_index(sqlite3* db, const std::string& table, const std::string& index, std::set<std::string>& ids) {
  int regions = 0;
  for (const char* order : {"ASC", "DESC"}) {
    Prepared scan(db, fmt::format("SELECT job_id FROM {} INDEXED BY {} ORDER BY job_id {}", table, index, order));
    if (!scan.ok) return -1;
    int rc = 0;
    while ((rc = sqlite3_step(scan.stmt)) == SQLITE_ROW) {
      auto* text = reinterpret_cast<const char*>(sqlite3_column_text(scan.stmt, 0));
      if (text != nullptr) ids.insert(text);
    }
    if (rc == SQLITE_DONE) return regions;
    ++regions;
  }
  return regions;
}

bool schema_readable(sqlite3* db) {
  Prepared s(db, "SELECT count(*) FROM sqlite_master");
  return s.ok && sqlite3_step(s.stmt) == SQLITE_ROW;
}

// A copy of `damaged` whose first page (header and schema) is that of a new store, sized to the
// file: the tables' root pages are where kStoreSchema puts them in every store it created.
bool rebuild_first_page(const fs::path& damaged, const fs::path& copy) {
  std::error_code ec;
  fs::copy_file(damaged, copy, fs::copy_options::overwrite_existing, ec);
  auto size = fs::file_size(copy, ec);
  if (ec || size < kPageSize) return false;
  sqlite3* memory = nullptr;
  if (sqlite3_open(":memory:", &memory) != SQLITE_OK) return sqlite3_close(memory), false;
  bool made = sqlite3_exec(memory, kStoreSchema, nullptr, nullptr, nullptr) == SQLITE_OK;
  sqlite3_int64 bytes = 0;
  unsigned char* image = made ? sqlite3_serialize(memory, "main", &bytes, 0) : nullptr;
  sqlite3_close(memory);
  if (image == nullptr || bytes < static_cast<sqlite3_int64>(kPageSize)) return sqlite3_free(image), false;
  std::string page(reinterpret_cast<const char*>(image), kPageSize);
  sqlite3_free(image);
  auto pages = static_cast<std::uint32_t>(size / kPageSize);
  for (int i = 0; i < 4; ++i) page[28 + i] = static_cast<char>((pages >> (8 * (3 - i))) & 0xff);  // big-endian
  std::fstream out(copy, std::ios::in | std::ios::out | std::ios::binary);
  out.write(page.data(), static_cast<std::streamsize>(page.size()));
  return static_cast<bool>(out);
}

bool looks_like_id(const std::string& id) {
  return !id.empty() && id.size() <= kMaxJobIdBytes && safe_text(id, 2 * kMaxJobIdBytes) == id;
}

void copy_rows(sqlite3* from, sqlite3* fresh, SalvageReport& report, std::set<std::string>& seen) {
  std::set<std::string> kept;
  auto note_region = [&](const std::string& what, int regions) {
    if (regions != 0) report.damaged_regions[what] += regions < 0 ? 1 : regions;
  };
  {
    Prepared insert(fresh, "INSERT OR IGNORE INTO jobs (job_id, info, ended, end_detail) VALUES (?, ?, ?, ?)");
    auto copy_job = [&](sqlite3_stmt* row) {
      auto* id_text = reinterpret_cast<const char*>(sqlite3_column_text(row, 1));
      auto* info_text = reinterpret_cast<const char*>(sqlite3_column_text(row, 2));
      std::string id = id_text ? id_text : "";
      if (looks_like_id(id)) seen.insert(id);
      try {
        if (info_text == nullptr || job_info_from_stored(info_text).job_id != id) return;
      } catch (const std::exception&) {
        return;  // load() would drop it: lost
      }
      sqlite3_reset(insert.stmt);
      for (int c = 1; c <= 4; ++c) sqlite3_bind_value(insert.stmt, c, sqlite3_column_value(row, c));
      if (sqlite3_step(insert.stmt) == SQLITE_DONE) kept.insert(id), ++report.rows["jobs"];
    };
    // A registration whose end cannot be read is resumed as running (a reader of its id and info gets it).
    note_region("jobs", walk_table(from, "jobs", "job_id, info, ended, end_detail", copy_job, "job_id, info, 0, ''"));
  }
  for (const char* table : {"ranks", "rounds"}) {
    std::string key = std::string(table) == "ranks" ? "rank" : "round";
    std::string value = std::string(table) == "ranks" ? "info" : "results";
    Prepared insert(fresh,
                    fmt::format("INSERT OR IGNORE INTO {} (job_id, {}, {}) VALUES (?, ?, ?)", table, key, value));
    note_region(table, walk_table(from, table, fmt::format("job_id, {}, {}", key, value), [&](sqlite3_stmt* row) {
                  auto* id_text = reinterpret_cast<const char*>(sqlite3_column_text(row, 1));
                  std::string id = id_text ? id_text : "";
                  if (looks_like_id(id)) seen.insert(id);
                  if (kept.count(id) == 0) return;
                  sqlite3_reset(insert.stmt);
                  for (int c = 1; c <= 3; ++c) sqlite3_bind_value(insert.stmt, c, sqlite3_column_value(row, c));
                  if (sqlite3_step(insert.stmt) == SQLITE_DONE) ++report.rows[table];
                }));
  }
  for (const char* table : {"jobs", "ranks", "rounds"}) {
    std::set<std::string> ids;
    std::string index = fmt::format("sqlite_autoindex_{}_1", table);
    note_region(index, ids_from_index(from, table, index, ids));
    for (const auto& id : ids)
      if (looks_like_id(id)) seen.insert(id);
  }
  report.kept.assign(kept.begin(), kept.end());
}

}  // namespace

SalvageReport salvage_store(const fs::path& damaged, sqlite3* fresh) {
  SalvageReport report;
  fs::path copy = damaged;
  copy += ".first-page-rebuilt";
  sqlite3* from = nullptr;
  auto open = [&](const fs::path& file) {
    sqlite3_close(from);
    from = nullptr;
    return sqlite3_open_v2(file.c_str(), &from, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK && schema_readable(from);
  };
  bool readable = open(damaged);
  if (!readable) {
    readable = rebuild_first_page(damaged, copy) && open(copy);
    report.schema_rebuilt = readable;
  }
  std::set<std::string> seen;
  if (readable) {
    sqlite3_exec(fresh, "BEGIN", nullptr, nullptr, nullptr);
    copy_rows(from, fresh, report, seen);
    if (sqlite3_exec(fresh, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
      report.unreadable = fmt::format("the new store could not be written: {}", sqlite3_errmsg(fresh));
      report.kept.clear();
    }
  } else {
    report.unreadable = from != nullptr ? sqlite3_errmsg(from) : "it cannot be opened";
  }
  sqlite3_close(from);
  std::error_code ignored;
  for (const char* side : {"", "-wal", "-shm", "-journal"}) {
    fs::path p = copy;
    p += side;
    fs::remove(p, ignored);
  }
  for (const auto& id : report.kept) seen.erase(id);
  report.lost.assign(seen.begin(), seen.end());
  return report;
}

std::string describe(const SalvageReport& report) {
  if (!report.unreadable.empty())
    return fmt::format("nothing could be read ({}); no job is resumed", report.unreadable);
  std::string out = fmt::format("{} jobs kept", report.kept.size());
  if (!report.lost.empty()) {
    std::string names;
    for (std::size_t i = 0; i < report.lost.size() && i < 20; ++i) names += (i ? ", " : "") + report.lost[i];
    if (report.lost.size() > 20) names += fmt::format(" and {} more", report.lost.size() - 20);
    out += fmt::format("; {} jobs lost (their registration cannot be read): {}", report.lost.size(), names);
  }
  for (const auto& [table, regions] : report.damaged_regions)
    out += fmt::format("; {} unreadable region(s) in {}", regions, table);
  if (report.schema_rebuilt) out += "; its first page (the schema) was rebuilt to read it";
  auto rows = [&](const char* table) {
    auto it = report.rows.find(table);
    return it == report.rows.end() ? 0 : it->second;
  };
  out += fmt::format(" ({} rank and {} round rows copied; a job whose rounds now have a gap resumes after it)",
                     rows("ranks"), rows("rounds"));
  return out;
}

}  // namespace perseus::server
