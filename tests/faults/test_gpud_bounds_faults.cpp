// `perseus gpud` against a real daemon process on the fake NVML, whose driver state (locked clocks,
// power limits) outlives each process as a real driver's does (PERSEUS_FAKE_NVML_STATE): it never
// changes a power limit no client of it set — an administrator's cap survives its start, its stop
// and its crash — and one user's sockets cannot keep a rank's clock lock out.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpud_fixture.hpp"
#include "process_fixture.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct DriverGpu {
  unsigned graphics = 0, memory = 0, limit_mw = 0;
  bool operator==(const DriverGpu&) const = default;
};

std::vector<DriverGpu> driver_state(const fs::path& file) {
  std::vector<DriverGpu> gpus;
  std::istringstream in(read_if_exists(file));
  std::string word;
  unsigned index = 0;
  DriverGpu g;
  while (in >> word >> index >> word >> g.graphics >> word >> g.memory >> word >> g.limit_mw) gpus.push_back(g);
  return gpus;
}

void write_driver_state(const fs::path& file, const std::vector<DriverGpu>& gpus) {
  std::ofstream out(file);
  for (std::size_t i = 0; i < gpus.size(); ++i)
    out << "gpu " << i << " graphics " << gpus[i].graphics << " memory " << gpus[i].memory << " power_limit_mw "
        << gpus[i].limit_mw << "\n";
}

// A client connection kept open: the lines it sends, their replies.
struct GpudClient {
  explicit GpudClient(const std::string& socket) : fd(unix_connect(socket)) {
    timeval limit{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  }
  ~GpudClient() { close(); }
  std::string line(const std::string& request) {
    std::string text = request + "\n";
    ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
    std::string reply;
    char c = 0;
    while (::recv(fd, &c, 1, 0) == 1 && c != '\n') reply.push_back(c);
    return reply;
  }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  int fd;
};

TEST(GpudFaults, GpudNeverChangesAPowerLimitItDidNotSet) {
  auto dir = test_dir();
  fs::path state = dir / "driver.state";
  unsigned seed = std::random_device()();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  std::mt19937 random(seed);
  auto limit = [&] { return 1000u * std::uniform_int_distribution<unsigned>(150, 399)(random); };
  // The administrator's caps, set before any gpud runs.
  const std::vector<DriverGpu> admin = {{0, 0, limit()}, {0, 0, limit()}};
  write_driver_state(state, admin);
  const std::string env = fmt::format("env PERSEUS_FAKE_NVML_STATE={} PERSEUS_FAKE_NVML_GPUS=2", state.string());
  const int cycles = fault_instances(6);
  for (int cycle = 0; cycle < cycles; ++cycle) {
    SCOPED_TRACE(fmt::format("cycle {}", cycle));
    std::string name = fmt::format("gpud{}", cycle);
    pid_t gpud = start_gpud(dir, name, "", env);
    ASSERT_GT(gpud, 0) << read_if_exists(dir / (name + ".err"));
    EXPECT_EQ(driver_state(state), admin)
        << "gpud's start changed what no client of it set: " << read_if_exists(dir / (name + ".err"));
    // A rank sets a power limit and locks a clock on a random GPU, and keeps its connection or not.
    const bool client = std::uniform_int_distribution<int>(0, 2)(random) != 0;
    std::optional<GpudClient> rank;
    unsigned device = std::uniform_int_distribution<unsigned>(0, 1)(random), set = limit();
    if (client) {
      rank.emplace(socket_of(dir));
      EXPECT_NE(rank->line(fmt::format(R"({{"op": "set_power_limit", "device": {}, "mw": {}}})", device, set))
                    .find("\"ok\":true"),
                std::string::npos);
      EXPECT_NE(
          rank->line(fmt::format(R"({{"op": "lock_graphics_clock", "device": {}, "min": 1200, "max": 1200}})", device))
              .find("\"ok\":true"),
          std::string::npos);
      EXPECT_EQ(driver_state(state)[device].limit_mw, set);
      EXPECT_EQ(driver_state(state)[1 - device], admin[1 - device]) << "the other GPU is untouched";
      if (std::uniform_int_distribution<int>(0, 1)(random) == 0) {
        rank.reset();  // the rank ends: what it set is undone, back to the administrator's
        EXPECT_TRUE(eventually([&] { return driver_state(state) == admin; })) << "not undone on disconnect";
      }
    }
    const bool crash = std::uniform_int_distribution<int>(0, 1)(random) == 0;
    ::kill(gpud, crash ? SIGKILL : SIGTERM);
    ASSERT_TRUE(eventually([&] { return !ServeProcess::alive(gpud); }));
    if (!crash || !rank) {
      EXPECT_EQ(driver_state(state), admin) << "gpud's stop left a change or made one";
    }
    // After a crash under a rank its change stays (nothing ran to undo it) until the next start.
    rank.reset();
  }
  pid_t last = start_gpud(dir, "last", "", env);
  ASSERT_GT(last, 0);
  EXPECT_EQ(driver_state(state), admin) << read_if_exists(dir / "last.err");
  ::kill(last, SIGTERM);
  ASSERT_TRUE(eventually([&] { return !ServeProcess::alive(last); }));
  EXPECT_EQ(driver_state(state), admin);
  remove_test_dir(dir);
}

// Idle connections (owning no GPU) give way to a rank's: 1,100 sockets from one user (this test's)
// held open do not keep another connection's clock lock out. With root, a second user's sockets
// are capped per user (--max-connections-per-user) as well.
TEST(GpudFaults, SocketsHeldOpenCannotKeepARanksClockLockOut) {
  auto dir = test_dir();
  pid_t gpud = start_gpud(dir, "gpud", "--idle-timeout 0 --socket-mode 0666", "prlimit --nofile=256:256");
  ASSERT_GT(gpud, 0) << read_if_exists(dir / "gpud.err");
  std::string socket = socket_of(dir);
  std::vector<int> held;
  for (int i = 0; i < 1100; ++i) {
    int fd = unix_connect(socket);
    if (fd >= 0) held.push_back(fd);
  }
  for (int attempt = 0; attempt < 5; ++attempt) {
    GpudClient rank(socket);
    std::string reply = rank.line(R"({"op": "lock_graphics_clock", "device": 0, "min": 1200, "max": 1200})");
    EXPECT_NE(reply.find("\"ok\":true"), std::string::npos) << "attempt " << attempt << ": '" << reply << "'";
  }
  for (int fd : held) ::close(fd);
  if (::geteuid() == 0 && std::system("command -v setpriv > /dev/null") == 0) {
    // 1,100 sockets of user nobody: closed beyond its share as they are accepted.
    pid_t other = spawn(dir,
                        fmt::format("setpriv --reuid=65534 --regid=65534 --clear-groups python3 -c \"import socket, "
                                    "time; s = [socket.socket(socket.AF_UNIX) for _ in range(1100)]; "
                                    "[x.connect('{}') for x in s]; time.sleep(30)\"",
                                    socket),
                        "nobody");
    EXPECT_TRUE(eventually([&] {
      return read_if_exists(dir / "gpud.err").find("(max_connections_per_user)") != std::string::npos;
    })) << read_if_exists(dir / "gpud.err")
        << read_if_exists(dir / "nobody.err");
    GpudClient rank(socket);
    EXPECT_NE(rank.line(R"({"op": "lock_graphics_clock", "device": 0, "min": 1005, "max": 1005})").find("\"ok\":true"),
              std::string::npos);
    ::kill(other, SIGKILL);
  }
  ::kill(gpud, SIGTERM);
  remove_test_dir(dir);
}

}  // namespace
}  // namespace perseus::testing
