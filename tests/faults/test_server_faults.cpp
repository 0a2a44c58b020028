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

}  // namespace
}  // namespace perseus::testing
