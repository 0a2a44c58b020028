// `perseus gpud --metrics-address`: the exposition text is well formed (parsed strictly here), shows
// exactly the GPU a client locked and owns, counts the reset when that client goes, keeps serving
// whatever requests it gets, and leaves out only what it could not read.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>

#include <fmt/format.h>

#include "perseus/client/http_client.hpp"
#include "perseus/gpud/client.hpp"
#include "perseus/gpud/metrics_endpoint.hpp"
#include "perseus/util/error.hpp"
#include "process_fixture.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;

// The exposition text, parsed strictly: every line is a HELP, a TYPE or a sample; each family has
// HELP then TYPE (gauge or counter, counters named *_total) once, before its samples; names carry
// the perseus_gpud_ prefix; label values are quoted with the format's escapes; values are numbers.
// A line that breaks any of these fails the test.
struct Exposition {
  std::map<std::string, double> series;  // "name{labels}" -> value
  std::map<std::string, std::string> types;

  explicit Exposition(const std::string& text) {
    static const std::regex help(R"(# HELP (perseus_gpud_[a-z_]+) \S.*)");
    static const std::regex type(R"(# TYPE (perseus_gpud_[a-z_]+) (gauge|counter))");
    static const std::regex sample(
        R"((perseus_gpud_[a-z_]+)(\{[a-z_]+="(?:[^"\\\n]|\\[\\"n])*"(?:,[a-z_]+="(?:[^"\\\n]|\\[\\"n])*")*\})? (\S+))");
    EXPECT_TRUE(!text.empty() && text.back() == '\n') << "the text ends with a newline";
    std::string helped;  // the family whose HELP came last
    std::set<std::string> done;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_match(line, m, help)) {
        EXPECT_TRUE(done.insert(m[1]).second) << "family declared twice: " << line;
        helped = m[1];
      } else if (std::regex_match(line, m, type)) {
        EXPECT_EQ(m[1], helped) << "TYPE without its HELP: " << line;
        types[m[1]] = m[2];
        EXPECT_EQ(m[2] == "counter", std::string(m[1]).ends_with("_total")) << "counters and only they end in _total";
      } else if (std::regex_match(line, m, sample)) {
        EXPECT_TRUE(types.count(m[1])) << "sample before its TYPE: " << line;
        std::string value = m[3];
        std::size_t used = 0;
        double number = 0;
        try {
          number = std::stod(value, &used);
        } catch (const std::exception&) {}
        EXPECT_EQ(used, value.size()) << "not a number: " << line;
        std::string key = std::string(m[1]) + std::string(m[2]);
        EXPECT_TRUE(series.emplace(key, number).second) << "sample repeated: " << line;
      } else {
        ADD_FAILURE() << "malformed line: '" << line << "'";
      }
    }
  }

  // The sample of `name` for GPU `gpu`, if there is one.
  std::optional<double> gpu(const std::string& name, unsigned gpu) const {
    std::optional<double> found;
    std::string prefix = fmt::format("{}{{gpu=\"{}\",", name, gpu);
    for (const auto& [key, value] : series)
      if (key.starts_with(prefix)) found = value;
    return found;
  }
  std::optional<double> plain(const std::string& key) const {
    auto it = series.find(key);
    return it == series.end() ? std::nullopt : std::optional<double>(it->second);
  }
};

