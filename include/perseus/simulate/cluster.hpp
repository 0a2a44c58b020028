#pragma once
// `perseus simulate`: a training cluster that no machine here has. S x D x T ranks run
// through the real client library (registration, every hook, rounds, results) against a perseus
// server; each rank's GPU is simulated from a measured profile: an instruction takes the profile's
// time and energy at the clock the client locked (between two profiled clocks: the next slower one),
// a GPU with nothing to run draws P_block, and the D data-parallel pipelines meet at a gradient
// synchronisation at the end of every iteration. Time is simulated (nothing sleeps), so a run is
// fast, and the GPUs are deterministic for a seed; with a time scale the cluster keeps pace with
// wall time instead (for faults injected at realistic iteration lengths). The tensor-parallel ranks of a stage run each
// instruction together: it ends when the slowest of them ends, and each draws the profile's energy
// (the profile is per GPU).
//
// A GPU's power limit (set by the client, for a power budget's backstop, or by the administrator,
// SimulationConfig::power_limit) acts as the emulator's Zeus baseline assumes: each instruction runs
// at the highest clock at or below the locked one whose power (the profile's energy over time) fits
// the limit. An instruction whose power does not fit even at the profile's lowest clock runs there
// stretched to the limit's power at that clock's energy (the GPU throttles further; the model counts
// no more energy for it). The GPU takes limits from max(P_block + 1, a quarter of the profile's
// highest power) up to that highest power, rounded to watts (its default).
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "perseus/pipeline/shape.hpp"
#include "perseus/profile/profile.hpp"

namespace perseus::simulate {

// A pipeline that runs every instruction `factor` times slower at unchanged power (time and energy
// scaled), from iteration `from` (1-based) up to and including `until` (0: to the end). Pipeline
// kEveryPipeline: the whole cluster (a slower environment).
struct StragglerSpec {
  static constexpr int kEveryPipeline = -1;
  int pipeline = 0;
  double factor = 1;
  int from = 1;
  int until = 0;
  bool active(int pipeline_index, int iteration) const {
    return (pipeline == kEveryPipeline || pipeline_index == pipeline) && iteration >= from &&
           (until == 0 || iteration <= until);
  }
};

// Parses PIPELINE:FACTOR[@ITERATION[-UNTIL]] (PIPELINE `all` or `*`: every pipeline); throws Error
// (usage) saying what is wrong.
StragglerSpec parse_straggler(std::string_view text);

// The pipeline's shape (stages S, microbatches M, schedule, model chunks) is PipelineShape's: every
// rank runs its stage's order of that schedule (split backward parts, overlapped pairs and the
// V-shape's chunks included), and the profile has a row set per model stage.
struct SimulationConfig : PipelineShape {
  Profile profile;
  int pipelines = 1;        // D, data parallel
  int tensor_parallel = 1;  // T
  double p2p_power = 0;     // watts drawn while a GPU waits
  std::string server_url = "http://127.0.0.1:7787";
  std::string token;
  std::string model_name = "model";
  int iterations = 200;
  int report_every = 20;     // iterations per printed report
  int round_iterations = 5;  // iterations per perseus round (the client's report_every)
  std::vector<StragglerSpec> stragglers;
  double noise = 0;  // sigma of a log-normal factor (median 1) on each instruction's time and energy
  std::uint64_t seed = 0;
  // Sigma of a log-normal factor (median 1) per GPU on its every instruction's time and energy,
  // drawn once from the seed: GPUs of one cluster are not equally fast.
  double gpu_speed_spread = 0;
  // Seconds after a clock lock until the GPU runs at the new clock (the instruction it was locked
  // for runs at the clock before until then), as real GPUs apply locked clocks some time after the call.
  double clock_latency = 0;
  // 0: pure simulated time (nothing sleeps; at each round boundary the simulation waits for the
  // clients' exchange with the server, as if the network took no time). F > 0: each iteration
  // takes F x its simulated time in wall time and nothing waits for the server, as in training.
  double time_scale = 0;
  double request_timeout_s = 30;  // the clients' deadline for each request to the server
  // What an administrator set on every GPU before training (nvidia-smi -pl, -lgc): a power limit in
  // watts, the highest SM clock in MHz; 0: none.
  double power_limit = 0;
  int max_clock = 0;
  double weight = 1;                        // the job's priority weight under a power budget (registered with the job)
  const std::atomic<bool>* stop = nullptr;  // Ctrl-C: ends after the current iteration
  // Called once the job is registered, before the first iteration, with its id and secret (what
  // another process needs to change the job: perseus straggler's PERSEUS_JOB_SECRET).
  std::function<void(const std::string& job_id, const std::string& job_secret)> on_registered;
};

// Means per iteration over a window of iterations (first..last, 1-based).
struct WindowReport {
  int first = 0, last = 0;
  double iteration_time = 0;  // seconds, the gradient synchronisation included
  double energy = 0;          // joules, every GPU
  struct Pipeline {
    int dp_rank = 0;
    double compute_time = 0;  // from the iteration's start to the pipeline's last instruction
    double energy = 0;        // its GPUs, waiting for the synchronisation included
    bool straggling = false;  // a --straggler was active in this window
  };
  std::vector<Pipeline> pipelines;
};

struct SimulationSummary {
  std::string job_id;  // empty when no job was registered
  int iterations = 0;  // run
  std::string ended;   // why the run ended
  int ranks = 0;
  int disabled_ranks = 0;       // ranks on which perseus gave up (training went on at default clocks)
  int clock_locks = 0;          // clock changes the clients made, all ranks
  double training_seconds = 0;  // wall time of the iterations (clients' start and close not included)
  WindowReport whole;           // every iteration
  std::vector<WindowReport> reports;
  // [pipeline][stage][tensor-parallel rank]: each GPU's factor on its instructions' time and energy
  // (gpu_speed_spread), so that what the cluster could have saved is computed on the GPUs it ran;
  // empty without a spread.
  std::vector<std::vector<std::vector<double>>> gpu_speeds;
};

// Checks the configuration (Error, usage) and the profile's coverage (InputError): what
// simulate_cluster checks first, for a caller that says nothing before the arguments are known good.
void check_simulation_config(const SimulationConfig& config);

// Checks the configuration (Error, usage) and the profile's coverage (InputError), runs the
// cluster, and calls `on_report` every report_every iterations (and for a last, shorter window).
SimulationSummary simulate_cluster(const SimulationConfig& config,
                                   const std::function<void(const WindowReport&)>& on_report = {});

}  // namespace perseus::simulate
