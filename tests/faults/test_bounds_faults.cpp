// What clients can make a real `perseus serve` process hold: memory for bodies nobody may send and
// for jobs nobody trains in, connections, and settings that would overflow its clocks.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <chrono>
#include <fstream>
#include <future>
#include <random>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "perseus/client/http_client.hpp"
#include "perseus/protocol/models.hpp"
#include "perseus/protocol/physical_bounds.hpp"
#include "perseus/util/atomic_file.hpp"
#include "process_fixture.hpp"
#include "server_fixture.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

const char* kToken = "0123456789abcdef-token";

// A connection to 127.0.0.1:port from `from` (any 127.x.y.z address is this machine's).
int connect_from(const char* from, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &local.sin_addr);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& data) {
  for (std::size_t sent = 0; sent < data.size();) {
    auto n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

bool closed_by_server(int fd, std::chrono::milliseconds within) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, static_cast<int>(within.count())) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// A /proc/<pid>/status field in kB (VmRSS: now, VmHWM: the peak).
long memory_kb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

TEST(BoundsFaults, UnauthenticatedLargeBodiesDoNotGrowTheServer) {
  auto dir = test_dir();
  write_file_atomic(dir / "token", std::string(kToken) + "\n");
  ServeProcess serve(dir, "AllMaxFrequency", "{}", "--no-dump --token-file token");
  ASSERT_NE(serve.port, 0);
  long before = memory_kb(serve.pid, "VmRSS");
  // 30 clients at once, each announcing and sending a 60 MB body without the token.
  constexpr std::size_t kBody = 60u << 20;
  std::atomic<int> refused{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 30; ++i)
    clients.emplace_back([&] {
      int fd = connect_from("127.0.0.1", serve.port);
      if (fd < 0) return;
      std::string chunk(1u << 20, 'x');
      if (send_all(fd, fmt::format("POST /result/x HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", kBody)))
        for (std::size_t sent = 0; sent < kBody && send_all(fd, chunk); sent += chunk.size()) {}
      char head[16] = {};
      if (::recv(fd, head, 12, 0) == 12 && std::string(head, 12) == "HTTP/1.1 401") ++refused;
      ::close(fd);
    });
  for (auto& t : clients) t.join();
  long peak = memory_kb(serve.pid, "VmHWM");
  std::cout << "30 unauthenticated 60 MB bodies: server RSS " << before / 1024 << " MB before, peak " << peak / 1024
            << " MB (growth " << (peak - before) / 1024 << " MB); " << refused << " read the 401 before the reset\n";
  EXPECT_LE(peak - before, 50 * 1024) << "kB";
  client::HttpClient admin(serve.url(), kToken);
  EXPECT_EQ(admin.request("GET", "/info", "", 5s).status, 200) << "and it still serves";
}

TEST(BoundsFaults, BogusJobsOfHugeWorldSizesAreRefusedOrSmall) {
  auto dir = test_dir();
  ServeProcess serve(dir, "AllMaxFrequency", "{}", "--no-dump");
  ASSERT_NE(serve.port, 0);
  long before = memory_kb(serve.pid, "VmRSS");
  json job = {{"job_id", ""},         {"pp_degree", 16},      {"dp_degree", 1024},     {"tp_degree", 8},
              {"world_size", 131072}, {"framework", "x"},     {"model_name", "bogus"}, {"partition_method", "x"},
              {"microbatch_size", 1}, {"num_microbatches", 1}};
  client::HttpClient http(serve.url());
  int accepted = 0, refused = 0;
  for (int i = 0; i < 40; ++i) {
    auto reply = http.request("POST", "/register_job", job.dump(), 30s);
    accepted += reply.status == 200;
    refused += reply.status == 503;
  }
  long peak = memory_kb(serve.pid, "VmHWM");
  std::cout << "40 bogus jobs of 131,072 ranks: " << accepted << " accepted, " << refused
            << " refused (503); server RSS " << before / 1024 << " MB before, peak " << peak / 1024 << " MB (growth "
            << (peak - before) / 1024 << " MB)\n";
  EXPECT_EQ(accepted + refused, 40);
  EXPECT_LE(peak - before, 200 * 1024) << "kB";
  EXPECT_EQ(http.request("GET", "/info", "", 5s).status, 200);
}

TEST(BoundsFaults, OnePeerCannotTakeEveryConnection) {
  auto dir = test_dir();
  ServeProcess serve(dir, "AllMaxFrequency", "{}", "--no-dump --max-connections-per-peer 20");
  ASSERT_NE(serve.port, 0);
  std::vector<int> hog;
  for (int i = 0; i < 60; ++i) hog.push_back(connect_from("127.0.0.1", serve.port));
  int closed = 0;
  for (int fd : hog) closed += fd >= 0 && closed_by_server(fd, 200ms);
  EXPECT_GE(closed, 40) << "all but 20 of one address's connections are closed";
  // Another address is served while the first holds its 20.
  int other = connect_from("127.0.0.2", serve.port);
  ASSERT_GE(other, 0);
  ASSERT_TRUE(send_all(other, "GET /info HTTP/1.1\r\nHost: x\r\n\r\n"));
  char head[16] = {};
  EXPECT_EQ(::recv(other, head, 12, 0), 12);
  EXPECT_EQ(std::string(head, 12), "HTTP/1.1 200");
  ::close(other);
  for (int fd : hog) ::close(fd);
  std::istringstream log(serve.log());
  int warnings = 0;
  for (std::string line; std::getline(log, line);)
    warnings += line.find("max_connections_per_peer") != std::string::npos;
  EXPECT_EQ(warnings, 1) << "one warning, not one per refused connection:\n" << serve.log();
}

// The per-address cap alone would let a host with many addresses (127.0.0.2, .3, ...) hold every
// descriptor. Idle connections are bounded in all, the longest idle closed to make room, so 12
// authenticated requests go through while idle sockets from many addresses keep coming. Randomized
// (how many sockets, from which addresses, between requests).
TEST(BoundsFaults, ManyAddressesCannotKeepAuthenticatedRequestsOut) {
  auto dir = test_dir();
  write_file_atomic(dir / "token", std::string(kToken) + "\n");
  ServeProcess serve(dir, "AllMaxFrequency", "{}", "--no-dump --token-file token", "ulimit -n 64;");
  ASSERT_NE(serve.port, 0);
  unsigned seed = std::random_device()();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  std::mt19937 random(seed);
  std::vector<int> idle;
  auto hold = [&](int count) {
    for (int i = 0; i < count; ++i) {
      std::string from = fmt::format("127.0.0.{}", std::uniform_int_distribution<int>(2, 9)(random));
      int fd = connect_from(from.c_str(), serve.port);
      if (fd >= 0) idle.push_back(fd);
    }
  };
  hold(150);  // from 8 addresses: far more than the server's 64 descriptors
  int ok = 0;
  for (int i = 0; i < 12; ++i) {
    hold(std::uniform_int_distribution<int>(5, 40)(random));
    try {
      client::HttpClient admin(serve.url(), kToken);
      ok += admin.request("GET", "/jobs", "", 5s).status == 200;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "authenticated request " << i << ": " << e.what();
    }
  }
  EXPECT_EQ(ok, 12) << serve.log();
  for (int fd : idle) ::close(fd);
  EXPECT_NE(serve.log().find("closing the longest idle"), std::string::npos) << serve.log();
}

// A result is bounded by the rank's registered schedule and --max-result-iterations: random results
// larger than that (too many iterations, more rows than iterations, more instructions or
// measurements per iteration than the schedule has, ~8 MiB of empty rows) are refused with 413
// naming the field, before they are held; 19 ranks' 8 MiB results leave the server's peak memory
// where it was; a result of the largest allowed shape completes its round, and the round's
// records stay within the documented size.
TEST(BoundsFaults, AResultLargerThanTheScheduleJustifiesIsRefusedBeforeItIsHeld) {
  auto dir = test_dir();
  ServeProcess serve(dir, "AllMaxFrequency", "{}", "--max-result-iterations 50");
  ASSERT_NE(serve.port, 0);
  unsigned seed = std::random_device()();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  std::mt19937 random(seed);
  constexpr int kRanks = 19;
  client::HttpClient http(serve.url());
  json job = {{"job_id", ""},         {"pp_degree", kRanks},  {"dp_degree", 1},    {"tp_degree", 1},
              {"world_size", kRanks}, {"framework", "x"},     {"model_name", "m"}, {"partition_method", "x"},
              {"microbatch_size", 1}, {"num_microbatches", 2}};
  std::string id = json::parse(http.request("POST", "/register_job", job.dump(), 10s).body).get<std::string>();
  const std::vector<std::string> schedule = {"forward", "forward", "backward", "backward"};
  for (int r = 0; r < kRanks; ++r) {
    json rank = {{"job_id", id},
                 {"rank", r},
                 {"dp_rank", 0},
                 {"pp_rank", r},
                 {"tp_rank", 0},
                 {"pipe_schedule", schedule},
                 {"power_state_range", {1410, 1200}}};
    ASSERT_EQ(http.request("POST", "/register_rank", rank.dump(), 10s).status, 200);
  }
  std::vector<std::future<client::HttpReply>> asks;
  for (int r = 0; r < kRanks; ++r)
    asks.push_back(std::async(std::launch::async, [&, r] {
      return client::HttpClient(serve.url())
          .request("GET", fmt::format("/schedule/{}?rank={}", client::encode_path_segment(id), r), "", 10s);
    }));
  for (auto& a : asks) ASSERT_EQ(a.get().status, 200);
  // A result of `iterations` iterations, each with `per` forward and backward measurements.
  auto result = [](int rank, int iterations, int per) {
    json r = {{"rank", rank}, {"iter_time", json::array()}, {"iter_energy", json::array()}};
    json rows = json::array();
    for (int i = 0; i < iterations; ++i) {
      r["iter_time"].push_back(1.0), r["iter_energy"].push_back(100.0);
      rows.push_back(std::vector<double>(static_cast<std::size_t>(per), 0.01));
    }
    r["time_breakdown"] = {{"forward", rows}, {"backward", rows}};
    r["energy_breakdown"] = {{"forward", rows}, {"backward", rows}};
    return r;
  };
  std::string path = "/result/" + client::encode_path_segment(id);
  for (int instance = 0; instance < 12; ++instance) {
    int kind = instance % 5;
    int rank = std::uniform_int_distribution<int>(0, kRanks - 1)(random);
    json body = result(rank, std::uniform_int_distribution<int>(1, 50)(random), 2);
    std::string field;
    if (kind == 0) {
      body = result(rank, std::uniform_int_distribution<int>(51, 400)(random), 2), field = "iter_time";
    } else if (kind == 1) {
      body["time_breakdown"]["forward"].push_back({0.01}), field = "time_breakdown.forward";
    } else if (kind == 2) {
      for (int n = 0; n < std::uniform_int_distribution<int>(17, 40)(random); ++n)
        body["energy_breakdown"][fmt::format("extra{}", n)] = json::array();
      field = "energy_breakdown";
    } else if (kind == 3) {
      int per = std::uniform_int_distribution<int>(11, 30)(random);  // 2 x per > 4 + 16
      body = result(rank, std::uniform_int_distribution<int>(1, 50)(random), per), field = "time_breakdown";
    } else {
      std::string rows;
      while (rows.size() < (8u << 20) - 200) rows += "[],";
      rows.pop_back();
      auto reply = http.request("POST", path,
                                fmt::format(R"({{"rank": {}, "iter_time": [1], "iter_energy": [1], )"
                                            R"("time_breakdown": {{"forward": [{}]}}}})",
                                            rank, rows),
                                10s);
      EXPECT_EQ(reply.status, 413) << reply.body.substr(0, 300);
      continue;
    }
    auto reply = http.request("POST", path, body.dump(), 10s);
    EXPECT_EQ(reply.status, 413) << "kind " << kind << ": " << reply.body.substr(0, 300);
    EXPECT_NE(reply.body.find("field '" + field), std::string::npos) << reply.body.substr(0, 300);
  }
  // 19 ranks' ~8 MiB results of empty rows, one after another: refused, and the server no bigger.
  long before = memory_kb(serve.pid, "VmHWM");
  std::string rows;
  while (rows.size() < (8u << 20) - 200) rows += "[],";
  rows.pop_back();
  for (int r = 0; r < kRanks; ++r) {
    auto reply = http.request(
        "POST", path,
        fmt::format(R"({{"rank": {}, "iter_time": [1], "iter_energy": [1], "time_breakdown": {{"forward": [{}]}}}})", r,
                    rows),
        10s);
    EXPECT_EQ(reply.status, 413);
  }
  long peak = memory_kb(serve.pid, "VmHWM");
  std::cout << kRanks << " results of ~8 MiB of empty rows: server peak RSS " << before / 1024 << " MB before, "
            << peak / 1024 << " MB after\n";
#ifndef PERSEUS_SANITIZED  // AddressSanitizer holds freed memory in its quarantine: the release build checks the bound
  EXPECT_LE(peak - before, 40 * 1024) << "kB";
#endif
  // The largest result the schedule allows goes through, and the round's records stay bounded.
  for (int r = 0; r < kRanks; ++r)
    ASSERT_EQ(http.request("POST", path, result(r, 50, 10).dump(), 10s).status, 200) << "rank " << r;
  fs::path prof = dir / "dump" / protocol::records_dir_name(id) / "0.prof.json";
  ASSERT_TRUE(eventually([&] { return fs::exists(prof); }, 10s));
  // stages x iterations x (measurements per iteration x 2 + 2) x ~20 bytes
  auto bound = static_cast<std::uintmax_t>(kRanks * 50 * (40 * 2 + 2) * 20);
  EXPECT_LE(fs::file_size(prof), bound);
}

TEST(BoundsFaults, IdleConnectionsAreClosedAfterTheIdleTimeout) {
  auto dir = test_dir();
  ServeProcess serve(dir, "AllMaxFrequency", "{}", "--no-dump --idle-timeout 0.3");
  ASSERT_NE(serve.port, 0);
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) idle.push_back(connect_from("127.0.0.1", serve.port));
  int closed = 0;
  for (int fd : idle) closed += fd >= 0 && closed_by_server(fd, 10s);
  EXPECT_EQ(closed, 100);
  for (int fd : idle) ::close(fd);
}