// Sends `bytes` on a fresh connection to 127.0.0.1:port and returns all it answers until it closes.
std::string raw_http(int port, const std::string& bytes) {
  int fd = connect_to(port);
  if (fd < 0) return "";
  timeval timeout{10, 0};  // a hang fails the test instead of hanging it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::string out;
  char chunk[4096];
  for (ssize_t n; (n = ::recv(fd, chunk, sizeof chunk, 0)) > 0;) out.append(chunk, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

// `perseus gpud --metrics-address 127.0.0.1:0` on the fake NVML with two GPUs, as a process.
struct GpudMetricsProcess : ::testing::Test {
  fs::path dir = test_dir();
  std::string socket = (dir / "gpud.sock").string();
  pid_t pid = -1;
  int port = 0;

  void SetUp() override {
    pid = spawn(dir,
                fmt::format("env PERSEUS_FAKE_NVML_GPUS=2 {} gpud --socket {} --nvml {} --metrics-address 127.0.0.1:0",
                            PERSEUS_BINARY, socket, PERSEUS_FAKE_NVML),
                "gpud");
    const std::string marker = "metrics on http://127.0.0.1:";
    ASSERT_TRUE(eventually([&] { return read_if_exists(dir / "gpud.out").find(marker) != std::string::npos; }))
        << read_if_exists(dir / "gpud.err");
    std::string out = read_file(dir / "gpud.out");
    port = std::stoi(out.substr(out.find(marker) + marker.size()));
  }
  void TearDown() override {
    if (pid > 0) ::kill(pid, SIGTERM);
    EXPECT_TRUE(eventually([&] { return !ServeProcess::alive(pid); }));
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }

  Exposition scrape() {
    client::HttpClient http(fmt::format("http://127.0.0.1:{}", port));
    auto reply = http.request("GET", "/metrics", "", std::chrono::seconds(10));
    EXPECT_EQ(reply.status, 200) << reply.body;
    return Exposition(reply.body);
  }
};

TEST_F(GpudMetricsProcess, ShowExactlyTheLockedGpuAndItsResetWhenTheClientGoes) {
  Exposition before = scrape();
  EXPECT_EQ(before.plain("perseus_gpud_gpus"), 2.0);
  for (unsigned g : {0u, 1u}) {
    EXPECT_EQ(before.gpu("perseus_gpud_gpu_owned", g), 0.0);
    EXPECT_EQ(before.gpu("perseus_gpud_resets_total", g), 0.0);
  }
  EXPECT_EQ(before.types.at("perseus_gpud_energy_joules_total"), "counter");

  auto client = gpud::connect(socket);
  client->lock_graphics_clock(1, 1200, 1200);
  Exposition locked = scrape();
  EXPECT_EQ(locked.plain("perseus_gpud_locked_graphics_clock_megahertz{gpu=\"1\",uuid=\"GPU-fa4e0000-0000-4000-8000-"
                         "000000000001\"}"),
            1200.0)
      << "labelled with the GPU's index and UUID";
  EXPECT_EQ(locked.gpu("perseus_gpud_locked_graphics_clock_megahertz", 0), std::nullopt) << "GPU 0 is not locked";
  EXPECT_EQ(locked.gpu("perseus_gpud_graphics_clock_locked", 1), 1.0);
  EXPECT_EQ(locked.gpu("perseus_gpud_graphics_clock_locked", 0), 0.0);
  EXPECT_EQ(locked.gpu("perseus_gpud_gpu_owned", 1), 1.0);
  EXPECT_EQ(locked.gpu("perseus_gpud_gpu_owned", 0), 0.0);
  EXPECT_EQ(locked.gpu("perseus_gpud_graphics_clock_megahertz", 1), 1200.0);
  EXPECT_EQ(locked.gpu("perseus_gpud_graphics_clock_megahertz", 0), 1410.0);
  // The fake GPU draws 60 + 240 (f / 1410)^3 W: 300 W at the top clock, less at 1200 MHz.
  EXPECT_EQ(locked.gpu("perseus_gpud_power_watts", 0), 300.0);
  EXPECT_LT(locked.gpu("perseus_gpud_power_watts", 1).value_or(1e9), 210.0);
  EXPECT_EQ(locked.gpu("perseus_gpud_power_limit_watts", 1), 400.0);
  EXPECT_GE(locked.gpu("perseus_gpud_energy_joules_total", 0).value_or(-1),
            before.gpu("perseus_gpud_energy_joules_total", 0).value_or(1e18));
  EXPECT_EQ(locked.plain("perseus_gpud_connections"), 1.0);
  EXPECT_EQ(locked.plain("perseus_gpud_requests_total{op=\"lock_graphics_clock\",outcome=\"ok\"}"), 1.0);

  client.reset();  // the owner disconnects: the daemon resets GPU 1
  std::optional<Exposition> after;
  EXPECT_TRUE(eventually([&] {
    after.emplace(scrape());
    return after->gpu("perseus_gpud_gpu_owned", 1) == 0.0;
  }));
  EXPECT_EQ(after->gpu("perseus_gpud_locked_graphics_clock_megahertz", 1), std::nullopt);
  EXPECT_EQ(after->gpu("perseus_gpud_graphics_clock_locked", 1), 0.0);
  EXPECT_EQ(after->gpu("perseus_gpud_graphics_clock_megahertz", 1), 1410.0);
  EXPECT_EQ(after->gpu("perseus_gpud_resets_total", 1), 1.0);
  EXPECT_EQ(after->gpu("perseus_gpud_resets_total", 0), 0.0);
  EXPECT_EQ(after->plain("perseus_gpud_connections"), 0.0);
}

TEST_F(GpudMetricsProcess, AnythingButGetMetricsIsRefusedAndItServesOn) {
  std::string ok = raw_http(port, "GET /metrics?probe=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(ok.starts_with("HTTP/1.1 200")) << ok.substr(0, 200);
  EXPECT_NE(ok.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"), std::string::npos);

  std::string post =
      raw_http(port, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
  EXPECT_TRUE(post.starts_with("HTTP/1.1 405")) << post.substr(0, 200);
  EXPECT_NE(post.find("Allow: GET, HEAD\r\n"), std::string::npos);
  std::string missing = raw_http(port, "GET /jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(missing.starts_with("HTTP/1.1 404")) << missing.substr(0, 200);
  std::string garbage = raw_http(port, "hello there\r\n\r\n");
  EXPECT_TRUE(garbage.starts_with("HTTP/1.1 400")) << garbage.substr(0, 200);
  std::string huge = raw_http(port, "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n");
  EXPECT_TRUE(huge.starts_with("HTTP/1.1 431")) << huge.substr(0, 200);
  std::string body =
      raw_http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + std::string(100000, 'b'));
  EXPECT_TRUE(body.starts_with("HTTP/1.1 413")) << body.substr(0, 200);

  Exposition still = scrape();
  EXPECT_EQ(still.plain("perseus_gpud_gpus"), 2.0);
  EXPECT_TRUE(ServeProcess::alive(pid));
}

TEST_F(GpudMetricsProcess, ScrapeConnectionsAreCappedAndFreedWhenTheyClose) {
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(connect_to(port));  // the most it keeps open (MetricsLimits)
  std::string refused = raw_http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(refused, "") << "a ninth connection is closed unanswered";
  for (int fd : idle) ::close(fd);
  EXPECT_TRUE(eventually([&] {
    return raw_http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").starts_with("HTTP/1.1 200");
  }));
}

// The parser above is what makes the tests strict: it must reject what Prometheus would.
TEST(GpudMetricsText, TheTestsParserRejectsMalformedExpositions) {
  const std::string family = "# HELP perseus_gpud_x X.\n# TYPE perseus_gpud_x gauge\n";
  EXPECT_NONFATAL_FAILURE(Exposition("perseus_gpud_x 1\n"), "sample before its TYPE");
  EXPECT_NONFATAL_FAILURE(Exposition(family + "perseus_gpud_x{gpu=0} 1\n"), "malformed line");
  EXPECT_NONFATAL_FAILURE(Exposition(family + "perseus_gpud_x{gpu=\"0\"} 1 2\n"), "malformed line");
  EXPECT_NONFATAL_FAILURE(Exposition(family + "perseus_gpud_x 1.5W\n"), "not a number");
  EXPECT_NONFATAL_FAILURE(Exposition(family + "perseus_gpud_x 1\nperseus_gpud_x 2\n"), "sample repeated");
  EXPECT_NONFATAL_FAILURE(Exposition("# HELP perseus_gpud_n N.\n# TYPE perseus_gpud_n counter\n"), "end in _total");
  EXPECT_NONFATAL_FAILURE(Exposition(family + family), "declared twice");
  EXPECT_NONFATAL_FAILURE(Exposition(family + "perseus_gpud_x 1"), "ends with a newline");
}

// A GPU library whose every read works except GPU 1's power draw, and which fails the test if
// anything tries to change a GPU.
class OneFailingRead final : public gpu::GpuLibrary {
 public:
  unsigned device_count() override { return 2; }
  std::string name(unsigned) override { return "Stub \"GPU\""; }
  std::vector<unsigned> supported_memory_clocks(unsigned) override { return {1593}; }
  std::vector<unsigned> supported_graphics_clocks(unsigned, unsigned) override { return {1410}; }
  unsigned current_graphics_clock(unsigned) override { return 1410; }
  unsigned current_memory_clock(unsigned) override { return 1593; }
  void lock_graphics_clock(unsigned, unsigned, unsigned) override { ADD_FAILURE() << "metrics changed a clock"; }
  void reset_graphics_clock(unsigned) override { ADD_FAILURE() << "metrics reset a clock"; }
  void lock_memory_clock(unsigned, unsigned, unsigned) override { ADD_FAILURE() << "metrics changed a clock"; }
  void reset_memory_clock(unsigned) override { ADD_FAILURE() << "metrics reset a clock"; }
  unsigned power_limit_mw(unsigned) override { return 250500; }
  gpu::PowerLimitRange power_limit_range(unsigned) override { return {100000, 400000}; }
  void set_power_limit_mw(unsigned, unsigned) override { ADD_FAILURE() << "metrics changed a power limit"; }
  std::uint64_t total_energy_mj(unsigned device) override { return 1234567 + device; }
  unsigned power_usage_mw(unsigned device) override {
    if (device == 1)
      throw gpu::GpuError(gpu::GpuErrorKind::other, "nvmlDeviceGetPowerUsage on GPU 1 failed: GPU is lost");
    return 123456;
  }
};

TEST(GpudMetricsText, AFailedReadLeavesOutThatSampleOnlyAndIsCountedNotRepeatedInTheLog) {
  OneFailingRead gpu;
  gpud::DaemonStats stats;
  stats.gpus.resize(2);
  stats.gpus[0].locked_graphics_mhz = 1005;
  stats.gpus[0].owned = true;
  stats.gpus[0].resets = 3;
  auto labels = gpud::gpu_labels(gpu, 2);  // no UUID from this library: its name, escaped
  EXPECT_EQ(labels[1], R"(gpu="1",uuid="Stub \"GPU\"")");
  gpud::ReadFailures failures;
  Exposition first(gpud::render_metrics(stats, gpu, labels, failures));
  EXPECT_EQ(first.gpu("perseus_gpud_power_watts", 0), 123.456);
  EXPECT_EQ(first.gpu("perseus_gpud_power_watts", 1), std::nullopt);
  EXPECT_EQ(first.gpu("perseus_gpud_energy_joules_total", 1), 1234.568);
  EXPECT_EQ(first.gpu("perseus_gpud_power_limit_watts", 1), 250.5);
  EXPECT_EQ(first.gpu("perseus_gpud_locked_graphics_clock_megahertz", 0), 1005.0);
  EXPECT_EQ(first.gpu("perseus_gpud_gpu_owned", 0), 1.0);
  EXPECT_EQ(first.gpu("perseus_gpud_resets_total", 0), 3.0);
  EXPECT_EQ(first.plain("perseus_gpud_gpu_read_failures_total"), 1.0);
  Exposition second(gpud::render_metrics(stats, gpu, labels, failures));
  EXPECT_EQ(second.plain("perseus_gpud_gpu_read_failures_total"), 2.0);
  EXPECT_EQ(failures.failing, std::set<std::string>{"GPU 1 power"}) << "one failing read, logged once";
}

TEST(GpudMetricsText, TheAddressIsAPortOnLoopbackOrHostAndPort) {
  auto port_only = gpud::parse_metrics_address("9400");
  EXPECT_EQ(port_only.host, "127.0.0.1");
  EXPECT_EQ(port_only.port, 9400);
  auto any = gpud::parse_metrics_address("0.0.0.0:1");
  EXPECT_EQ(any.host, "0.0.0.0");
  EXPECT_FALSE(gpud::is_loopback(any.host));
  auto v6 = gpud::parse_metrics_address("[::1]:9400");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_TRUE(gpud::is_loopback(v6.host));
  for (const char* bad : {"", "localhost:9400", "::1:9400", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:-1", "x"}) {
    try {
      gpud::parse_metrics_address(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("metrics_address '", 0), 0u) << e.what();
      EXPECT_EQ(e.settings(), std::vector<std::string>{"metrics_address"}) << e.what();
      EXPECT_EQ(e.kind(), ErrorKind::bad_setting);
    }
  }
}

}  // namespace
}  // namespace perseus::testing
