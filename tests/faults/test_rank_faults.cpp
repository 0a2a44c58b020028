// Faults on the training side, each with real processes: a rank killed with SIGKILL, with and
// without `perseus gpud`, and what happened to its GPU's clocks and power limit (from the fake NVML call log).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "process_fixture.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// The last line of the call log that sets or resets the graphics clock.
std::string last_graphics_call(const std::string& log) {
  std::string last;
  std::size_t at = 0;
  while ((at = log.find("nvmlDevice", at)) != std::string::npos) {
    auto end = log.find('\n', at);
    std::string line = log.substr(at, end - at);
    if (line.rfind("nvmlDeviceSetGpuLockedClocks", 0) == 0 || line.rfind("nvmlDeviceResetGpuLockedClocks", 0) == 0)
      last = line;
    at = end == std::string::npos ? log.size() : end;
  }
  return last;
}

std::string trainer(const ServeProcess& serve, const std::string& env) {
  return fmt::format(
      "env {} '{}' --server {} --rank 0 --stages 1 --microbatches 4 --iterations 100000 --report-every 2", env,
      PERSEUS_FAKE_TRAINER, serve.url());
}

const char* kTwoClocks = R"({"forward_freq": 1200, "backward_freq": 1005})";

// The fault gpud exists for: the driver keeps locked clocks after the process is gone, and
// nothing outlives the rank to undo them. (With the real driver the GPU then stays slow until
// someone resets it by hand; the fake NVML's log shows the last call was a lock.)
TEST(RankFaults, WithoutGpudNothingResetsASigkilledRanksClock) {
  auto dir = test_dir();
  ServeProcess serve(dir, "TwoFrequencies", kTwoClocks, "--no-dump");
  ASSERT_NE(serve.port, 0);
  pid_t rank = spawn(dir,
                     trainer(serve, fmt::format("PERSEUS_NVML_LIBRARY={} PERSEUS_FAKE_NVML_LOG={}/rank.log",
                                                PERSEUS_FAKE_NVML, dir.string())),
                     "rank");
  ASSERT_TRUE(eventually(
      [&] { return read_if_exists(dir / "rank.log").find("SetGpuLockedClocks 0 1005") != std::string::npos; }));
  ::kill(rank, SIGKILL);
  std::this_thread::sleep_for(300ms);
  std::string last = last_graphics_call(read_file(dir / "rank.log"));
  EXPECT_EQ(last.rfind("nvmlDeviceSetGpuLockedClocks", 0), 0u) << "last clock call: " << last;
  fs::remove_all(dir);
}

// With the node's gpud, the same kill resets the GPU within a second (the daemon notices the
// connection close at once).
TEST(RankFaults, WithGpudASigkilledRanksGpuIsResetWithinASecond) {
  auto dir = test_dir();
  spawn(dir,
        fmt::format("env PERSEUS_FAKE_NVML_LOG={}/gpud.log {} gpud --socket {}/gpud.sock --nvml {}", dir.string(),
                    PERSEUS_BINARY, dir.string(), PERSEUS_FAKE_NVML),
        "gpud");
  ASSERT_TRUE(eventually([&] { return read_if_exists(dir / "gpud.out").find("listening on") != std::string::npos; }));
  ServeProcess serve(dir, "TwoFrequencies", kTwoClocks, "--no-dump");
  ASSERT_NE(serve.port, 0);
  pid_t rank = spawn(dir, trainer(serve, fmt::format("PERSEUS_GPUD_SOCKET={}/gpud.sock", dir.string())), "rank");
  auto locked = [&] {
    std::string last = last_graphics_call(read_if_exists(dir / "gpud.log"));
    return last.rfind("nvmlDeviceSetGpuLockedClocks", 0) == 0;
  };
  ASSERT_TRUE(eventually(locked)) << read_if_exists(dir / "rank.err");
  ::kill(rank, SIGKILL);  // mid-iteration: the trainer locks a clock per instruction
  auto killed = std::chrono::steady_clock::now();
  bool reset = eventually([&] { return !locked(); }, 1s);
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed);
  EXPECT_TRUE(reset) << "the GPU was not reset within 1 s of the kill";
  // The daemon says so once it has reset the GPU: the line may land just after the reset is seen.
  const std::string said = fmt::format("pid {} disconnected; what it set is reset", rank);
  EXPECT_TRUE(eventually([&] { return read_if_exists(dir / "gpud.err").find(said) != std::string::npos; }, 1s))
      << read_file(dir / "gpud.err");
  std::printf("reset %lld ms after SIGKILL\n", static_cast<long long>(took.count()));
  ::kill(std::stoi(read_file(dir / "gpud.pid")), SIGTERM);
  EXPECT_TRUE(eventually(
      [&] { return read_if_exists(dir / "gpud.err").find("signal 15: stopping") != std::string::npos; }, 5s));
  fs::remove_all(dir);
}

