// The training-side client against an in-process server and the fake NVML: which clock each
// instruction gets, what is measured and reported, and that problems never stop training.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <future>
#include <optional>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <fmt/format.h>

#include "perseus/client/client.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/util/error.hpp"
#include "server_fixture.hpp"

namespace perseus::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct ClientTest : ServerDirTest {
  client::ClientOptions options(const std::string& url, std::shared_ptr<gpu::GpuLibrary> gpu) {
    client::ClientOptions o;
    o.server_url = url;
    o.num_microbatches = 2;
    o.report_every = 2;
    o.gpu = std::move(gpu);
    o.fail_open = false;
    return o;
  }
};

TEST_F(ClientTest, EachInstructionRunsAtItsScheduledClock) {
  TestServer server(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1005}}));
  std::shared_ptr<gpu::GpuLibrary> gpu = gpu::load_nvml(PERSEUS_FAKE_NVML);
  {
    client::Client c(options(server.url, gpu));
    EXPECT_EQ(c.pipe_schedule(),
              (std::vector<std::string>{"forward", "backward", "forward", "backward"}));  // 1F1B, one stage
    EXPECT_EQ(gpu->current_memory_clock(0), 1593u);  // memory clock locked at its top
    for (int step = 0; step < 2; ++step) {
      c.on_step_begin();
      for (const auto& name : c.pipe_schedule()) {
        c.on_instruction_begin(name);
        c.flush();
        EXPECT_EQ(gpu->current_graphics_clock(0), name == "forward" ? 1200u : 1005u) << name;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        c.on_instruction_end(name);
      }
      c.on_step_end();
    }
    EXPECT_EQ(c.round(), 1);
  }
  // Clocks are reset when the client goes away.
  EXPECT_EQ(gpu->current_graphics_clock(0), 1410u);

  ASSERT_TRUE(server.jobs->flush_records(std::chrono::seconds(10)));  // records are written on their own thread
  fs::path prof;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.path().filename() == "0.prof.json") prof = entry.path();
  ASSERT_FALSE(prof.empty());
  json result = json::parse(read_file(prof))[0];
  ASSERT_EQ(result["iter_time"].size(), 2u);
  ASSERT_EQ(result["time_breakdown"]["forward"].size(), 2u);
  ASSERT_EQ(result["time_breakdown"]["forward"][0].size(), 2u);
  double forward_time = result["time_breakdown"]["forward"][1][0].get<double>();
  double forward_energy = result["energy_breakdown"]["forward"][1][0].get<double>();
  EXPECT_GE(forward_time, 0.004);
  EXPECT_GT(forward_energy, 0.0);
  EXPECT_LT(forward_energy / forward_time, 300.0 * 1.5);  // below the fake's top power, with rounding slack
  EXPECT_GE(result["iter_time"][0].get<double>(), 4 * 0.005);
}

// A GPU applies a locked clock some time after the call: the client reads the clock back when the
// instruction it was locked for ends and reports the changes that had not taken effect by then.
TEST_F(ClientTest, ClocksThatHadNotTakenEffectByTheEndOfTheirInstructionAreReported) {
  for (const char* latency_us : {"0", "200000"}) {
    TestServer server(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1005}}));
    ::setenv("PERSEUS_FAKE_NVML_CLOCK_LATENCY_US", latency_us, 1);
    std::shared_ptr<gpu::GpuLibrary> gpu = gpu::load_nvml(PERSEUS_FAKE_NVML);
    ::unsetenv("PERSEUS_FAKE_NVML_CLOCK_LATENCY_US");
    {
      client::Client c(options(server.url, gpu));
      for (int step = 0; step < 2; ++step) {
        c.on_step_begin();
        for (const auto& name : c.pipe_schedule()) {
          c.on_instruction_begin(name);
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          c.on_instruction_end(name);
        }
        c.on_step_end();
      }
      ASSERT_TRUE(c.wait_for_server(std::chrono::seconds(10)));
    }
    ASSERT_TRUE(server.jobs->flush_records(std::chrono::seconds(10)));
    json result;
    for (const auto& entry : fs::recursive_directory_iterator(dir))
      if (entry.path().filename() == "0.prof.json") result = json::parse(read_file(entry.path()))[0];
    ASSERT_TRUE(result.is_object()) << latency_us;
    EXPECT_EQ(result.value("clock_changes", 0), 8) << latency_us;  // every forward and backward changes it
    EXPECT_EQ(result.value("clocks_late", 0), std::string(latency_us) == "0" ? 0 : 8) << latency_us;
    fs::remove_all(dir);
  }
}

