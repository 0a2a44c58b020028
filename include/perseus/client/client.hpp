#pragma once
// The training-side client (docs/design.md#the-client). Construct one per rank; rank 0 registers the job and
// the job id reaches the other ranks through `broadcast_job_id`; every rank registers with its
// pipe schedule and its GPU's clocks. Then, in the training loop:
//
//   client.on_step_begin();
//   client.on_instruction_begin("forward");  ... forward ...  client.on_instruction_end("forward");
//   client.on_instruction_begin("backward"); ... backward ... client.on_instruction_end("backward");
//   client.on_step_end();
//
// The hooks only enqueue: a controller thread owns the GPU library, locks the clock the
// schedule gives the instruction, and reads the GPU's energy counter at instruction boundaries.
// Training never waits on the network: an exchange thread talks to the server. At the end of each
// round on_step_end hands the round's measurements to it, and it sends them and asks for the next
// round's schedule (the server answers once every rank asked). The first round has
// `report_every` iterations; each later one begins with a switch-over iteration (not measured),
// during which that answer arrives, then `report_every` measured ones. A schedule takes effect at
// the round's first iteration if it is there, else at its first measured one; a rank without it
// by then keeps its current schedule and marks that round's result stale, which the server does not
// use (it runs the round again). Every request has a deadline (request_timeout). The server's
// answers that end perseus (done, failed) take effect at the next on_step_end.
//
// Each iteration must run pipe_schedule's names in order (names not in it are measured and leave the
// clock alone); a rank that does not is kept at default clocks with one warning (strict_schedule:
// an error), since the plan's clocks would land on the wrong instructions.
//
// Never hurting training: with fail_open (the default) a server or GPU problem disables
// perseus for this process, with a warning, and training goes on at the GPU's default clocks.
// Clocks are reset when the client is destroyed, at normal exit and on fatal signals.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "perseus/gpu/gpu.hpp"
#include "perseus/gpu/visible_devices.hpp"
#include "perseus/pipeline/schedule.hpp"

