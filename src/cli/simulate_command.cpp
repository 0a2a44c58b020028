// `perseus simulate`: a simulated cluster training against a perseus server, so that
// the online loop runs, is tested and is shown without GPUs.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "perseus/cli/arguments.hpp"
#include "perseus/cli/commands.hpp"
#include "perseus/cli/interrupt.hpp"
#include "perseus/cli/server_call.hpp"
#include "perseus/client/http_client.hpp"
#include "perseus/simulate/cluster.hpp"
#include "perseus/util/error.hpp"

namespace perseus::cli {
namespace {

// The slowest and fastest GPU the spread drew, and where.
std::string describe_gpu_speeds(const std::vector<std::vector<std::vector<double>>>& speeds) {
  struct Gpu {
    double speed;
    std::size_t pipeline, stage, rank;
  };
  std::optional<Gpu> slowest, fastest;
  for (std::size_t d = 0; d < speeds.size(); ++d)
    for (std::size_t s = 0; s < speeds[d].size(); ++s)
      for (std::size_t t = 0; t < speeds[d][s].size(); ++t) {
        const Gpu gpu{speeds[d][s][t], d, s, t};
        if (!slowest || gpu.speed > slowest->speed) slowest = gpu;
        if (!fastest || gpu.speed < fastest->speed) fastest = gpu;
      }
  if (!slowest) return {};
  auto where = [&](const Gpu& g) {
    return fmt::format("pipeline {}, stage {}{}", g.pipeline, g.stage,
                       speeds[g.pipeline][g.stage].size() > 1 ? fmt::format(", rank {}", g.rank) : std::string());
  };
  return fmt::format(
      "  GPU speeds (--gpu-speed-spread): time and energy x{:.4f} on the slowest ({}) to x{:.4f} on the "
      "fastest ({})\n",
      slowest->speed, where(*slowest), fastest->speed, where(*fastest));
}

using nlohmann::json;

struct SimulateArgs {
  std::string profile;
  std::string schedule = "1f1b";
  std::vector<std::string> stragglers;
  bool json = false;
  double clock_latency_ms = 0;
  simulate::SimulationConfig config;
};

json to_json(const simulate::WindowReport& r) {
  json pipelines = json::array();
  for (const auto& p : r.pipelines)
    pipelines.push_back(
        {{"dp_rank", p.dp_rank}, {"compute_time", p.compute_time}, {"energy", p.energy}, {"straggling", p.straggling}});
  return {{"first_iteration", r.first},
          {"last_iteration", r.last},
          {"iteration_time", r.iteration_time},
          {"energy", r.energy},
          {"pipelines", pipelines}};
}

void print_report(const simulate::WindowReport& r) {
  std::printf("%s", fmt::format("iterations {}-{}: {:.4f} s and {:.1f} J per iteration (all GPUs)\n", r.first, r.last,
                                r.iteration_time, r.energy)
                        .c_str());
  for (const auto& p : r.pipelines)
    std::printf("%s", fmt::format("  pipeline {}: compute {:.4f} s, {:.1f} J{}\n", p.dp_rank, p.compute_time, p.energy,
                                  p.straggling ? "  (straggler)" : "")
                          .c_str());
  std::fflush(stdout);
}

// The server must be there and lock clocks (what the simulated GPUs model).
void check_server(ServerCall& call, const std::string& url) {
  json info = call("GET", "/info");
  if (!info.is_object()) throw Error(fmt::format("GET {}/info answered {}", url, info.dump()), ErrorKind::failed);
  if (info.value("mode", "frequency") != "frequency")
    throw Error(fmt::format("the server at {} runs in '{}' mode; simulated GPUs model clock locking, so run it with "
                            "--mode frequency",
                            url, info.value("mode", "")),
                ErrorKind::bad_setting);
}

// What the server says of the job at the end (the turnkey scheduler's verdict), if it still knows it.
std::optional<json> job_status(ServerCall& call, const std::string& job_id) {
  if (job_id.empty()) return std::nullopt;
  try {
    json body = call("GET", "/jobs/" + client::encode_path_segment(job_id));
    if (body.is_object()) return body;
  } catch (const Error&) {}
  return std::nullopt;
}

std::string percent(const json& value) {
  return value.is_number() ? fmt::format("{:.2f}%", 100 * value.get<double>()) : "-";
}

int run_simulate(SimulateArgs& args) {
  auto& config = args.config;
  auto kind = parse_schedule_kind(args.schedule);
  if (!kind)
    throw Error(fmt::format("--schedule: '{}' is not one of {}", args.schedule, schedule_names()),
                ErrorKind::bad_setting);
  config.schedule = *kind;
  config.clock_latency = args.clock_latency_ms / 1000;
  for (const auto& s : args.stragglers) config.stragglers.push_back(simulate::parse_straggler(s));
  config.profile = read_profile(args.profile);
  config.model_name = std::filesystem::path(args.profile).stem().string();  // part of the job id: no '+', '/'
  for (char& ch : config.model_name)
    if (ch == '+' || ch == '/' || ch == '\\' || static_cast<unsigned char>(ch) < 0x20) ch = '-';
  simulate::check_simulation_config(config);  // before anything is said of the run
  if (config.token.empty())
    if (const char* token = std::getenv("PERSEUS_TOKEN")) config.token = token;
  ServerCall call(config.server_url);  // the token: PERSEUS_TOKEN, as the clients'
  check_server(call, config.server_url);

  StopOnSignal interrupt;
  config.stop = interrupt.flag();
  // The job's secret guards it against changes from other users: the person who started the
  // simulation gets it, to change the job while it runs (perseus straggler). With --json, standard
  // output stays the reports and the summary.
  config.on_registered = [&args](const std::string& job_id, const std::string& secret) {
    std::FILE* out = args.json ? stderr : stdout;
    std::fprintf(
        out, "%s",
        fmt::format("job {} registered{}\n", job_id,
                    secret.empty() ? "" : fmt::format(" (perseus straggler on it: PERSEUS_JOB_SECRET={})", secret))
            .c_str());
    std::fflush(out);
  };
  if (!args.json)
    std::printf("%s", fmt::format("simulating {} ranks ({} pipelines x {} stages x {} tensor-parallel) of {}, {} "
                                  "microbatches, against {}\n",
                                  config.pipelines * config.num_stages * config.tensor_parallel, config.pipelines,
                                  config.num_stages, config.tensor_parallel, args.profile, config.num_microbatches,
                                  config.server_url)
                          .c_str());
  auto began = std::chrono::steady_clock::now();
  auto summary = simulate::simulate_cluster(config, [&](const simulate::WindowReport& r) {
    if (args.json) std::printf("%s\n", json{{"report", to_json(r)}}.dump().c_str()), std::fflush(stdout);
    else print_report(r);
  });
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  auto status = job_status(call, summary.job_id);

  if (args.json) {
    json out = {{"job_id", summary.job_id},
                {"iterations", summary.iterations},
                {"ended", summary.ended},
                {"ranks", summary.ranks},
                {"disabled_ranks", summary.disabled_ranks},
                {"clock_locks", summary.clock_locks},
                {"wall_seconds", wall},
                {"training_seconds", summary.training_seconds},
                {"whole", to_json(summary.whole)},
                {"server", status ? *status : json(nullptr)}};
    if (!summary.gpu_speeds.empty()) out["gpu_speeds"] = summary.gpu_speeds;
    std::printf("%s\n", json{{"summary", out}}.dump().c_str());
  } else {
    std::printf("%s", fmt::format("summary: {} iterations ({}), job {}\n", summary.iterations, summary.ended,
                                  summary.job_id.empty() ? "-" : summary.job_id)
                          .c_str());
    std::printf("%s",
                fmt::format("  {:.4f} s and {:.1f} J per iteration over the run; {:.1f} s simulated in {:.1f} s\n",
                            summary.whole.iteration_time, summary.whole.energy,
                            summary.whole.iteration_time * summary.iterations, wall)
                    .c_str());
    if (!summary.gpu_speeds.empty()) std::printf("%s", describe_gpu_speeds(summary.gpu_speeds).c_str());
    if (summary.disabled_ranks > 0)
      std::printf("%s", fmt::format("  perseus was disabled on {} of {} ranks (they trained at default clocks)\n",
                                    summary.disabled_ranks, summary.ranks)
                            .c_str());
    if (status) {
      const json& s = *status;
      std::printf("%s", fmt::format("  server: {} ({}), round {}", s.value("phase", ""), s.value("scheduler", ""),
                                    s.value("round", 0))
                            .c_str());
      if (s.contains("saving") && s["saving"].is_number())
        std::printf("%s", fmt::format(", saving {} at slowdown {} against the measured all-max", percent(s["saving"]),
                                      percent(s["slowdown"]))
                              .c_str());
      std::printf("\n");
    }
  }
  return interrupt.stopped() ? kExitInterrupted : kExitOk;
}

}  // namespace

Runner add_simulate_command(CLI::App& app) {
  auto args = std::make_shared<SimulateArgs>();
  auto& c = args->config;
  auto* cmd = app.add_subcommand("simulate",
                                 "Train a simulated cluster (GPUs modeled from a profile) against a "
                                 "perseus server, in simulated time (or paced with --time-scale)");
  cmd->add_option("profile", args->profile, "Stage profile CSV (stage,instruction,frequency,time,energy)")
      ->required()
      ->check(existing_file());
  cmd->add_option("--stages", c.num_stages, "Pipeline stages S")->required();
  cmd->add_option("--microbatches", c.num_microbatches, "Microbatches per iteration M")->required();
  cmd->add_option("--p2p-power", c.p2p_power, "Watts a GPU draws while waiting (P_block)")->required();
  cmd->add_option("--pipelines", c.pipelines, "Data-parallel pipelines D")->capture_default_str();
  cmd->add_option("--tensor-parallel", c.tensor_parallel, "Tensor-parallel ranks per stage T")->capture_default_str();
  cmd->add_option("--server", c.server_url, "perseus serve's URL (token: PERSEUS_TOKEN)")->capture_default_str();
  cmd->add_option("--iterations", c.iterations, "Training iterations to run")->capture_default_str();
  cmd->add_option("--report-every", c.report_every, "Print per-pipeline time and energy every K iterations")
      ->capture_default_str();
  cmd->add_option("--round-iterations", c.round_iterations, "Iterations per perseus round (the client's report_every)")
      ->capture_default_str();
  cmd->add_option("--straggler", args->stragglers,
                  "PIPELINE:FACTOR[@ITERATION[-UNTIL]]: that pipeline runs FACTOR times slower from ITERATION "
                  "(until UNTIL); PIPELINE all: the whole cluster; repeatable");
  cmd->add_option("--noise", c.noise, "Sigma of a log-normal factor on each instruction's time and energy")
      ->capture_default_str();
  cmd->add_option("--seed", c.seed, "Seed of the noise")->capture_default_str();
  cmd->add_option("--gpu-speed-spread", c.gpu_speed_spread,
                  "Sigma of a log-normal factor per GPU on all its instructions, fixed for the run (from --seed)")
      ->capture_default_str();
  cmd->add_option(
         "--clock-latency", args->clock_latency_ms,
         "Milliseconds (simulated) after a clock lock until the GPU runs at the new clock; the instruction runs "
         "at the clock before until then")
      ->capture_default_str();
  cmd->add_option("--time-scale", c.time_scale,
                  "Pace the cluster at F x simulated time in wall time (0.005: a 2.2 s iteration takes 11 ms); "
                  "0: pure simulated time, nothing sleeps")
      ->capture_default_str();
  cmd->add_option("--request-timeout", c.request_timeout_s, "Seconds each client request to the server may take")
      ->capture_default_str();
  cmd->add_option("--schedule", args->schedule,
                  "1f1b, gpipe, interleaved (with --virtual-stages), zb-h1, zbv or dualpipev")
      ->capture_default_str();
  cmd->add_option("--virtual-stages", c.virtual_stages,
                  "With --schedule interleaved: model chunks per stage (the profile has stages x this model stages); "
                  "zbv and dualpipev always run 2 (a V)")
      ->capture_default_str()
      ->check(between(1, 1024));
  cmd->add_option("--power-limit", c.power_limit,
                  "Every simulated GPU's power limit in watts, as an administrator sets it before training "
                  "(nvidia-smi -pl): each instruction runs at the highest clock whose power fits; 0: the GPU's highest")
      ->capture_default_str();
  cmd->add_option("--max-clock", c.max_clock,
                  "Every simulated GPU's highest SM clock in MHz, as an administrator locks it (nvidia-smi -lgc); "
                  "0: none")
      ->capture_default_str();
  cmd->add_option("--weight", c.weight,
                  "The job's priority weight under the server's power budget (its throughput counts this many times)")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print each report and the summary as JSON lines");
  return [args] { return run_simulate(*args); };
}

}  // namespace perseus::cli