// Waits (bounded) until the GPU's power limit is `mw`, flushing what the client has queued.
bool power_limit_becomes(client::Client& c, gpu::GpuLibrary& gpu, unsigned mw) {
  for (int i = 0; i < 500; ++i) {
    c.flush();
    if (gpu.power_limit_mw(0) == mw) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST_F(ClientTest, APowerBudgetsLimitReachesTheGpuWithinARoundAndTheGpusOwnLimitComesBack) {
  auto s = settings();
  s.power_budget_w = 1;  // out of any job's reach: the backstop's limit, at the GPU's lowest
  TestServer server(s);
  std::shared_ptr<gpu::GpuLibrary> gpu = gpu::load_nvml(PERSEUS_FAKE_NVML);
  const unsigned before = gpu->power_limit_mw(0), lowest = gpu->power_limit_range(0).min_mw;
  ASSERT_NE(before, lowest);
  {
    auto o = options(server.url, gpu);
    o.heartbeat_interval = std::chrono::milliseconds(20);
    client::Client c(o);
    EXPECT_TRUE(power_limit_becomes(c, *gpu, lowest)) << "with the first schedule, never below the GPU's minimum";
    // Lifted through the API: back to the GPU's own limit between round boundaries (the heartbeat's answer).
    EXPECT_EQ(server.call("PUT", "/power_budget", R"({"watts": null})").status, 200);
    EXPECT_TRUE(power_limit_becomes(c, *gpu, before));
    EXPECT_EQ(server.call("PUT", "/power_budget", R"({"watts": 1, "seconds": 0})").status, 200);
    EXPECT_TRUE(power_limit_becomes(c, *gpu, lowest)) << "within a round: no step ran meanwhile";
    c.on_step_begin();
    for (const auto& name : c.pipe_schedule()) c.on_instruction_begin(name), c.on_instruction_end(name);
    c.on_step_end();
  }
  EXPECT_EQ(gpu->power_limit_mw(0), before) << "the client's end restores the GPU's own limit";
}

TEST_F(ClientTest, APowerBudgetsLimitKeepsAnAdministratorsLimitAndRestoresIt) {
  auto s = settings();
  s.power_budget_w = 1;  // out of any job's reach: the backstop's limit, at the GPU's lowest
  TestServer server(s);
  std::shared_ptr<gpu::GpuLibrary> gpu = gpu::load_nvml(PERSEUS_FAKE_NVML);
  const unsigned factory = gpu->power_limit_mw(0), lowest = gpu->power_limit_range(0).min_mw;
  const unsigned admin = lowest + (factory - lowest) / 2;  // an administrator's cap below the default
  gpu->set_power_limit_mw(0, admin);
  {
    auto o = options(server.url, gpu);
    o.heartbeat_interval = std::chrono::milliseconds(20);
    client::Client c(o);
    EXPECT_TRUE(power_limit_becomes(c, *gpu, lowest));
    EXPECT_EQ(server.call("PUT", "/power_budget", R"({"watts": null})").status, 200);
    EXPECT_TRUE(power_limit_becomes(c, *gpu, admin)) << "lifted: the administrator's limit, not the default";
    EXPECT_EQ(server.call("PUT", "/power_budget", R"({"watts": 1, "seconds": 0})").status, 200);
    EXPECT_TRUE(power_limit_becomes(c, *gpu, lowest));
  }
  EXPECT_EQ(gpu->power_limit_mw(0), admin) << "the client's end restores the limit it found";
  gpu->set_power_limit_mw(0, factory);
}

TEST_F(ClientTest, AnUnreachableServerDisablesPerseusButNotTraining) {
  std::shared_ptr<gpu::GpuLibrary> gpu = gpu::load_nvml(PERSEUS_FAKE_NVML);
  auto o = options("http://127.0.0.1:1", gpu);
  o.fail_open = true;
  o.retry_for = std::chrono::milliseconds(0);  // no waiting for it to come up
  client::Client c(o);
  EXPECT_FALSE(c.enabled());
  c.on_step_begin();  // the hooks do nothing
  c.on_instruction_begin("forward");
  c.on_instruction_end("forward");
  c.on_step_end();
  o.fail_open = false;
  EXPECT_THROW(client::Client strict(o), Error);
}

// A rank that cannot start perseus (here: rank 0 cannot reach the server) must still take part in
// the job-id broadcast, or the other ranks wait in it forever. The broadcast below gives up after
// 10 s so that the test fails instead of hanging when that is broken.
TEST_F(ClientTest, ARankThatFailsAtStartStillTakesPartInTheJobIdBroadcast) {
  TestServer server(settings("AllMaxFrequency"));
  std::promise<std::string> sent;
  std::shared_future<std::string> received = sent.get_future().share();
  std::optional<std::string> rank1_got;
  auto o = options(server.url, gpu::load_nvml(PERSEUS_FAKE_NVML));
  o.fail_open = true;
  o.world_size = o.pp_degree = 2;
  auto rank0 = o, rank1 = o;
  rank0.server_url = "http://127.0.0.1:1";
  rank0.retry_for = std::chrono::milliseconds(0);  // gives up at once
  rank0.broadcast_job_id = [&](const std::string& id) {
    sent.set_value(id);
    return id;
  };
  rank1.rank = rank1.pp_rank = 1;
  rank1.broadcast_job_id = [&](const std::string&) {
    if (received.wait_for(std::chrono::seconds(10)) != std::future_status::ready) return std::string("timed-out");
    rank1_got = received.get();
    return *rank1_got;
  };
  std::thread other([&] {
    client::Client c(rank1);
    EXPECT_FALSE(c.enabled());  // no job to join: perseus off, training on
  });
  client::Client c(rank0);
  other.join();
  EXPECT_FALSE(c.enabled());
  ASSERT_TRUE(rank1_got.has_value()) << "rank 1 waited in the broadcast for a rank 0 that never sent";
  EXPECT_EQ(*rank1_got, "");
}

// The job-id broadcast of two ranks' clients in one process: what rank 0 sends (kept in `value`)
// reaches rank 1, which gives up after 10 s, so that a broken broadcast fails the test instead of
// hanging it.
struct Broadcast {
  std::promise<std::string> sent;
  std::shared_future<std::string> received = sent.get_future().share();
  std::string value;
  void connect(client::ClientOptions& rank0, client::ClientOptions& rank1) {
    rank0.broadcast_job_id = [this](const std::string& id) {
      value = id;
      sent.set_value(id);
      return id;
    };
    rank1.broadcast_job_id = [this](const std::string&) {
      return received.wait_for(std::chrono::seconds(10)) == std::future_status::ready ? received.get() : std::string();
    };
  }
};

TEST_F(ClientTest, RankZeroRegistersWithASecretThatTravelsWithTheJobIdToEveryRank) {
  TestServer server(settings("AllMaxFrequency"));
  auto o = options(server.url, gpu::load_nvml(PERSEUS_FAKE_NVML));
  o.world_size = o.pp_degree = 2;
  auto rank0 = o, rank1 = o;
  rank1.rank = rank1.pp_rank = 1;
  Broadcast broadcast;
  broadcast.connect(rank0, rank1);
  const std::string& shared = broadcast.value;
  std::unique_ptr<client::Client> c1;
  std::thread other([&] { c1 = std::make_unique<client::Client>(rank1); });  // both meet at the first barrier
  client::Client c0(rank0);
  other.join();
  ASSERT_TRUE(c1 && c1->enabled());
  ASSERT_EQ(c0.job_secret().size(), 32u);
  EXPECT_EQ(shared, c0.job_id() + "\n" + c0.job_secret());
  EXPECT_EQ(c1->job_id(), c0.job_id());
  EXPECT_EQ(c1->job_secret(), c0.job_secret());
  // Another process cannot change the job without it, and can with it.
  client::HttpClient other_process(server.url);
  std::string target = "/heartbeat/" + client::encode_path_segment(c0.job_id());
  EXPECT_EQ(other_process.request("POST", target, R"({"rank": 0, "progress": 1})", std::chrono::seconds(5)).status,
            403);
  other_process.set_job_secret(c0.job_secret());
  EXPECT_EQ(other_process.request("POST", target, R"({"rank": 0, "progress": 1})", std::chrono::seconds(5)).status,
            200);
}

// Runs one iteration of `names`, returning the GPU clock each instruction ran at.
std::vector<unsigned> run_iteration(client::Client& c, gpu::GpuLibrary& gpu, const std::vector<std::string>& names) {
  std::vector<unsigned> clocks;
  c.on_step_begin();
  for (const auto& name : names) {
    c.on_instruction_begin(name);
    c.flush();
    clocks.push_back(gpu.current_graphics_clock(0));
    c.on_instruction_end(name);
  }
  c.on_step_end();
  return clocks;
}

// A port nothing listens on (yet).
unsigned short unused_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return acceptor.local_endpoint().port();
}

// Ranks started before the server (a job script that starts both at once) train at default clocks
// without waiting; once the server is up, the job registers in the background (rank 0 could not
// reach the server, so both ranks hold the secret it shared and whichever comes first registers
// the one job) and the ranks get its schedules.
TEST_F(ClientTest, ClientsStartedBeforeTheServerRegisterOnceItIsUpAndGetSchedules) {
  const unsigned short port = unused_port();
  std::shared_ptr<gpu::GpuLibrary> gpu = gpu::load_nvml(PERSEUS_FAKE_NVML);
  auto o = options(fmt::format("http://127.0.0.1:{}", port), gpu);
  o.fail_open = true;
  o.world_size = o.dp_degree = 2;  // two data-parallel ranks: each runs both instructions
  o.report_every = 1;
  o.heartbeat_interval = std::chrono::milliseconds(0);
  auto rank0 = o, rank1 = o;
  rank1.rank = rank1.dp_rank = 1;
  Broadcast broadcast;
  broadcast.connect(rank0, rank1);
  const std::string& shared = broadcast.value;
  std::unique_ptr<client::Client> c1;
  std::thread other([&] { c1 = std::make_unique<client::Client>(rank1); });
  client::Client c0(rank0);
  other.join();
  ASSERT_TRUE(c1);
  EXPECT_TRUE(c0.enabled() && c1->enabled()) << "not given up: the server may still come";
  EXPECT_EQ(c0.job_id(), "");
  ASSERT_EQ(shared.size(), 33u) << "no job id yet, then the secret rank 0 made: " << shared;
  EXPECT_EQ(shared[0], '\n');
  for (int i = 0; i < 2; ++i) {  // training runs, at default clocks
    EXPECT_EQ(run_iteration(c0, *gpu, c0.pipe_schedule()), (std::vector<unsigned>{1410, 1410, 1410, 1410}));
    run_iteration(*c1, *gpu, c1->pipe_schedule());
  }

  TestServer server(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1005}}), "", {}, {}, port);
  std::vector<unsigned> clocks;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       std::chrono::steady_clock::now() < until && clocks != std::vector<unsigned>{1200, 1005, 1200, 1005};) {
    clocks = run_iteration(c0, *gpu, c0.pipe_schedule());
    run_iteration(*c1, *gpu, c1->pipe_schedule());
    c0.wait_for_server(std::chrono::milliseconds(200));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // its retries back off from 0.5 s
  }
  EXPECT_EQ(clocks, (std::vector<unsigned>{1200, 1005, 1200, 1005})) << "the job's schedule, once registered";
  ASSERT_FALSE(c0.job_id().empty());
  EXPECT_EQ(c1->job_id(), c0.job_id());
  EXPECT_EQ(c0.job_secret(), shared.substr(1));
  json jobs = json::parse(server.call("GET", "/jobs").body);
  ASSERT_EQ(jobs.size(), 1u) << jobs.dump();
  EXPECT_EQ(jobs[0]["registered"], 2);
  EXPECT_TRUE(c0.enabled() && c1->enabled());
}