// A rank's own SIGTERM handler resets its clocks; the handler must not call NVML itself, or a
// signal landing while that thread is inside an NVML call (holding the driver library's lock)
// hangs the training process for good. The fake NVML holds its lock 2 ms in every clock change,
// and the signal goes to every thread of the rank but the main one (the thread that changes
// clocks among them), so most land inside a change: each rank still ends within seconds, of
// SIGTERM, at default clocks.
TEST(RankFaults, ASigtermMidDriverCallEndsTheRankAtDefaultClocks) {
  auto dir = test_dir();
  ServeProcess serve(dir, "TwoFrequencies", kTwoClocks, "--no-dump");
  ASSERT_NE(serve.port, 0);
  for (int attempt = 0; attempt < 6; ++attempt) {
    std::string log = fmt::format("{}/rank{}.log", dir.string(), attempt);
    std::string rc = fmt::format("{}/rank{}.rc", dir.string(), attempt);
    // The wrapper shell's own output goes to /dev/null: a rank that hangs must not hold the test's pipes.
    std::string command = fmt::format(
        "({} & echo $! > '{}.pid'; wait $!; echo $? > '{}.part' && mv '{}.part' '{}') > /dev/null 2>&1 &",
        trainer(serve, fmt::format("PERSEUS_NVML_LIBRARY={} PERSEUS_FAKE_NVML_LOG={} PERSEUS_FAKE_NVML_LOCKED_US=2000",
                                   PERSEUS_FAKE_NVML, log)) +
            fmt::format(" > '{}.out' 2>&1", rc),
        rc, rc, rc, rc);
    ASSERT_EQ(std::system(command.c_str()), 0);
    ASSERT_TRUE(eventually([&] { return read_if_exists(log).find("SetGpuLockedClocks 0 1005") != std::string::npos; }))
        << read_if_exists(rc + ".out");
    pid_t rank = std::stoi(read_file(rc + ".pid"));
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * attempt));
    for (const auto& task : fs::directory_iterator(fmt::format("/proc/{}/task", rank))) {
      long thread = std::stol(task.path().filename().string());
      if (thread != rank) ::syscall(SYS_tgkill, rank, thread, SIGTERM);
    }
    bool ended = eventually([&] { return fs::exists(rc); }, 10s);
    if (!ended) ::kill(rank, SIGKILL);
    ASSERT_TRUE(ended) << "attempt " << attempt << ": the rank hung in its SIGTERM handler";
    EXPECT_EQ(read_file(rc), "143\n") << "attempt " << attempt << ": ends of its SIGTERM";
    std::string last = last_graphics_call(read_file(log));
    EXPECT_EQ(last.rfind("nvmlDeviceResetGpuLockedClocks", 0), 0u)
        << "attempt " << attempt << ": last clock call: " << last;
  }
  fs::remove_all(dir);
}

// The last call of the log that sets the power limit ("nvmlDeviceSetPowerManagementLimit DEVICE MW -> RESULT").
std::string last_power_limit_call(const std::string& log) {
  std::string last;
  for (std::size_t at = 0; (at = log.find("nvmlDeviceSetPowerManagementLimit", at)) != std::string::npos;) {
    auto end = log.find('\n', at);
    last = log.substr(at, end - at);
    at = end == std::string::npos ? log.size() : end;
  }
  return last;
}

// A power budget's limit on a rank's GPU does not outlive the rank: its fatal-signal handler sets
// the limit the GPU had again (the fake GPU starts at its maximum, 400 W).
TEST(RankFaults, ASigtermedRankGivesItsGpuBackThePowerLimitItHad) {
  auto dir = test_dir();
  // A budget of 1 W is out of any job's reach: the backstop's limit, at the GPU's lowest (150 W).
  ServeProcess serve(dir, "TwoFrequencies", kTwoClocks, "--no-dump --power-budget 1");
  ASSERT_NE(serve.port, 0);
  std::string log = (dir / "rank.log").string(), rc = (dir / "rank.rc").string();
  std::string command = fmt::format(
      "({} & echo $! > '{}.pid'; wait $!; echo $? > '{}.part' && mv '{}.part' '{}') > /dev/null 2>&1 &",
      trainer(serve, fmt::format("PERSEUS_NVML_LIBRARY={} PERSEUS_FAKE_NVML_LOG={}", PERSEUS_FAKE_NVML, log)) +
          fmt::format(" > '{}.out' 2>&1", rc),
      rc, rc, rc, rc, rc);
  ASSERT_EQ(std::system(command.c_str()), 0);
  ASSERT_TRUE(eventually([&] {
    return last_power_limit_call(read_if_exists(log)) == "nvmlDeviceSetPowerManagementLimit 0 150000 -> 0";
  })) << read_if_exists(rc + ".out");
  std::this_thread::sleep_for(300ms);  // a few rounds under the limit
  const std::string before = read_file(log);
  std::size_t sets = 0;
  for (std::size_t at = 0; (at = before.find("SetPowerManagementLimit 0 150000", at)) != std::string::npos; ++at)
    ++sets;
  EXPECT_EQ(sets, 1u) << "a limit in force is not set again every round";
  pid_t rank = std::stoi(read_file(rc + ".pid"));
  ::kill(rank, SIGTERM);
  bool ended = eventually([&] { return fs::exists(rc); }, 10s);
  if (!ended) ::kill(rank, SIGKILL);
  ASSERT_TRUE(ended) << "the rank hung in its SIGTERM handler";
  EXPECT_EQ(last_power_limit_call(read_file(log)), "nvmlDeviceSetPowerManagementLimit 0 400000 -> 0");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace perseus::testing
