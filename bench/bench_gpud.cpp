// Clock changes through `perseus gpud` (one request/reply over its Unix socket) against calling
// the NVML library directly, and the training-thread hook when the client goes through the
// daemon: the hook only enqueues, so it must stay as cheap as without it. The daemon runs on its
// own thread here, as it runs in its own process on a node; the fake NVML answers at once, so the
// numbers are the daemon's own overhead.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "perseus/client/client.hpp"
#include "perseus/gpud/client.hpp"
#include "perseus/gpud/daemon.hpp"
#include "perseus/server/http_server.hpp"

namespace {

using namespace perseus;
using SteadyClock = std::chrono::steady_clock;

struct Daemon {
  Daemon() {
    std::filesystem::remove(socket);
    daemon = std::make_unique<gpud::Daemon>(io, nvml, gpud::DaemonOptions{socket, 0600, ""});
    thread = std::thread([this] { io.run(); });
  }
  ~Daemon() {
    boost::asio::post(io, [this] {
      daemon->stop();
      io.stop();
    });
    thread.join();
  }
  std::string socket = (std::filesystem::temp_directory_path() / "perseus-bench-gpud.sock").string();
  std::shared_ptr<gpu::GpuLibrary> nvml = gpu::load_nvml(PERSEUS_FAKE_NVML);
  boost::asio::io_context io;
  std::unique_ptr<gpud::Daemon> daemon;
  std::thread thread;
};

Daemon& daemon() {
  static Daemon d;
  return d;
}

// Per-call latencies, reported as p50 and p99 counters (microseconds).
void percentiles(benchmark::State& state, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[us.size() * 99 / 100];
}

void clock_changes(benchmark::State& state, gpu::GpuLibrary& g) {
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(state.max_iterations));
  unsigned n = 0;
  for (auto _ : state) {
    unsigned clock = ++n % 2 == 0 ? 1200u : 1005u;
    auto start = SteadyClock::now();
    g.lock_graphics_clock(0, clock, clock);
    double took = std::chrono::duration<double>(SteadyClock::now() - start).count();
    state.SetIterationTime(took);
    us.push_back(took * 1e6);
  }
  percentiles(state, us);
}

void BM_ClockChangeThroughGpud(benchmark::State& state) {
  auto g = gpud::connect(daemon().socket);
  clock_changes(state, *g);
}
BENCHMARK(BM_ClockChangeThroughGpud)->UseManualTime()->Iterations(20000);

void BM_ClockChangeDirect(benchmark::State& state) { clock_changes(state, *daemon().nvml); }
BENCHMARK(BM_ClockChangeDirect)->UseManualTime()->Iterations(20000);

// The training client with gpud_socket set: on_instruction_begin still only enqueues.
void BM_OnInstructionBeginThroughGpud(benchmark::State& state) {
  boost::asio::io_context io;
  server::ServerSettings settings;
  settings.scheduler = "TwoFrequencies";
  settings.scheduler_args = {{"forward_freq", 1200}, {"backward_freq", 1005}};
  settings.dump_data = false;
  server::JobManager jobs(boost::asio::make_strand(io), settings,
                          server::configure_scheduler(settings.scheduler, settings.scheduler_args));
  server::HttpServer http(io, jobs, "127.0.0.1", 0);
  std::thread thread([&] { io.run(); });
  {
    client::ClientOptions o;
    o.server_url = "http://127.0.0.1:" + std::to_string(http.port());
    o.num_microbatches = 1 << 20;
    o.report_every = 1 << 30;
    o.gpud_socket = daemon().socket;
    o.fail_open = false;
    client::Client c(o);
    c.on_step_begin();
    std::vector<double> us;
    us.reserve(static_cast<std::size_t>(state.max_iterations));
    std::int64_t n = 0;
    for (auto _ : state) {
      const char* name = n % 2 == 0 ? "forward" : "backward";
      auto start = SteadyClock::now();
      c.on_instruction_begin(name);
      double took = std::chrono::duration<double>(SteadyClock::now() - start).count();
      state.SetIterationTime(took);
      us.push_back(took * 1e6);
      c.on_instruction_end(name);
      if (++n % 64 == 0) c.flush();
    }
    percentiles(state, us);
  }
  io.stop();
  thread.join();
}
BENCHMARK(BM_OnInstructionBeginThroughGpud)->UseManualTime()->Iterations(20000);

}  // namespace

BENCHMARK_MAIN();
