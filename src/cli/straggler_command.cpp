// `perseus straggler`: tell a running `perseus serve` that a job's iterations now take longer (an
// external fault detector's verdict), or that they no longer do (POST/DELETE /straggler/{job_id}).
#include <fmt/format.h>

#include <cstdio>
#include <optional>

#include "perseus/cli/arguments.hpp"
#include "perseus/cli/commands.hpp"
#include "perseus/cli/server_call.hpp"
#include "perseus/util/error.hpp"

namespace perseus::cli {
namespace {

struct StragglerArgs {
  std::string server = "http://127.0.0.1:7787";
  std::string job_id;
  std::optional<double> slowdown, iteration_time;
  std::optional<int> dp_rank;
  bool clear = false;
};

int run_straggler(const StragglerArgs& args) {
  ServerCall call(args.server);
  std::string target = "/straggler/" + client::encode_path_segment(args.job_id);
  if (args.clear) {
    call("DELETE", target);
    std::printf("%s\n", fmt::format("job {}: straggler cleared; every pipeline returns to the target plan at the next "
                                    "round",
                                    args.job_id)
                            .c_str());
    return kExitOk;
  }
  nlohmann::json body = nlohmann::json::object();
  if (args.slowdown) body["slowdown"] = *args.slowdown;
  if (args.iteration_time) body["iteration_time"] = *args.iteration_time;
  if (args.dp_rank) body["dp_rank"] = *args.dp_rank;
  call("POST", target, body.dump());
  std::printf("%s\n", fmt::format("job {}: straggler set ({}); from the next round the {} run the cheapest plan that "
                                  "finishes by then",
                                  args.job_id, body.dump(), args.dp_rank ? "other pipelines" : "pipelines")
                          .c_str());
  return kExitOk;
}

}  // namespace

Runner add_straggler_command(CLI::App& app) {
  auto args = std::make_shared<StragglerArgs>();
  auto* cmd = app.add_subcommand("straggler",
                                 "Tell a Perseus job that its iterations are slower (a straggler), or "
                                 "that they are not any more");
  cmd->add_option("job_id", args->job_id, "The job (perseus status lists them)")->required();
  auto* slowdown = cmd->add_option("--slowdown", args->slowdown, "Iterations take X times the measured all-max time")
                       ->check(between(1.0, 100.0));
  auto* time =
      cmd->add_option("--iteration-time", args->iteration_time, "Iterations take S seconds")->check(positive());
  auto* clear = cmd->add_flag("--clear", args->clear, "The straggler is gone: back to the target plan");
  cmd->add_option("--dp-rank", args->dp_rank, "The slow pipeline (it keeps its plan; default: every pipeline slows)")
      ->check(non_negative())
      ->excludes(clear);
  slowdown->excludes(time)->excludes(clear);
  time->excludes(clear);
  cmd->add_option("--server", args->server, "perseus serve's URL (token: PERSEUS_TOKEN)")->capture_default_str();
  cmd->callback([cmd, slowdown, time, clear] {
    if (slowdown->count() + time->count() + clear->count() != 1)
      throw CLI::ValidationError("give one of --slowdown, --iteration-time, --clear");
    (void)cmd;
  });
  return [args] { return run_straggler(*args); };
}

}  // namespace perseus::cli
