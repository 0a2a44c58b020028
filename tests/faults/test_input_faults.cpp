// Hostile input against real `perseus serve`, `perseus gpud` and `perseus plans` processes: the
// requests, lines and files that could end them, then a check that they still answer; gpud's
// socket checks, descriptor exhaustion, and a restart under a training rank.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "perseus/client/http_client.hpp"
#include "perseus/util/atomic_file.hpp"
#include "gpud_fixture.hpp"
#include "process_fixture.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// One raw HTTP/1.1 exchange (the target sent as is, no client-side escaping); the reply's text.
std::string raw_http(int port, const std::string& request) {
  int fd = connect_to(port);
  if (fd < 0) return "";
  timeval limit{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  for (std::size_t sent = 0; sent < request.size();) {
    ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  std::string reply;
  char chunk[4096];
  for (ssize_t n; (n = ::recv(fd, chunk, sizeof chunk, 0)) > 0;) reply.append(chunk, static_cast<std::size_t>(n));
  ::close(fd);
  return reply;
}

std::string get(int port, const std::string& target) {
  return raw_http(port, "GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
}

TEST(InputFaults, RequestsThatUsedToEndTheServerGetAnErrorAndItServesOn) {
  auto dir = test_dir();
  ServeProcess serve(dir, "AllMaxFrequency", "{}", "--no-dump");
  ASSERT_NE(serve.port, 0);
  for (const char* target : {"/jobs/%FF", "/jobs/%C3", "/schedule/x?rank=%FF", "/jobs/%ED%A0%80", "/jobs/\xff"}) {
    std::string reply = get(serve.port, target);
    EXPECT_NE(reply.find("HTTP/1.1 4"), std::string::npos) << target << ": " << reply.substr(0, 200);
    EXPECT_NE(reply.find("\"detail\""), std::string::npos) << target;
  }
  std::string body = R"({"rank": 0, "progress": )" + std::string(70000, '[') + std::string(70000, ']') + "}";
  std::string reply = raw_http(serve.port, fmt::format("POST /heartbeat/x HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n"
                                                       "Connection: close\r\n\r\n{}",
                                                       body.size(), body));
  EXPECT_NE(reply.find("HTTP/1.1 422"), std::string::npos) << reply.substr(0, 300);
  EXPECT_LT(reply.size(), 1000u);
  EXPECT_NE(get(serve.port, "/info").find("HTTP/1.1 200"), std::string::npos) << serve.log();
  EXPECT_TRUE(ServeProcess::alive(serve.pid));
  remove_test_dir(dir);
}

TEST(InputFaults, NestedPlanFilesAreAnErrorForPlansReadAndServe) {
  auto dir = test_dir();
  write_file_atomic(dir / "deep.json",
                    R"({"frequencies": [)" + std::string(200000, '[') + std::string(200000, ']') + "]}");
  int status = std::system(
      fmt::format("{} plans read {}/deep.json > {}/read.out 2>&1", PERSEUS_BINARY, dir.string(), dir.string()).c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 65) << read_file(dir / "read.out");
  EXPECT_NE(read_file(dir / "read.out").find("nested deeper than 64 levels"), std::string::npos);
  status = std::system(fmt::format("cd {} && timeout 20 {} serve --port 0 --scheduler PointSolution --scheduler-args "
                                   "'{{\"solution_path\": \"deep.json\"}}' > serve.out 2>&1",
                                   dir.string(), PERSEUS_BINARY)
                           .c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_LT(WEXITSTATUS(status), 124) << "a clear error, not a crash: " << read_file(dir / "serve.out");
  EXPECT_NE(read_file(dir / "serve.out").find("deep.json"), std::string::npos) << read_file(dir / "serve.out");
  remove_test_dir(dir);
}

TEST(InputFaults, LinesThatUsedToEndGpudGetAnErrorAndItServesOn) {
  auto dir = test_dir();
  pid_t gpud = start_gpud(dir, "gpud");
  ASSERT_GT(gpud, 0) << read_if_exists(dir / "gpud.err");
  std::string socket = socket_of(dir);
  for (const std::string& line : {std::string("\xff\n"), "{\"op\":\"" + std::string(99, 'x') + "\xC3\xA9\"}\n",
                                  std::string(5000, '[') + "\n", std::string("{\"op\": \"\xC3\"}\n")}) {
    std::string reply = gpud_line(socket, line);
    EXPECT_NE(reply.find("\"ok\":false"), std::string::npos) << reply;
    EXPECT_FALSE(nlohmann::json::parse(reply, nullptr, false).is_discarded()) << reply;
  }
  EXPECT_NE(gpud_line(socket, "{\"op\": \"hello\"}\n").find("\"ok\":true"), std::string::npos);
  EXPECT_TRUE(ServeProcess::alive(gpud)) << read_file(dir / "gpud.err");
  EXPECT_EQ(read_file(dir / "gpud.err").find("stopping"), std::string::npos) << "it did not stop under the ranks";
  ::kill(gpud, SIGTERM);
  remove_test_dir(dir);
}

TEST(InputFaults, GpudRefusesASocketPathThatIsNotASocketAndLeavesNoSocketBehind) {
  auto dir = test_dir();
  const std::string socket = socket_of(dir);
  write_file_atomic(socket, "a user's file\n");
  auto gpud = [&](const std::string& flags) {
    int status = std::system(fmt::format("cd {} && timeout 20 {} gpud --socket {} --nvml {} {} > out 2>&1",
                                         dir.string(), PERSEUS_BINARY, socket, PERSEUS_FAKE_NVML, flags)
                                 .c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(gpud(""), 64);
  EXPECT_NE(read_file(dir / "out").find("exists and is not a socket"), std::string::npos) << read_file(dir / "out");
  EXPECT_EQ(read_file(socket), "a user's file\n");
  fs::remove(socket);
  EXPECT_EQ(gpud("--socket-group no-such-group-perseus"), 64);
  EXPECT_FALSE(fs::exists(fs::symlink_status(socket))) << "the failed start left its socket";
  pid_t open = start_gpud(dir, "open", "--socket-mode 0777");
  ASSERT_GT(open, 0);
  EXPECT_NE(read_file(dir / "open.err").find("every user of this node may change"), std::string::npos)
      << read_file(dir / "open.err");
  ::kill(open, SIGTERM);
  remove_test_dir(dir);
}

TEST(InputFaults, GpudOutOfDescriptorsLogsOnceAndServesAgain) {
#ifdef PERSEUS_SANITIZED
  // UBSan's vptr check probes memory through a pipe, so with no descriptor free it reports a false
  // "invalid vptr" and stops the daemon; the release build runs this test.
  GTEST_SKIP() << "needs free descriptors under UBSan; covered by the release build";
#endif
  auto dir = test_dir();
  // No connection bounds of its own: descriptors run out first.
  pid_t gpud = start_gpud(dir, "gpud", "--idle-timeout 0 --max-connections 0 --max-connections-per-user 0",
                          "prlimit --nofile=24:24");
  ASSERT_GT(gpud, 0) << read_if_exists(dir / "gpud.err");
  std::string socket = socket_of(dir);
  std::vector<int> connections;
  for (int i = 0; i < 60; ++i) {
    int fd = unix_connect(socket);  // queued in the backlog even when accept fails
    if (fd >= 0) connections.push_back(fd);
  }
  ASSERT_GT(connections.size(), 24u);
  std::this_thread::sleep_for(1500ms);  // what the old loop turned into megabytes of log
  EXPECT_EQ(count_lines_with(read_file(dir / "gpud.err"), "Too many open files"), 1u)
      << read_file(dir / "gpud.err").substr(0, 2000);
  for (int fd : connections) ::close(fd);
  EXPECT_TRUE(
      eventually([&] { return gpud_line(socket, "{\"op\": \"hello\"}\n").find("\"ok\":true") != std::string::npos; }));
  EXPECT_TRUE(eventually([&] { return read_file(dir / "gpud.err").find("accept works again") != std::string::npos; }));
  ::kill(gpud, SIGTERM);
  remove_test_dir(dir);
}

// gpud killed and started again under a training rank: the rank re-claims its GPU, applies its
// clocks through the new daemon and trains on; perseus stays on and the job goes on.
TEST(InputFaults, ARankGoesOnApplyingClocksThroughARestartedGpud) {
  auto dir = test_dir();
  pid_t gpud = start_gpud(dir, "gpud");
  ASSERT_GT(gpud, 0) << read_if_exists(dir / "gpud.err");
  ServeProcess serve(dir, "TwoFrequencies", R"({"forward_freq": 1200, "backward_freq": 1005})", "--no-dump");
  ASSERT_NE(serve.port, 0);
  pid_t rank = spawn(dir,
                     fmt::format("env PERSEUS_GPUD_SOCKET={} '{}' --server {} --rank 0 --stages 1 "
                                 "--microbatches 2 --iterations 100000 --report-every 2",
                                 socket_of(dir), PERSEUS_FAKE_TRAINER, serve.url()),
                     "rank");
  auto locks = [&](const std::string& log) {
    return read_if_exists(dir / log).find("SetGpuLockedClocks 0 1005") != std::string::npos;
  };
  ASSERT_TRUE(eventually([&] { return locks("gpud.log"); })) << read_if_exists(dir / "rank.err");
  ::kill(gpud, SIGKILL);
  ASSERT_TRUE(eventually([&] { return !ServeProcess::alive(gpud); }));
  pid_t again = start_gpud(dir, "again");  // replaces the dead daemon's stale socket
  ASSERT_GT(again, 0) << read_if_exists(dir / "again.err");
  EXPECT_TRUE(eventually([&] { return locks("again.log"); })) << read_if_exists(dir / "rank.err");
  EXPECT_TRUE(ServeProcess::alive(rank)) << read_if_exists(dir / "rank.err");
  EXPECT_TRUE(eventually([&] {
    return (read_if_exists(dir / "rank.out") + read_if_exists(dir / "rank.err")).find("reconnected to perseus gpud") !=
           std::string::npos;
  })) << read_if_exists(dir / "rank.out");
  auto status = nlohmann::json::parse(client::HttpClient(serve.url()).request("GET", "/jobs", "", 10s).body);
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0]["phase"], "running") << status.dump();
  ::kill(rank, SIGTERM);
  ::kill(again, SIGTERM);
  remove_test_dir(dir);
}

}  // namespace
}  // namespace perseus::testing
