// The job store damaged while the server was down, against a real `perseus serve`: random bytes
// over a random page (the first, which holds the schema, included) or over one of the pages holding
// registrations, runs of random bytes at random
// offsets anywhere in the file, a truncation at a random length, an emptied file, a directory at
// its path, a registration's rowid out of order (a page that parses but misleads every seek). Every time the server
// starts, resumes every job a plain reader of the damaged file gets back row by row (never past the rounds it had),
// names every other one in a warning, keeps the damaged file aside, and stores what comes next (a job registered after
// the recovery survives a kill -9). Randomized; PERSEUS_FAULT_INSTANCES sets how many damaged stores (default 10, ~0.5
// s each).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "job_driver.hpp"
#include "process_fixture.hpp"
#include "store_rows.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

enum class Damage { page, registration_page, scattered, truncation, empty, directory, rowid_out_of_order };

// A registration's cell in the middle of a leaf page of the jobs table given a rowid larger than every
// other (its one-byte varint set to 127): the page still parses, but its cells are out of order, and
// every seek through that page is a binary search over them. Returns what it did ("" where no page
// holds three registrations).
std::string misorder_a_rowid(const fs::path& db) {
  constexpr std::size_t kPage = 4096;
  std::string bytes = read_file(db);
  auto u16 = [&](std::size_t at) {
    return static_cast<std::size_t>(static_cast<unsigned char>(bytes[at])) << 8 |
           static_cast<unsigned char>(bytes[at + 1]);
  };
  for (std::size_t p = 1; p < bytes.size() / kPage; ++p) {
    const std::size_t page = p * kPage;
    const std::size_t cells = u16(page + 3);
    if (bytes[page] != 0x0d || cells < 3 || bytes.substr(page, kPage).find("\"model_name\"") == std::string::npos)
      continue;
    const std::size_t cell = page + u16(page + 8 + 2 * (cells / 2));
    std::size_t at = cell;
    while (at < page + kPage && (static_cast<unsigned char>(bytes[at]) & 0x80) != 0) ++at;  // the payload's size
    ++at;
    if (at >= page + kPage || (static_cast<unsigned char>(bytes[at]) & 0x80) != 0) continue;  // a one-byte rowid
    const int was = bytes[at];
    bytes[at] = 0x7f;
    std::ofstream(db, std::ios::binary | std::ios::trunc) << bytes;
    return fmt::format("rowid {} of cell {} of {} on page {} set to 127", was, cells / 2, cells, p + 1);
  }
  return "";
}

// Damages `db` as `kind` says; returns what it did, for the failure message.
std::string damage(const fs::path& db, Damage kind, std::mt19937& random) {
  auto size = fs::file_size(db);
  switch (kind) {
    case Damage::page:
    case Damage::registration_page: {
      constexpr std::size_t kPage = 4096;
      std::size_t pages = std::max<std::size_t>(1, size / kPage);
      std::size_t page = std::uniform_int_distribution<std::size_t>(0, pages - 1)(random);
      if (kind == Damage::registration_page) {  // one of the pages holding registrations, so some others remain
        std::string bytes = read_file(db);
        std::vector<std::size_t> holding;
        for (std::size_t p = 0; p < pages; ++p)
          if (bytes.substr(p * kPage, kPage).find("\"model_name\"") != std::string::npos) holding.push_back(p);
        if (!holding.empty()) page = holding[std::uniform_int_distribution<std::size_t>(0, holding.size() - 1)(random)];
      }
      std::size_t length = std::uniform_int_distribution<std::size_t>(64, kPage)(random);
      std::size_t offset = page * kPage + std::uniform_int_distribution<std::size_t>(0, kPage - length)(random);
      std::string bytes(length, '\0');
      for (auto& b : bytes) b = static_cast<char>(random());
      std::fstream file(db, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(static_cast<std::streamoff>(offset));
      file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      return fmt::format("{} random bytes at offset {} (page {} of {})", length, offset, page + 1, pages);
    }
    case Damage::scattered: {
      int runs = std::uniform_int_distribution<int>(1, 8)(random);
      std::string what = fmt::format("{} runs of random bytes at offsets", runs);
      std::fstream file(db, std::ios::in | std::ios::out | std::ios::binary);
      for (int i = 0; i < runs; ++i) {
        std::size_t length = std::uniform_int_distribution<std::size_t>(1, 256)(random);
        std::size_t offset = std::uniform_int_distribution<std::size_t>(0, size - length)(random);
        std::string bytes(length, '\0');
        for (auto& b : bytes) b = static_cast<char>(random());
        file.seekp(static_cast<std::streamoff>(offset));
        file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        what += fmt::format(" {} (+{})", offset, length);
      }
      return what;
    }
    case Damage::truncation: {
      auto length = std::uniform_int_distribution<std::uintmax_t>(1, size - 1)(random);
      fs::resize_file(db, length);
      return fmt::format("truncated to {} of {} bytes", length, size);
    }
    case Damage::empty:
      fs::resize_file(db, 0);
      return "emptied";
    case Damage::rowid_out_of_order:
      return misorder_a_rowid(db);
    case Damage::directory:
      fs::remove(db);
      fs::create_directories(db / "something");
      return "a directory in its place";
  }
  return "";
}

// A warning or error line of the server's log names `id`.
bool warned(const std::string& log, const std::string& id) {
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);)
    if ((line.find("[warning]") != std::string::npos || line.find("[error]") != std::string::npos) &&
        line.find(id) != std::string::npos)
      return true;
  return false;
}

