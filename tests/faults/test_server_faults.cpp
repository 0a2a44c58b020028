// Faults on the server side, each against a real `perseus serve` process: what the server did
// (log, answers) when something ordinary went wrong.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "perseus/client/http_client.hpp"
#include "process_fixture.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

fs::path test_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto dir = fs::temp_directory_path() /
             fmt::format("perseus-faults-{}-{}-{}", ::getpid(), info->test_suite_name(), info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::size_t count_lines_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

// Issue 11, fault 5: out of file descriptors, the accept loop spun a core and logged millions of
// lines. Now it logs once, backs off, and serves again once descriptors free up.
TEST(ServerFaults, OutOfFileDescriptorsTheServerLogsOnceAndRecovers) {
  auto dir = test_dir();
  ServeProcess serve(dir, "AllMaxFrequency", "{}", "--no-dump --threads 1", "ulimit -n 32;");
  ASSERT_NE(serve.port, 0);
  std::vector<int> connections;
  for (int i = 0; i < 60; ++i) {
    int fd = connect_to(serve.port);  // completes in the kernel's backlog even when accept fails
    if (fd >= 0) connections.push_back(fd);
  }
  ASSERT_GT(connections.size(), 32u);
  std::this_thread::sleep_for(1500ms);  // what the old loop turned into ~10^5 log lines
  std::string log = serve.log();
  EXPECT_EQ(count_lines_with(log, "Too many open files"), 1u) << log.substr(0, 2000);
  for (int fd : connections) ::close(fd);
  client::HttpClient client(serve.url());
  auto reply = client.request("GET", "/info", "", 10s);
  EXPECT_EQ(reply.status, 200);
  EXPECT_NE(serve.log().find("accept works again"), std::string::npos);
  serve.stop(SIGTERM);
  fs::remove_all(dir);
}

// Starts a fake training rank in the background; its exit code lands in rank<R>.rc.
void start_rank(const fs::path& dir, int port, int rank, int stages) {
  std::string command = fmt::format(
      "cd '{}' && (PERSEUS_NVML_LIBRARY='{}' '{}' --server http://127.0.0.1:{} --rank {} --stages {} --microbatches 4 "
      "--iterations 100000 --report-every 2 --job-id-file job_id.txt > rank{}.out 2>&1; echo $? > rank{}.rc) &",
      dir.string(), PERSEUS_FAKE_NVML, PERSEUS_FAKE_TRAINER, port, rank, stages, rank, rank);
  ASSERT_EQ(std::system(command.c_str()), 0);
}

fs::path only_job(const fs::path& dump) {
  std::vector<fs::path> jobs;
  for (const auto& e : fs::directory_iterator(dump))
    if (e.is_directory()) jobs.push_back(e.path());
  EXPECT_EQ(jobs.size(), 1u);
  return jobs.empty() ? fs::path() : jobs.front();
}

// Issue 11, fault 3: a server restart used to turn perseus off for the rest of training and lose
// the profiling run. Now the server is killed (-9) mid-profiling and started again: the ranks keep
// training, come back, and the same job finishes profiling, every clock measured exactly once.
TEST(ServerFaults, AServerKilledMidProfilingResumesTheSameJob) {
  auto dir = test_dir();
  const char* args = R"({"minimum_power_state": 1200})";  // 2 warm-up rounds + 15 clocks
  auto serve = std::make_unique<ServeProcess>(dir, "InstructionProfiler", args);
  ASSERT_NE(serve->port, 0);
  int port = serve->port;
  for (int r = 0; r < 2; ++r) start_rank(dir, port, r, 2);
  ASSERT_TRUE(eventually([&] {
    for (const auto& e : fs::recursive_directory_iterator(dir / "dump"))
      if (e.path().filename() == "5.prof.json") return true;
    return false;
  }, 30s));
  serve->stop(SIGKILL);
  std::this_thread::sleep_for(300ms);  // the ranks meet a refused connection and train on
  serve = std::make_unique<ServeProcess>(dir, "InstructionProfiler", args, "", "", port);
  ASSERT_EQ(serve->port, port);
  ASSERT_TRUE(eventually([&] { return fs::exists(dir / "rank0.rc") && fs::exists(dir / "rank1.rc"); }, 60s))
      << read_if_exists(dir / "rank0.out");
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(read_file(dir / fmt::format("rank{}.rc", r)), "3\n")
        << "rank " << r << " must end with [profiling-done]: " << read_file(dir / fmt::format("rank{}.out", r));
  EXPECT_NE(serve->log().find("restored at round"), std::string::npos) << serve->log();

  fs::path job = only_job(dir / "dump");
  EXPECT_TRUE(fs::exists(job / "profile.csv"));
  std::vector<int> measured;  // the clock each profiling round ran
  for (int round = 2; round < 17; ++round) {
    auto sched = nlohmann::json::parse(read_file(job / fmt::format("{}.sched.json", round)));
    measured.push_back(sched[0]["power_states"][0].get<int>());
  }
  EXPECT_FALSE(fs::exists(job / "17.sched.json")) << "no round beyond the profile";
  std::vector<int> expected;
  for (int clock = 1410; clock >= 1200; clock -= 15) expected.push_back(clock);
  EXPECT_EQ(measured, expected) << "each clock measured once, in order, across the restart";
  serve->stop(SIGTERM);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace perseus::testing
