// `perseus gpud` in-process on the fake NVML: requests are validated, a GPU has one owner at a
// time, and whatever a connection set is reset when it closes.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "perseus/client/client.hpp"
#include "perseus/gpu/backends.hpp"
#include "perseus/gpud/client.hpp"
#include "perseus/gpud/daemon.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/util/error.hpp"
#include "server_fixture.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using gpu::GpuError;
using gpu::GpuErrorKind;

struct GpudTest : ::testing::Test {
  fs::path dir = fs::temp_directory_path() / ("perseus-gpud-" + std::to_string(::getpid()) + "-" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::string socket = (dir / "gpud.sock").string();
  std::shared_ptr<gpu::GpuLibrary> nvml =
      gpu::load_nvml(PERSEUS_FAKE_NVML);  // the same simulated GPU the daemon drives
  boost::asio::io_context io;
  std::unique_ptr<gpud::Daemon> daemon;
  std::thread thread;

  void SetUp() override {
    fs::remove_all(dir);
    start();
  }
  // A server that runs forwards at 1200 MHz and backwards at 1005 MHz.
  static server::ServerSettings two_frequencies() {
    server::ServerSettings s;
    s.scheduler = "TwoFrequencies";
    s.scheduler_args = {{"forward_freq", 1200}, {"backward_freq", 1005}};
    s.dump_data = false;
    return s;
  }
  // A one-microbatch rank of that server, through this test's daemon.
  client::ClientOptions client_options(const std::string& url) const {
    client::ClientOptions o;
    o.server_url = url;
    o.num_microbatches = 1;
    o.gpud_socket = socket;
    return o;
  }
  void start(gpud::DaemonOptions options = {}) {
    options.socket_path = socket;
    daemon = std::make_unique<gpud::Daemon>(io, nvml, options);
    thread = std::thread([this] { io.run(); });
  }
  void stop() {
    if (!daemon) return;
    boost::asio::post(io, [this] {
      daemon->stop();
      io.stop();
    });
    thread.join();
    daemon.reset();
    io.restart();
  }
  void TearDown() override {
    stop();
    fs::remove_all(dir);
  }

  // Waits (up to 2 s) for the daemon to have handled a disconnect.
  unsigned graphics_clock_soon(unsigned expected) {
    unsigned clock = 0;
    for (int i = 0; i < 200 && (clock = nvml->current_graphics_clock(0)) != expected; ++i)
      std::this_thread::sleep_for(10ms);
    return clock;
  }

  int raw_connect() {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strcpy(address.sun_path, socket.c_str());
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    return fd;
  }

  // Sends raw bytes on a fresh connection and returns the first reply line ("" when it closed).
  std::string raw_exchange(const std::string& bytes) {
    int fd = raw_connect();
    EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
    std::string reply;
    char c = 0;
    while (::recv(fd, &c, 1, 0) == 1 && c != '\n') reply.push_back(c);
    ::close(fd);
    return reply;
  }
};

GpuErrorKind kind_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const GpuError& e) {
    return e.kind();
  }
  ADD_FAILURE() << "expected a GpuError";
  return GpuErrorKind::other;
}

TEST_F(GpudTest, ReadsAndChangesTheGpuThroughTheSocket) {
  auto g = gpud::connect(socket);
  EXPECT_EQ(g->device_count(), 1u);
  EXPECT_EQ(g->name(0), nvml->name(0));
  EXPECT_EQ(g->supported_memory_clocks(0), (std::vector<unsigned>{1593, 1215}));
  EXPECT_EQ(g->supported_graphics_clocks(0, 1593).front(), 1410u);
  g->lock_graphics_clock(0, 1200, 1200);
  EXPECT_EQ(nvml->current_graphics_clock(0), 1200u);
  EXPECT_EQ(g->current_graphics_clock(0), 1200u);
  g->set_power_limit_mw(0, 300000);
  EXPECT_EQ(g->power_limit_mw(0), 300000u);
  EXPECT_EQ(g->power_limit_range(0).max_mw, 400000u);
  auto before = g->total_energy_mj(0);
  std::this_thread::sleep_for(5ms);
  EXPECT_GT(g->total_energy_mj(0), before);
  g->reset_graphics_clock(0);
  EXPECT_EQ(nvml->current_graphics_clock(0), 1410u);
}