TEST(StoreDamage, ADamagedStoreIsRecoveredKeepingWhatCanBeReadAndNamingTheRest) {
  auto dir = test_dir();
  // A store of 24 jobs (their registrations over several pages) with 0 to 3 rounds each, stopped
  // cleanly (everything in the main file).
  std::vector<DrivenJob> jobs(24);
  {
    ServeProcess serve(dir / "pristine", "AllMaxFrequency", "{}");
    ASSERT_NE(serve.port, 0);
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      ASSERT_TRUE(jobs[j].start(serve.url(), fmt::format("model{}-{}", j, std::string(80, 'x'))));
      for (std::size_t r = 0; r < j % 4; ++r) ASSERT_TRUE(jobs[j].round());
    }
    serve.stop(SIGTERM);
  }
  const auto pristine = readable_jobs(dir / "pristine" / "dump" / ".perseus.db", dir / "oracle");
  ASSERT_EQ(pristine.size(), jobs.size());
  std::random_device seeds;
  const Damage kinds[] = {Damage::truncation, Damage::empty, Damage::directory, Damage::rowid_out_of_order};
  // Damage that lost a readable job once, every run: a registration's cell given a wrong rowid that misled
  // the seeks around it; a registration whose last columns could not be read, its id and info could; a
  // page whose seek answered with a key before it (the walk went round its rows for ever: no start).
  const std::pair<Damage, unsigned> found[] = {{Damage::registration_page, 1514610293u},
                                               {Damage::scattered, 3988622474u},
                                               {Damage::registration_page, 1210740309u}};
  constexpr int kFixed = 4 + 3;
  for (int instance = 0, count = fault_instances(kFixed + 4); instance < count; ++instance) {
    // PERSEUS_FAULT_SEED replays a failure: its seed, as the trace names it, for every instance.
    const char* replay = std::getenv("PERSEUS_FAULT_SEED");
    unsigned seed = replay != nullptr ? static_cast<unsigned>(std::strtoul(replay, nullptr, 10)) : seeds();
    const Damage random_kinds[] = {Damage::registration_page, Damage::scattered, Damage::page};
    Damage kind = instance < 4 ? kinds[instance] : random_kinds[instance % 3];
    if (instance >= 4 && instance < kFixed) std::tie(kind, seed) = found[instance - 4];
    std::mt19937 random(seed);
    fs::path here = dir / fmt::format("instance{}", instance);
    fs::create_directories(here / "dump");
    fs::copy(dir / "pristine" / "dump", here / "dump", fs::copy_options::recursive);
    fs::path db = here / "dump" / ".perseus.db";
    std::string what = damage(db, kind, random);
    ASSERT_FALSE(what.empty()) << "no page of the store holds three registrations";
    SCOPED_TRACE(fmt::format("instance {} (seed {}): {}", instance, seed, what));
    std::map<std::string, std::string> readable = readable_jobs(db, dir / "oracle");
    std::size_t must_keep = 0, kept = 0;
    auto serve = std::make_unique<ServeProcess>(here, "AllMaxFrequency", "{}");
    ASSERT_NE(serve->port, 0) << "the server did not start: " << serve->log();
    int port = serve->port;
    std::string log = serve->log();
    bool aside = false;
    for (const auto& e : fs::directory_iterator(here / "dump"))
      aside = aside || e.path().filename().string().starts_with(".perseus.db.unreadable-");
    if (aside) {
      EXPECT_NE(log.find(".perseus.db.unreadable-"), std::string::npos) << "the file aside is not named";
    }
    // Damage a plain reader trips over (not merely changed values) is never written over.
    if (kind == Damage::truncation || kind == Damage::directory || readable.size() < jobs.size()) {
      EXPECT_TRUE(aside) << "the damaged store was not kept aside: " << log;
    }
    for (auto& job : jobs) {
      job.url = serve->url();
      nlohmann::json s = job.status();
      bool intact = readable.contains(job.id) && readable[job.id] == pristine.at(job.id);
      must_keep += intact;
      kept += s.is_object();
      EXPECT_TRUE(!intact || s.is_object()) << job.id << "'s registration can be read, yet it was not kept: " << log;
      if (s.is_object()) {
        EXPECT_LE(s["round"].get<int>(), job.acked_rounds) << job.id << " resumed past its rounds";
        if (s["round"].get<int>() < job.acked_rounds) {
          EXPECT_TRUE(warned(log, job.id)) << job.id << " lost rounds, and no warning names it: " << log;
        }
      } else {
        EXPECT_TRUE(warned(log, job.id)) << job.id << " is gone and no warning names it: " << log;
      }
    }
    std::printf("instance %d: %s: %zu of %zu jobs kept (%zu readable row by row)\n", instance, what.c_str(), kept,
                jobs.size(), must_keep);
    // What comes next is stored: a job registered now survives a kill -9.
    DrivenJob fresh;
    ASSERT_TRUE(fresh.start(serve->url(), "fresh")) << serve->log();
    ASSERT_TRUE(fresh.round()) << serve->log();
    serve->stop(SIGKILL);
    serve = std::make_unique<ServeProcess>(here, "AllMaxFrequency", "{}", "", "", port);
    ASSERT_EQ(serve->port, port) << serve->log();
    nlohmann::json s = fresh.status();
    ASSERT_TRUE(s.is_object()) << "a job registered after the recovery is lost: " << serve->log();
    EXPECT_EQ(s["round"], 1);
    serve->stop(SIGTERM);
    fs::remove_all(here);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace perseus::testing
