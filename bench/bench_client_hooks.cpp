// Cost of the training-thread hooks: on_instruction_begin/end only enqueue for the controller
// thread, so they must stay in the microseconds even when every NVML call is slow. The fake
// NVML is told to take 200 us per clock change (PERSEUS_FAKE_NVML_LATENCY_US), like a real
// driver; the hooks must not notice.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <boost/asio/strand.hpp>
#include <thread>

#include "perseus/client/client.hpp"
#include "perseus/server/http_server.hpp"

namespace {

using namespace perseus;

// One in-process server with TwoFrequencies, so that consecutive instructions change clocks.
struct Fixture {
  Fixture() {
    ::setenv("PERSEUS_FAKE_NVML_LATENCY_US", "200", 1);
    server::ServerSettings settings;
    settings.scheduler = "TwoFrequencies";
    settings.scheduler_args = {{"forward_freq", 1200}, {"backward_freq", 1005}};
    settings.dump_data = false;
    jobs =
        std::make_unique<server::JobManager>(boost::asio::make_strand(io), settings,
                                             server::configure_scheduler(settings.scheduler, settings.scheduler_args));
    http = std::make_unique<server::HttpServer>(io, *jobs, "127.0.0.1", 0);
    thread = std::thread([this] { io.run(); });
    client::ClientOptions o;
    o.server_url = "http://127.0.0.1:" + std::to_string(http->port());
    o.num_microbatches = 1 << 20;  // one endless iteration: no round boundary inside the loop
    o.report_every = 1 << 30;
    o.nvml_library = PERSEUS_FAKE_NVML;
    o.fail_open = false;
    c = std::make_unique<client::Client>(o);
  }
  ~Fixture() {
    c.reset();
    io.stop();
    thread.join();
  }
  boost::asio::io_context io;
  std::unique_ptr<server::JobManager> jobs;
  std::unique_ptr<server::HttpServer> http;
  std::thread thread;
  std::unique_ptr<client::Client> c;
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

// Timed by hand around the call alone (PauseTiming costs more than the call itself); the other
// hooks run between calls so that every begin changes the clock.
void BM_OnInstructionBegin(benchmark::State& state) {
  auto& c = *fixture().c;
  c.on_step_begin();
  std::int64_t n = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    c.on_instruction_begin(n % 2 == 0 ? "forward" : "backward");
    auto stop = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(stop - start).count());
    c.on_instruction_end(n % 2 == 0 ? "forward" : "backward");
    if (++n % 64 == 0) c.flush();  // keep the queue short, as real instructions would
  }
}
BENCHMARK(BM_OnInstructionBegin)->UseManualTime()->Iterations(20000);

// Begin and end of a forward and a backward: what one microbatch costs the training thread.
void BM_HooksPerMicrobatch(benchmark::State& state) {
  auto& c = *fixture().c;
  c.on_step_begin();
  std::int64_t n = 0;
  for (auto _ : state) {
    c.on_instruction_begin("forward");
    c.on_instruction_end("forward");
    c.on_instruction_begin("backward");
    c.on_instruction_end("backward");
    if (++n % 64 == 0) {
      state.PauseTiming();
      c.flush();
      state.ResumeTiming();
    }
  }
}
BENCHMARK(BM_HooksPerMicrobatch)->Iterations(20000);

}  // namespace

BENCHMARK_MAIN();