// An order other than the registered one would give instructions other instructions' clocks
// silently (here F,F,B,B against F,B,F,B would run the second forward at the backward's slot's
// clock). The rank warns once and stays at default clocks, still in every round.
TEST_F(ClientTest, AnOrderOtherThanThePipeScheduleKeepsTheRankAtDefaultClocks) {
  TestServer server(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1005}}));
  std::shared_ptr<gpu::GpuLibrary> gpu = gpu::load_nvml(PERSEUS_FAKE_NVML);
  client::Client c(options(server.url, gpu));
  ASSERT_EQ(c.pipe_schedule(), (std::vector<std::string>{"forward", "backward", "forward", "backward"}));
  EXPECT_EQ(run_iteration(c, *gpu, {"forward", "forward", "backward", "backward"}),
            (std::vector<unsigned>{1200, 1410, 1410, 1410}));
  // The right order again: still default clocks (one warning, no flip-flopping), and the rank
  // keeps taking part in rounds.
  EXPECT_EQ(run_iteration(c, *gpu, {"forward", "backward", "forward", "backward"}),
            (std::vector<unsigned>{1410, 1410, 1410, 1410}));
  EXPECT_TRUE(c.enabled());
  EXPECT_EQ(c.round(), 1);
}

TEST_F(ClientTest, FewerOrMoreInstructionsThanRegisteredAreAMismatchToo) {
  TestServer server(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1005}}));
  std::shared_ptr<gpu::GpuLibrary> gpu = gpu::load_nvml(PERSEUS_FAKE_NVML);
  {
    auto o = options(server.url, gpu);
    o.strict_schedule = true;
    client::Client c(o);
    c.on_step_begin();
    c.on_instruction_begin("forward");
    c.on_instruction_end("forward");
    try {
      c.on_step_end();
      ADD_FAILURE() << "an iteration of 1 of 4 instructions must be refused in strict mode";
    } catch (const client::ScheduleMismatch& e) {
      EXPECT_NE(std::string(e.what()).find("it ran 1 of the 4 registered instructions"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(c.enabled());
    EXPECT_EQ(gpu->current_graphics_clock(0), 1410u);
  }
  {
    auto o = options(server.url, gpu);
    o.strict_schedule = true;
    client::Client c(o);
    c.on_step_begin();
    for (const auto& name : c.pipe_schedule()) {
      c.on_instruction_begin(name);
      c.on_instruction_end(name);
    }
    c.on_instruction_begin("optimizer_step");  // not in pipe_schedule: measured, clock untouched
    c.on_instruction_end("optimizer_step");
    try {
      c.on_instruction_begin("forward");
      ADD_FAILURE() << "a fifth instruction must be refused in strict mode";
    } catch (const client::ScheduleMismatch& e) {
      EXPECT_NE(std::string(e.what()).find("instruction 5 is 'forward', past the 4 registered"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("registered: forward,backward,forward,backward"), std::string::npos);
    }
  }
}

// A server that goes away must not disable perseus at the first refused connection: training
// continues at the current schedule while the client retries for
// retry_for, and only then gives up (here: raises, since fail_open is off).
TEST_F(ClientTest, AServerThatGoesAwayIsRetriedForAWhileAndTrainingContinues) {
  std::shared_ptr<gpu::GpuLibrary> gpu = gpu::load_nvml(PERSEUS_FAKE_NVML);
  auto server =
      std::make_unique<TestServer>(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1005}}));
  auto o = options(server->url, gpu);
  o.report_every = 1;
  o.retry_for = std::chrono::minutes(10);
  client::Client patient(o);
  o.retry_for = std::chrono::milliseconds(0);
  client::Client impatient(o);  // a second job on the same fake GPU: fine for this test
  server.reset();
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(run_iteration(patient, *gpu, patient.pipe_schedule()), (std::vector<unsigned>{1200, 1005, 1200, 1005}))
        << "the schedule it had keeps running";
  EXPECT_TRUE(patient.enabled());
  try {
    // The round's end hands the result over; the exchange thread finds no server and gives up,
    // which a step end says (this one, or the next).
    run_iteration(impatient, *gpu, impatient.pipe_schedule());
    EXPECT_TRUE(impatient.wait_for_server(std::chrono::seconds(10)));
    run_iteration(impatient, *gpu, impatient.pipe_schedule());
    ADD_FAILURE() << "with retry_for 0 the first unreachable round boundary gives up";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the server was unreachable"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(impatient.enabled());
}

TEST_F(ClientTest, TheTokenOptionOrPerseusTokenReachesAServerThatRequiresOne) {
  const std::string token = "0123456789abcdef-token";
  TestServer server(settings("AllMaxFrequency"), token);
  std::shared_ptr<gpu::GpuLibrary> gpu = gpu::load_nvml(PERSEUS_FAKE_NVML);
  auto o = options(server.url, gpu);
  try {
    client::Client c(o);
    ADD_FAILURE() << "without the token the server must refuse";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HTTP 401"), std::string::npos) << e.what();
  }
  o.token = token;
  {
    client::Client c(o);
    EXPECT_TRUE(c.enabled());
  }
  o.token = "";
  ::setenv("PERSEUS_TOKEN", token.c_str(), 1);
  {
    client::Client c(o);
    EXPECT_TRUE(c.enabled());
  }
  ::unsetenv("PERSEUS_TOKEN");
}

TEST_F(ClientTest, ProfilingDoneStopsTraining) {
  fs::create_directories(dir / "plans");
  write_file_atomic(dir / "plans" / "a.py", "[[1200, 1200, 1005, 1005]]\n");
  TestServer server(settings("PointSolution", {{"solution_path", (dir / "plans").string()}, {"warmup_iters", 0}}));
  std::shared_ptr<gpu::GpuLibrary> gpu = gpu::load_nvml(PERSEUS_FAKE_NVML);
  client::Client c(options(server.url, gpu));
  EXPECT_EQ(c.schedule(), (std::vector<int>{1200, 1200, 1005, 1005}));
  EXPECT_EQ(run_iteration(c, *gpu, c.pipe_schedule()), (std::vector<unsigned>{1200, 1200, 1005, 1005}));
  run_iteration(c, *gpu, c.pipe_schedule());  // the round ends; the server's answer comes in the background
  EXPECT_TRUE(c.wait_for_server(std::chrono::seconds(10)));
  EXPECT_THROW(run_iteration(c, *gpu, c.pipe_schedule()), client::ProfilingDone);
  EXPECT_FALSE(c.enabled());
  EXPECT_EQ(gpu->current_graphics_clock(0), 1410u);
}

// The schedule barrier needs every rank; here rank 1 stops taking part after the first round (its
// process hangs, say). Rank 0's training must not wait for it: its round boundaries return at once,
// it keeps the schedule it has, and its rounds without a new schedule are reported to nobody. Once
// rank 1 comes back, the barrier completes and rank 0 takes the new schedule at a round boundary.
TEST_F(ClientTest, TrainingNeverWaitsAtTheBarrier) {
  TestServer server(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1005}}));
  std::shared_ptr<gpu::GpuLibrary> gpu = gpu::load_nvml(PERSEUS_FAKE_NVML);
  auto o = options(server.url, gpu);
  o.world_size = o.pp_degree = 2;
  o.num_microbatches = 2;
  std::promise<std::string> id;
  std::shared_future<std::string> shared = id.get_future().share();
  auto rank0 = o, rank1 = o;
  rank0.broadcast_job_id = [&](const std::string& value) {
    id.set_value(value);
    return value;
  };
  rank1.rank = rank1.pp_rank = 1;
  rank1.broadcast_job_id = [&](const std::string&) { return shared.get(); };
  std::unique_ptr<client::Client> c1;
  std::thread other([&] { c1 = std::make_unique<client::Client>(rank1); });
  client::Client c0(rank0);
  other.join();
  ASSERT_EQ(c0.pipe_schedule(), (std::vector<std::string>{"forward", "forward", "backward", "backward"}));
  ASSERT_EQ(c0.schedule(), (std::vector<int>{1200, 1200, 1005, 1005}));
  for (int i = 0; i < 2 + 3 * 3; ++i)  // 4 rounds (the later ones begin with a switch-over iteration)
    EXPECT_EQ(run_iteration(c0, *gpu, c0.pipe_schedule()), (std::vector<unsigned>{1200, 1200, 1005, 1005}));
  EXPECT_TRUE(c0.enabled());
  EXPECT_EQ(c0.round(), 4);
  auto server_round = [&] { return json::parse(server.call("GET", "/jobs/" + c0.job_id()).body)["round"].get<int>(); };
  EXPECT_EQ(server_round(), 0) << "round 0 waits for rank 1's result";
  for (int i = 0; i < 2; ++i) {  // rank 1 ends its round: every rank asked, the barrier completes
    c1->on_step_begin();
    for (const auto& name : c1->pipe_schedule()) {
      c1->on_instruction_begin(name);
      c1->on_instruction_end(name);
    }
    c1->on_step_end();
  }
  EXPECT_TRUE(c0.wait_for_server(std::chrono::seconds(10)));
  EXPECT_TRUE(c1->wait_for_server(std::chrono::seconds(10)));
  EXPECT_EQ(server_round(), 1);
  EXPECT_EQ(run_iteration(c0, *gpu, c0.pipe_schedule()), (std::vector<unsigned>{1200, 1200, 1005, 1005}));
  EXPECT_TRUE(c0.enabled());
}