TEST_F(GpudTest, RequestsAreValidated) {
  auto g = gpud::connect(socket);
  EXPECT_EQ(kind_of([&] { g->lock_graphics_clock(0, 1201, 1201); }), GpuErrorKind::invalid_argument);  // not a step
  EXPECT_EQ(kind_of([&] { g->lock_graphics_clock(0, 1410, 1200); }), GpuErrorKind::invalid_argument);  // min > max
  EXPECT_EQ(kind_of([&] { g->lock_memory_clock(0, 1000, 1000); }), GpuErrorKind::invalid_argument);
  EXPECT_EQ(kind_of([&] { g->set_power_limit_mw(0, 500000); }), GpuErrorKind::invalid_argument);
  EXPECT_EQ(kind_of([&] { g->current_graphics_clock(3); }), GpuErrorKind::invalid_argument);
  try {
    g->lock_graphics_clock(0, 1201, 1201);
  } catch (const GpuError& e) {
    EXPECT_NE(std::string(e.what()).find("does not support a graphics clock of 1201 MHz"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(nvml->current_graphics_clock(0), 1410u) << "a refused request changes nothing";
  // Not a perseus client: a clear error, and the daemon keeps serving.
  EXPECT_NE(raw_exchange("hello\n").find("malformed request"), std::string::npos);
  EXPECT_NE(raw_exchange("{\"op\": \"format_disk\", \"device\": 0}\n").find("unknown operation 'format_disk'"),
            std::string::npos);
  EXPECT_NE(raw_exchange("{\"op\": \"name\", \"device\": -1}\n").find("field 'device'"), std::string::npos);
  EXPECT_NE(raw_exchange(std::string(10000, 'x')).find("longer than 4096 bytes"), std::string::npos);
  EXPECT_EQ(g->device_count(), 1u);
}

TEST_F(GpudTest, AGpuHasOneOwnerUntilItsConnectionCloses) {
  auto first = gpud::connect(socket);
  auto second = gpud::connect(socket);
  first->lock_graphics_clock(0, 1200, 1200);
  try {
    second->lock_graphics_clock(0, 1005, 1005);
    ADD_FAILURE() << "a second owner must be refused";
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), GpuErrorKind::busy);
    EXPECT_NE(std::string(e.what()).find(fmt::format("owned by another process (pid {}", ::getpid())),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(second->current_graphics_clock(0), 1200u) << "reading is free for all";
  first.reset();  // the owner goes away: what it set is undone, and the GPU is free
  EXPECT_EQ(graphics_clock_soon(1410), 1410u);
  second->lock_graphics_clock(0, 1005, 1005);
  EXPECT_EQ(nvml->current_graphics_clock(0), 1005u);
}

TEST_F(GpudTest, EverythingAConnectionSetIsResetWhenItCloses) {
  {
    auto g = gpud::connect(socket);
    g->lock_graphics_clock(0, 1005, 1005);
    g->lock_memory_clock(0, 1215, 1215);
    g->set_power_limit_mw(0, 200000);
  }
  EXPECT_EQ(graphics_clock_soon(1410), 1410u);
  unsigned memory = 0;
  for (int i = 0; i < 200 && (memory = nvml->current_memory_clock(0)) != 1593; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(memory, 1593u);
  EXPECT_EQ(nvml->power_limit_mw(0), 400000u);

  // A limit an administrator set before is what comes back, not the maximum.
  nvml->set_power_limit_mw(0, 350000);
  {
    auto g = gpud::connect(socket);
    g->set_power_limit_mw(0, 200000);
    g->set_power_limit_mw(0, 250000);
  }
  unsigned limit = 0;
  for (int i = 0; i < 200 && (limit = nvml->power_limit_mw(0)) != 350000; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(limit, 350000u);
  nvml->set_power_limit_mw(0, 400000);
}

TEST_F(GpudTest, ALiveDaemonOnTheSocketIsNotReplaced) {
  boost::asio::io_context other;
  try {
    gpud::Daemon second(other, nvml, gpud::DaemonOptions{socket, 0660, ""});
    ADD_FAILURE() << "a second daemon on a live socket must refuse to start";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already listening"), std::string::npos) << e.what();
  }
  EXPECT_EQ(gpud::connect(socket)->device_count(), 1u) << "the first daemon still serves";
}

TEST_F(GpudTest, NoDaemonIsAClearError) {
  try {
    gpud::connect((dir / "nothing.sock").string());
    ADD_FAILURE();
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), GpuErrorKind::library_missing);
    EXPECT_NE(std::string(e.what()).find("is `perseus gpud` running on this node?"), std::string::npos);
  }
}

// The training client through the daemon: the schedule's clocks reach the GPU, and a second rank
// pointed at the same GPU is refused at start (perseus off for it, with the reason), not silently
// fighting over the clock.
TEST_F(GpudTest, TheClientAppliesItsScheduleThroughTheDaemon) {
  TestServer server(two_frequencies());
  client::ClientOptions o = client_options(server.url);
  o.report_every = 1;
  o.fail_open = false;
  client::Client c(o);
  c.on_step_begin();
  c.on_instruction_begin("forward");
  c.flush();
  EXPECT_EQ(nvml->current_graphics_clock(0), 1200u);
  c.on_instruction_end("forward");
  c.on_instruction_begin("backward");
  c.flush();
  EXPECT_EQ(nvml->current_graphics_clock(0), 1005u);
  c.on_instruction_end("backward");
  c.on_step_end();

  auto second = o;
  try {
    client::Client other(second);
    ADD_FAILURE() << "a second client on the same GPU must be refused";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("owned by another process"), std::string::npos) << e.what();
  }
  c.close();
  EXPECT_EQ(nvml->current_graphics_clock(0), 1410u);
}

// Whatever bytes a line holds, the reply is one valid JSON line and the daemon goes on serving
// (an error that quotes invalid UTF-8, or cuts a name inside a character, included).
TEST_F(GpudTest, AnyRequestLineGetsAValidReplyAndTheDaemonServesOn) {
  const std::string deep(3000, '[');
  for (const std::string& line :
       {std::string("\xff"), "{\"op\":\"" + std::string(99, 'x') + "\xC3\xA9\"}", std::string("{\"op\": \"\xff\"}"),
        "{\"op\": \"name\", \"device\": " + deep + "}", deep, std::string("{\"op\": \"name\", \"device\": \"\xC3\"}"),
        std::string("\x00\x01\x02"), std::string("{\"op\":\"set_power_limit\",\"device\":0,\"mw\":{}}")}) {
    std::string reply = raw_exchange(line + "\n");
    ASSERT_FALSE(reply.empty()) << "no reply to " << line.substr(0, 40);
    auto parsed = nlohmann::json::parse(reply);  // throws, failing the test, when not JSON
    EXPECT_EQ(parsed["ok"], false);
    EXPECT_EQ(parsed["kind"], "invalid_argument");
    EXPECT_LT(reply.size(), 1200u);
  }
  EXPECT_EQ(gpud::connect(socket)->device_count(), 1u);
}

TEST_F(GpudTest, AnIdleConnectionThatOwnsNothingIsClosedAnOwnerIsKept) {
  stop();
  gpud::DaemonOptions options;
  options.idle_timeout = 50ms;
  start(options);
  auto owner = gpud::connect(socket);
  owner->lock_graphics_clock(0, 1200, 1200);
  int idle = raw_connect();
  char c = 0;
  EXPECT_EQ(::recv(idle, &c, 1, 0), 0) << "the daemon closes a connection that sends nothing";
  ::close(idle);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(owner->current_graphics_clock(0), 1200u) << "an owner's connection lives as long as the rank";
  EXPECT_EQ(nvml->current_graphics_clock(0), 1200u);
}

TEST_F(GpudTest, TheSocketPathMustBeASocketAndNothingIsLeftBehindOnAFailedStart) {
  stop();
  write_file_atomic(socket, "precious data\n");
  try {
    start();
    ADD_FAILURE() << "a regular file must not be replaced";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_setting);
    EXPECT_NE(std::string(e.what()).find("exists and is not a socket"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(socket), "precious data\n");
  fs::remove(socket);
  gpud::DaemonOptions options;
  options.socket_group = "no-such-group-perseus";
  try {
    start(options);
    ADD_FAILURE() << "an unknown group must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no such group"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(fs::symlink_status(socket))) << "the socket of a daemon that did not start is removed";
  start();  // a stale socket (a daemon that died) is still replaced
  stop();
  EXPECT_FALSE(fs::exists(socket));
}

// The daemon restarts under a connected client: its next call connects again and first sets again
// what it had set (the new daemon reset the GPU when it started), so the rank goes on where it was.
TEST_F(GpudTest, AClientReconnectsToARestartedDaemonAndSetsItsClocksAgain) {
  auto g = gpud::connect(socket, 2s);
  g->lock_memory_clock(0, 1215, 1215);
  g->lock_graphics_clock(0, 1200, 1200);
  stop();
  EXPECT_EQ(nvml->current_graphics_clock(0), 1410u) << "the stopping daemon reset the GPU";
  try {
    g->total_energy_mj(0);
    ADD_FAILURE() << "no daemon: the call fails";
  } catch (const GpuError& e) {
    EXPECT_NE(std::string(e.what()).find("(reconnecting: cannot connect"), std::string::npos) << e.what();
  }
  try {  // until the next attempt is due, a call fails without trying (nothing waits on a daemon that is away)
    g->total_energy_mj(0);
    ADD_FAILURE() << "no daemon: the call fails";
  } catch (const GpuError& e) {
    EXPECT_EQ(std::string(e.what()).find("cannot connect"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(reconnecting)"), std::string::npos) << e.what();
  }
  start();
  bool back = false;
  for (int i = 0; i < 300 && !back; ++i) {
    try {
      g->total_energy_mj(0);
      back = true;
    } catch (const GpuError&) {
      std::this_thread::sleep_for(10ms);
    }
  }
  ASSERT_TRUE(back) << "the client did not reconnect within 3 s";
  EXPECT_EQ(nvml->current_graphics_clock(0), 1200u) << "its clock lock is set again";
  EXPECT_EQ(nvml->current_memory_clock(0), 1215u);
  g->reset_graphics_clock(0);
  EXPECT_EQ(nvml->current_graphics_clock(0), 1410u);
  // Restarted again between two calls: the call itself reconnects and succeeds.
  g->lock_graphics_clock(0, 1005, 1005);
  stop();
  start();
  EXPECT_EQ(g->current_graphics_clock(0), 1005u);
  try {  // the new connection owns the GPU again: another process is refused
    gpud::connect(socket)->lock_graphics_clock(0, 1200, 1200);
    ADD_FAILURE();
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), GpuErrorKind::busy);
  }
}

// The training client on a restarted daemon: perseus stays on, the next instructions' clocks
// reach the GPU, and the iterations measured while the daemon was away are dropped, not sent in part.
TEST_F(GpudTest, TheClientGoesOnApplyingClocksAfterTheDaemonRestarts) {
  TestServer server(two_frequencies());
  client::ClientOptions o = client_options(server.url);
  o.report_every = 100;
  o.fail_open = false;
  client::Client c(o);
  auto step = [&](unsigned* forward_clock) {
    c.on_step_begin();
    c.on_instruction_begin("forward");
    c.flush();
    if (forward_clock) *forward_clock = nvml->current_graphics_clock(0);
    c.on_instruction_end("forward");
    c.on_instruction_begin("backward");
    c.on_instruction_end("backward");
    c.on_step_end();
    c.flush();
  };
  unsigned clock = 0;
  step(&clock);
  EXPECT_EQ(clock, 1200u);
  stop();
  step(nullptr);  // the daemon is away: nothing applied, nothing measured
  start();
  std::this_thread::sleep_for(1100ms);  // the client's next attempt
  step(&clock);
  EXPECT_EQ(clock, 1200u) << "the rank applies clocks again";
  EXPECT_TRUE(c.enabled());
  c.close();
  EXPECT_EQ(graphics_clock_soon(1410), 1410u);
}

// The daemon on AMD SMI (the fake AMD SMI shows the same simulated GPU): the daemon and the
// client are the same code whatever the backend; `nvml` here is the AMD SMI backend.
struct GpudOnAmdSmiTest : GpudTest {
  GpudOnAmdSmiTest() { nvml = gpu::load_gpu_library("amdsmi", PERSEUS_FAKE_AMDSMI); }
};

TEST_F(GpudOnAmdSmiTest, ChangesTheGpuAndResetsItWhenTheConnectionCloses) {
  {
    auto g = gpud::connect(socket);
    EXPECT_EQ(g->supported_graphics_clocks(0, 1593).size(), 81u);
    g->lock_graphics_clock(0, 1005, 1005);
    g->lock_memory_clock(0, 1215, 1215);
    g->set_power_limit_mw(0, 200000);
    EXPECT_EQ(nvml->current_graphics_clock(0), 1005u);
    EXPECT_EQ(g->power_limit_mw(0), 200000u);
    EXPECT_EQ(kind_of([&] { g->lock_graphics_clock(0, 1201, 1201); }), GpuErrorKind::invalid_argument);
  }
  EXPECT_EQ(graphics_clock_soon(1410), 1410u);
  EXPECT_EQ(nvml->current_memory_clock(0), 1593u);
  EXPECT_EQ(nvml->power_limit_mw(0), 400000u);
}

TEST_F(GpudOnAmdSmiTest, TheClientAppliesItsScheduleThroughTheDaemon) {
  TestServer server(two_frequencies());
  client::ClientOptions o = client_options(server.url);
  o.fail_open = false;
  client::Client c(o);
  c.on_step_begin();
  for (const char* name : {"forward", "backward"}) {
    c.on_instruction_begin(name);
    c.flush();
    EXPECT_EQ(nvml->current_graphics_clock(0), std::string(name) == "forward" ? 1200u : 1005u) << name;
    c.on_instruction_end(name);
  }
  c.on_step_end();
  c.close();
  EXPECT_EQ(graphics_clock_soon(1410), 1410u);
}

}  // namespace
}  // namespace perseus::testing