TEST(BoundsFaults, DurationsTooLongForTheClockAreAUsageError) {
  auto dir = test_dir();
  for (std::string flag : {"--round-timeout 1e10", "--job-retention 1e300", "--dead-rank-timeout 2e9"}) {
    // Accepted, the server would run on: `timeout` ends it (exit 124).
    std::string command = fmt::format("cd '{}' && timeout 10 {} serve --port 0 --no-dump {} > usage.out 2>&1",
                                      dir.string(), PERSEUS_BINARY, flag);
    int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << flag;
    EXPECT_EQ(WEXITSTATUS(status), 64) << flag << ": " << read_file(dir / "usage.out");
    EXPECT_NE(read_file(dir / "usage.out").find(flag.substr(0, flag.find(' '))), std::string::npos)
        << read_file(dir / "usage.out");
  }
}

}  // namespace
}  // namespace perseus::testing

namespace perseus::testing {
namespace {

// Sample lines of a Prometheus exposition whose value is not finite (a bucket's le="+Inf" label is fine).
std::vector<std::string> non_finite_samples(const std::string& exposition) {
  std::vector<std::string> out;
  std::istringstream lines(exposition);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::string value = line.substr(line.find_last_of(' ') + 1);
    if (value == "+Inf" || value == "-Inf" || value == "NaN") out.push_back(line);
  }
  return out;
}

// Results no GPU could measure, against a real `perseus serve`, at random: an iteration longer than
// a day (up to 1e308 s) or negative, an energy above a day at the most a GPU draws (up to 1e308 J),
// are refused with 422 naming the field before they reach the round; an average power above the
// GPU's maximum is taken as no measurement (a warning says so; the job's measured values leave it out). The rounds go
// on with the valid results, and no metric becomes infinite. PERSEUS_FAULT_INSTANCES sets how many (default 8).
TEST(BoundsFaults, ResultsNoGpuCouldMeasureAreRejectedAndNothingBecomesInfinite) {
  auto dir = test_dir();
  ServeProcess serve(dir, "AllMaxFrequency", "{}");
  ASSERT_NE(serve.port, 0);
  unsigned seed = std::random_device()();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  std::mt19937 random(seed);
  client::HttpClient http(serve.url());
  std::string id = json::parse(http.request("POST", "/register_job", job_body(1).dump(), 10s).body).get<std::string>();
  ASSERT_EQ(http.request("POST", "/register_rank", rank_body(id, 0, 0, {"forward", "backward"}).dump(), 10s).status,
            200);
  const std::string result_path = "/result/" + client::encode_path_segment(id);
  const std::string schedule_path = "/schedule/" + client::encode_path_segment(id) + "?rank=0";
  auto log_uniform = [&](double low, double high) {
    return std::exp(std::uniform_real_distribution<double>(std::log(low), std::log(high))(random));
  };
  int rounds = 0, no_measurement = 0;
  auto round = [&](const json& result) {
    EXPECT_EQ(http.request("GET", schedule_path, "", 10s).status, 200);
    auto reply = http.request("POST", result_path, result.dump(), 10s);
    rounds += reply.status == 200;
    return reply;
  };
  for (int instance = 0, count = fault_instances(8); instance < count; ++instance) {
    const int kind = instance % 4;
    json bad = result_body(0);
    std::string field;
    if (kind == 0) {
      double time = log_uniform(protocol::kMaxMeasuredSeconds * 1.0001, 1e308);
      bad["iter_time"][1] = time, field = "iter_time[1]";
    } else if (kind == 1) {
      bad["iter_time"][0] = -log_uniform(1e-9, 1e308), field = "iter_time[0]";
    } else if (kind == 2) {
      bad["iter_energy"][0] = log_uniform(protocol::kMaxMeasuredJoules * 1.0001, 1e308), field = "iter_energy[0]";
    } else {
      // Plausible values, but 1 s at more than any GPU's maximum power.
      bad["iter_energy"] = {log_uniform(protocol::kMaxPlausibleGpuPowerW * protocol::kPowerSlack * 1.01, 1e6), 100.0};
    }
    SCOPED_TRACE(fmt::format("instance {}: {}", instance, bad.dump().substr(0, 120)));
    EXPECT_EQ(http.request("GET", schedule_path, "", 10s).status, 200);
    auto reply = http.request("POST", result_path, bad.dump(), 10s);
    if (kind < 3) {
      EXPECT_EQ(reply.status, 422) << reply.body;
      EXPECT_NE(reply.body.find("field '" + field + "'"), std::string::npos) << reply.body;
      EXPECT_EQ(http.request("POST", result_path, result_body(0).dump(), 10s).status, 200);
    } else {
      EXPECT_EQ(reply.status, 200) << reply.body;
      ++no_measurement;
      EXPECT_TRUE(eventually(
          [&] {
            return serve.log().find(fmt::format("round {} rejected, it is no measurement", rounds)) !=
                   std::string::npos;
          },
          5s))
          << serve.log();
      json measured =
          json::parse(http.request("GET", "/jobs/" + client::encode_path_segment(id), "", 10s).body)["measured"];
      EXPECT_EQ(measured["energy"], 100.0) << "the rejected result was counted: " << measured.dump();
      round(result_body(0));  // a valid round between rejected ones: the job goes on
    }
    ++rounds;
  }
  json status = json::parse(http.request("GET", "/jobs/" + client::encode_path_segment(id), "", 10s).body);
  EXPECT_EQ(status["round"].get<int>(), rounds) << status.dump();
  EXPECT_TRUE(non_finite_samples(http.request("GET", "/metrics", "", 10s).body).empty())
      << fmt::format("{}", fmt::join(non_finite_samples(http.request("GET", "/metrics", "", 10s).body), "\n"));
  std::printf("%d rounds: %d results refused, %d taken as no measurement\n", rounds,
              fault_instances(8) - no_measurement, no_measurement);
  serve.stop(SIGTERM);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace perseus::testing
