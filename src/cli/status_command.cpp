// `perseus status`: what a running `perseus serve` is doing, job by job (GET /jobs, /jobs/{id}).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "perseus/cli/commands.hpp"
#include "perseus/client/http_client.hpp"
#include "perseus/util/error.hpp"

namespace perseus::cli {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

struct StatusArgs {
  std::string server = "http://127.0.0.1:7787";
  std::string job_id;
  bool json = false;
};

std::string number(const json& value, const char* unit) {
  return value.is_number() ? fmt::format("{:.4g} {}", value.get<double>(), unit) : "-";
}

void print_job(const json& job) {
  std::printf("%s", fmt::format("job {}\n  scheduler {} ({} client), {}, round {}, {}/{} ranks registered\n",
                                job.value("job_id", ""), job.value("scheduler", ""), job.value("dialect", ""),
                                job.value("phase", ""), job.value("round", 0), job.value("registered", 0),
                                job.value("world_size", 0)).c_str());
  const json& measured = job["measured"];
  if (measured.is_object())
    std::printf("%s", fmt::format("  last round {}: iteration {}, energy {} per iteration\n", measured.value("round", 0),
                                  number(measured["iteration_time"], "s"), number(measured["energy"], "J")).c_str());
  for (const auto& p : job["pipelines"])
    std::printf("%s", fmt::format("    pipeline dp {}: iteration {}, energy {}\n", p.value("dp_rank", 0),
                                  number(p["iteration_time"], "s"), number(p["energy"], "J")).c_str());
  if (job["end_detail"].is_string()) std::printf("  ended: %s\n", job["end_detail"].get<std::string>().c_str());
}

int run_status(const StatusArgs& args) {
  const char* token = std::getenv("PERSEUS_TOKEN");
  client::HttpClient http(args.server, token != nullptr ? token : "");
  std::string target = args.job_id.empty() ? "/jobs" : "/jobs/" + client::encode_path_segment(args.job_id);
  client::HttpReply reply;
  try {
    reply = http.request("GET", target, "", 10s);
  } catch (const client::ServerUnreachable& e) {
    throw Error(fmt::format("{} (is `perseus serve` running there?)", e.what()), kExitNoInput);
  }
  json body = json::parse(reply.body, nullptr, false);
  if (reply.status != 200) {
    std::string detail = body.is_object() && body.contains("detail") ? body["detail"].dump() : reply.body;
    throw Error(fmt::format("GET {}{}: {} {}", args.server, target, reply.status, detail), kExitFailure);
  }
  if (args.json) {
    std::printf("%s\n", body.dump(1).c_str());
    return kExitOk;
  }
  if (!args.job_id.empty()) {
    print_job(body);
    return kExitOk;
  }
  if (body.empty()) std::printf("no jobs\n");
  for (const auto& summary : body) {  // the details of each
    auto detail = http.request("GET", "/jobs/" + client::encode_path_segment(summary.value("job_id", "")), "", 10s);
    if (detail.status == 200) print_job(json::parse(detail.body));
  }
  return kExitOk;
}

}  // namespace

Runner add_status_command(CLI::App& app) {
  auto args = std::make_shared<StatusArgs>();
  auto* cmd = app.add_subcommand("status", "What a running perseus serve is doing, job by job");
  cmd->add_option("job_id", args->job_id, "One job (default: every job)");
  cmd->add_option("--server", args->server, "perseus serve's URL (token: PERSEUS_TOKEN)")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print the server's JSON as it is");
  return [args] { return run_status(*args); };
}

}  // namespace perseus::cli
