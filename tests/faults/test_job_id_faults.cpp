// No two jobs share a records folder, against a real `perseus serve`: jobs registered within one
// second, in both dialects, with names that differ only in '/' against '_' (a Hugging Face
// `org/model` and an `org_model`), while --max-jobs 1 forgets each ended job early and the server is
// killed and restarted in between. Every job gets an id of its own and a folder of its own whose
// job.json names it. Randomized; PERSEUS_FAULT_INSTANCES sets the registrations (default 40).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <random>
#include <set>
#include <string>

#include "job_driver.hpp"
#include "perseus/protocol/models.hpp"
#include "perseus/util/atomic_file.hpp"
#include "process_fixture.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

TEST(JobIds, NoTwoJobsShareARecordsFolder) {
  const int count = fault_instances(40);
  unsigned seed = std::random_device()();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  std::mt19937 random(seed);
  auto dir = test_dir();
  const std::string flags = "--max-jobs 1";
  auto serve = std::make_unique<ServeProcess>(dir, "AllMaxFrequency", "{}", flags);
  ASSERT_NE(serve->port, 0);
  const int port = serve->port;
  const std::vector<std::string> names = {"org/model", "org_model", "org/model_x", "org_model/x", "a/b/c", "a_b/c"};
  std::set<std::string> ids;
  for (int i = 0; i < count; ++i) {
    if (std::uniform_int_distribution<int>(0, 9)(random) == 0) {  // a restart now and then
      serve->stop(SIGKILL);
      serve = std::make_unique<ServeProcess>(dir, "AllMaxFrequency", "{}", flags, "", port);
      ASSERT_EQ(serve->port, port) << serve->log();
    }
    const std::string& name = names[std::uniform_int_distribution<std::size_t>(0, names.size() - 1)(random)];
    bool zeus = std::uniform_int_distribution<int>(0, 1)(random) == 1;
    DrivenJob job;
    job.url = serve->url();
    nlohmann::json body = job_body(2);
    if (zeus)
      body = {{"job_id", ""},   {"pp_degree", 2},  {"dp_degree", 1},
              {"tp_degree", 1}, {"world_size", 2}, {"job_metadata", name}};
    else body["model_name"] = name;
    auto reply = job.call("POST", "/register_job", body.dump(), 5s);
    ASSERT_TRUE(reply && reply->status == 200) << (reply ? reply->body : "no answer") << serve->log();
    std::string id = nlohmann::json::parse(reply->body).get<std::string>();
    EXPECT_TRUE(ids.insert(id).second) << "job id " << id << " given twice";
    // Ended at once, so that --max-jobs 1 forgets it when the next one registers.
    auto left = job.call("POST", "/leave/" + client::encode_path_segment(id),
                         nlohmann::json{{"rank", 0}, {"reason", "test"}}.dump(), 5s);
    ASSERT_TRUE(left && left->status == 200) << (left ? left->body : "no answer");
  }
  serve->stop(SIGTERM);
  std::set<std::string> folders;
  for (const auto& id : ids) {
    fs::path folder = dir / "dump" / protocol::records_dir_name(id);
    EXPECT_TRUE(folders.insert(folder.string()).second) << "two jobs share " << folder;
    ASSERT_TRUE(fs::is_directory(folder)) << "job " << id << " was acknowledged without its records folder";
    if (!fs::exists(folder / "job.json")) continue;  // killed before the record was written
    auto job = nlohmann::json::parse(read_file(folder / "job.json"));
    EXPECT_EQ(job["job"]["job_id"], id) << folder << " holds another job's records";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace perseus::testing