// A process forked from a training rank (a data-loader worker, say) inherits the rank's signal
// handlers; its end must leave alone the GPU its parent is still training on.
TEST_F(ClientTest, AForkedChildsSignalLeavesItsParentsClocksAlone) {
  TestServer server(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1005}}));
  fs::create_directories(dir);
  fs::path log = dir / "nvml.log";
  ::setenv("PERSEUS_FAKE_NVML_LOG", log.c_str(), 1);
  std::shared_ptr<gpu::GpuLibrary> gpu = gpu::load_nvml(PERSEUS_FAKE_NVML);
  ::unsetenv("PERSEUS_FAKE_NVML_LOG");
  client::Client c(options(server.url, gpu));
  c.on_step_begin();
  c.on_instruction_begin("forward");
  c.flush();
  ASSERT_EQ(gpu->current_graphics_clock(0), 1200u);
  auto resets = [&] {
    std::string text = read_file(log);
    std::size_t count = 0;
    for (auto at = text.find("ResetGpuLockedClocks"); at != std::string::npos;
         at = text.find("ResetGpuLockedClocks", at + 1))
      ++count;
    return count;
  };
  std::size_t before = resets();
  pid_t child = ::fork();
  if (child == 0) {
    ::raise(SIGTERM);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "the child ends of its signal";
  EXPECT_EQ(resets(), before) << "the child reset its parent's GPU";
  EXPECT_EQ(gpu->current_graphics_clock(0), 1200u);
  c.on_instruction_end("forward");
  c.on_step_end();
}

}  // namespace
}  // namespace perseus::testing
