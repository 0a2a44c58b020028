// A pretend training rank for the end-to-end tests: runs 1F1B iterations through
// perseus::client::Client on the fake NVML. Each forward/backward does a fixed amount of
// "work" whose speed follows the fake GPU's current clock, so lower clocks take longer, as on
// a real GPU. Ranks learn the job id through a file that rank 0 writes (the test's stand-in
// for torch.distributed's broadcast).
//
// fake_trainer --server URL --rank R --stages S --microbatches M --iterations N
//              --report-every K --job-id-file PATH [--forward-ms F] [--backward-ms B]
//              [--fail-open 0|1] [--heartbeat-ms MS] [--hang-at-iteration I]
//              (through perseus gpud when $PERSEUS_GPUD_SOCKET is set)
// Exit: 0 after N iterations, 3 when the server said [profiling-done], 1 on error.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "perseus/client/client.hpp"
#include "perseus/gpud/client.hpp"
#include "perseus/util/atomic_file.hpp"

namespace {

std::string arg(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name) return argv[i + 1];
  return fallback;
}

// "Work" of `ms` milliseconds at the top clock, stretched by top/current clock. Progress counts
// the time that actually passed (a loaded machine oversleeps), so the stretch stays exact.
void work(perseus::gpu::GpuLibrary& gpu, double ms) {
  double remaining = ms / 1000.0;
  auto last = std::chrono::steady_clock::now();
  while (remaining > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(remaining, 0.0002)));
    auto now = std::chrono::steady_clock::now();
    unsigned clock = 1410;
    try {
      clock = gpu.current_graphics_clock(0);
    } catch (const perseus::gpu::GpuError&) {  // perseus gpud restarting: the GPU runs at its default clock
    }
    remaining -= std::chrono::duration<double>(now - last).count() * clock / 1410.0;
    last = now;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace perseus::client;
  try {
    ClientOptions o;
    o.server_url = arg(argc, argv, "--server", "http://127.0.0.1:7787");
    o.rank = o.pp_rank = std::stoi(arg(argc, argv, "--rank", "0"));
    o.pp_degree = o.world_size = std::stoi(arg(argc, argv, "--stages", "2"));
    o.num_microbatches = std::stoi(arg(argc, argv, "--microbatches", "4"));
    o.report_every = std::stoi(arg(argc, argv, "--report-every", "2"));
    o.framework = "fake";
    o.model_name = "trainer";
    o.fail_open = arg(argc, argv, "--fail-open", "0") == "1";
    o.heartbeat_interval = std::chrono::milliseconds(std::stoi(arg(argc, argv, "--heartbeat-ms", "5000")));
    int iterations = std::stoi(arg(argc, argv, "--iterations", "4"));
    double forward_ms = std::stod(arg(argc, argv, "--forward-ms", "2")) * (1.0 + 0.5 * o.rank);
    double backward_ms = std::stod(arg(argc, argv, "--backward-ms", "4")) * (1.0 + 0.5 * o.rank);
    std::filesystem::path id_file = arg(argc, argv, "--job-id-file", "job_id.txt");
    o.broadcast_job_id = [id_file](const std::string& id) {
      if (!id.empty()) {
        perseus::write_file_atomic(id_file, id);
        return id;
      }
      for (int i = 0; i < 2000 && !std::filesystem::exists(id_file); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return perseus::read_file(id_file);
    };
    std::shared_ptr<perseus::gpu::GpuLibrary> gpu = perseus::gpud::open_gpu_library();  // $PERSEUS_GPUD_SOCKET
    o.gpu = gpu;
    // These ranks are separate processes with no collective between them, unlike a real job's: at
    // each round's end a rank waits (bounded) for the server's next schedule, as coupled ranks
    // would reach it together, so that rounds line up as in a real job.
    o.switch_over_iteration = false;
    Client client(o);
    int hang_at = std::stoi(arg(argc, argv, "--hang-at-iteration", "-1"));  // fault injection: a stuck training thread
    for (int it = 0; it < iterations; ++it) {
      while (it == hang_at) std::this_thread::sleep_for(std::chrono::seconds(1));
      client.on_step_begin();
      for (const auto& name : client.pipe_schedule()) {
        client.on_instruction_begin(name);
        work(*gpu, name == "forward" ? forward_ms : backward_ms);
        client.on_instruction_end(name);
      }
      int round = client.round();
      client.on_step_end();
      if (client.round() != round) client.wait_for_server(std::chrono::seconds(10));
    }
    return 0;
  } catch (const ProfilingDone& e) {
    std::printf("profiling done: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake_trainer: %s\n", e.what());
    return 1;
  }
}