namespace perseus::client {

// The server says this job has nothing more to run ([profiling-done]): training should stop.
class ProfilingDone : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The instructions a rank ran do not follow its registered pipe_schedule, and strict_schedule is
// set. Thrown from the hook that noticed; perseus is off for this process afterwards.
class ScheduleMismatch : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ClientOptions {
  int rank = 0, dp_rank = 0, pp_rank = 0, tp_rank = 0;
  int dp_degree = 1, pp_degree = 1, tp_degree = 1, world_size = 1;
  // The GPU, as CUDA numbers it: CUDA device `device` of cuda_visible_devices (CUDA_VISIBLE_DEVICES,
  // read when the options are made; nullopt: unset, so the NVML index) is the GPU the client drives.
  unsigned device = 0;
  std::optional<std::string> cuda_visible_devices = gpu::cuda_visible_devices_from_env();
  std::string server_url = "http://127.0.0.1:7787";
  std::string token;  // the server's bearer token (perseus serve --token-file); "" -> $PERSEUS_TOKEN
  // Job metadata: part of the job id.
  std::string framework = "perseus", model_name = "model", partition_method = "uniform";
  int microbatch_size = 1, num_microbatches = 1;
  // This rank's instructions in order; empty: DeepSpeed's 1F1B forwards and backwards.
  std::vector<std::string> pipe_schedule;
  int report_every = 5;  // iterations per round
  // Rank 0 calls it with the new job id; the others call it with "" and get the id back. May be
  // empty when world_size is 1 or job_id is given. The value is opaque: rank 0 registers the job
  // with a secret, which travels with the id ("<job id>\n<secret>"; a job id has no control
  // characters; the id is empty when the server did not answer yet, see retry_for), and every
  // request of the job carries it; pass it on unchanged.
  std::function<std::string(const std::string&)> broadcast_job_id;
  std::string job_id;        // join an already registered job (skips registration and the broadcast)
  std::string job_secret;    // with job_id: that job's secret, if it has one ("" -> $PERSEUS_JOB_SECRET)
  std::string nvml_library;  // "" -> $PERSEUS_NVML_LIBRARY, else libnvidia-ml.so.1
  // The node's `perseus gpud` socket ("" -> $PERSEUS_GPUD_SOCKET; unset: NVML directly). Through
  // the daemon the rank needs no privileges and a killed rank's clocks are reset at once.
  std::string gpud_socket;
  std::shared_ptr<gpu::GpuLibrary> gpu;  // use this instead of loading NVML
  // Deadline of every request (the schedule barrier's too; a barrier that takes longer is asked
  // again). The constructor waits this long at most for the first schedule.
  std::chrono::milliseconds request_timeout{30000};
  // When the server goes away mid-training (restart, pause, network), training continues at the
  // current schedule and the exchange thread tries again (about 0.5 s apart at first, doubling to
  // 10 s; at once after a request that ran past its deadline)
  // for this long, then gives up as fail_open says. A restarted server resumes the job and every
  // rank rejoins at a round boundary; a result the server already had is acknowledged again.
  // A server that does not answer when the client is made (started after training) is retried the
  // same way: training starts at default clocks (the constructor does not wait), the client
  // registers in the background once the server answers, and takes part from the next iteration
  // on. Rank 0 then shares a secret it made instead of the job id, and whichever rank reaches the
  // server first registers the job with it. 0: give up at once.
  std::chrono::milliseconds retry_for{std::chrono::minutes(5)};
  // A background thread tells the server this rank is alive, and how far training got, this often,
  // so that a killed or hung rank is named within seconds (perseus serve --dead-rank-timeout)
  // instead of holding the other ranks at the barrier. 0: no heartbeat.
  std::chrono::milliseconds heartbeat_interval{5000};
  bool fail_open = true;
  bool stop_on_done = true;  // throw ProfilingDone from on_step_end when the server says so
  // Instructions that do not follow pipe_schedule (names out of order, a different count per
  // iteration) would get other instructions' clocks. false: warn once and keep this rank at
  // default clocks, still taking part in every round; true: throw ScheduleMismatch.
  bool strict_schedule = false;
  // Where the hooks read the time (default: the steady clock). perseus simulate passes each rank's
  // simulated clock.
  std::function<std::chrono::steady_clock::time_point()> clock;
  // The hooks do the GPU work (clock locks, energy reads) themselves instead of handing it to the
  // controller thread: every reading is then taken at the hook's own time. For simulated GPUs
  // (perseus simulate) and tests; on a real GPU it puts NVML's latency on the training thread.
  bool inline_controller = false;
  // Rounds after the first begin with a switch-over iteration (see above). false: every round has
  // report_every iterations and a schedule that is not there at its start waits for the next
  // round; for a caller that waits for the server at round ends (perseus simulate in simulated
  // time, where the network takes no time).
  bool switch_over_iteration = true;
  // The job's priority under a cluster power budget (perseus serve --power-budget): its throughput
  // counts this many times when the server shares the budget out. Sent when rank 0 registers the job.
  double weight = 1;
  // A power budget's backstop is a GPU power limit the server asks for in each round's schedule and,
  // to act within a round, in its answers to heartbeats. false: only at round boundaries (perseus
  // simulate, whose heartbeats run in wall time while its GPUs run in simulated time). The limit the
  // GPU had is restored when the server lifts it and when the client ends.
  bool power_limit_from_heartbeat = true;
};

class Client {
 public:
  explicit Client(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  void on_step_begin();
  void on_step_end();
  void on_instruction_begin(std::string_view name);
  void on_instruction_end(std::string_view name);

  bool enabled() const;               // false once perseus gave up (fail_open)
  const std::string& job_id() const;  // "" until registered (see retry_for)
  // The job's secret ("" when the server gave none): what another process needs, with the id and
  // the server's URL, to change the job (e.g. perseus straggler, PERSEUS_JOB_SECRET).
  const std::string& job_secret() const;
  int round() const;                  // rounds completed
  std::vector<int> schedule() const;  // power state per pipe_schedule entry, this round
  const std::vector<std::string>& pipe_schedule() const;
  std::string mode() const;  // "frequency" or "power limit", from the server

  // Training is over for this rank: stops the controller thread, resets the clocks now, and tells the
  // server (once every rank closed, the job ends as done). `finished` false: this rank stops taking
  // part because something went wrong (an exception): the job ends as failed, so nobody waits for it.
  // The hooks do nothing afterwards.
  void close(bool finished = true);

  // Waits until the controller thread applied everything enqueued so far (for tests).
  void flush();

  // Waits at most `timeout` until the exchange with the server settled: the results handed over
  // were sent and the next schedule arrived (or the server is away and the exchange backs off).
  // Real training never calls it; perseus simulate (in simulated time, where the network takes no
  // time) and tests do. True when it settled.
  bool wait_for_server(std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One stage's forwards and backwards as pipe_schedule names, in the order the schedule runs them:
// 1f1b is DeepSpeed's TrainSchedule (Megatron-LM's non-interleaved 1F1B runs the same order);
// interleaved is Megatron-LM's interleaved 1F1B with `virtual_stages` model chunks per stage
// (num_microbatches counts each microbatch once, not once per chunk); zb-h1, zbv and dualpipev
// name the split parts (backward_input, backward_weight) and DualPipeV's overlapped pairs
// (forward_backward), the names the hooks then take.
std::vector<std::string> default_pipe_schedule(int pp_rank, int pp_degree, int num_microbatches,
                                               ScheduleKind kind = ScheduleKind::one_f_one_b, int virtual_stages = 1);

}  // namespace perseus::client
