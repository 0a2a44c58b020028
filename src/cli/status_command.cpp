// `perseus status`: what a running `perseus serve` is doing, job by job (GET /jobs, /jobs/{id}).
#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <thread>
#include <nlohmann/json.hpp>

#include "perseus/cli/arguments.hpp"
#include "perseus/cli/commands.hpp"
#include "perseus/cli/interrupt.hpp"
#include "perseus/cli/server_call.hpp"
#include "perseus/client/http_client.hpp"
#include "perseus/protocol/job_outcome.hpp"
#include "perseus/util/error.hpp"

namespace perseus::cli {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

struct StatusArgs {
  std::string server = "http://127.0.0.1:7787";
  std::string job_id;
  bool json = false;
  std::optional<double> watch;  // seconds between refreshes
  std::optional<double> wait;   // seconds to wait for the server to answer
};

std::string number(const json& value, const char* unit) {
  return value.is_number() ? fmt::format("{:.4g} {}", value.get<double>(), unit) : "-";
}

// Why the job ended, without the wire marker (the phase says done or failed): "[profiling-done]"
// is what the artifact's clients match on for every job that ended well, profiled or not.
std::string end_reason(const std::string& detail) {
  auto outcome = protocol::outcome_from_detail(detail);
  return outcome ? outcome->why : detail;
}

std::string percent(const json& value) {
  return value.is_number() ? fmt::format("{:.2f}%", 100 * value.get<double>()) : "-";
}

// " (95%: a-b)" for an interval [a, b]; nothing otherwise.
std::string interval(const json& ci, const char* unit) {
  if (!ci.is_array() || ci.size() != 2 || !ci[0].is_number() || !ci[1].is_number()) return "";
  return fmt::format(" (95%: {:.4g}-{:.4g} {})", ci[0].get<double>(), ci[1].get<double>(), unit);
}

std::string percent_interval(const json& ci) {
  if (!ci.is_array() || ci.size() != 2 || !ci[0].is_number() || !ci[1].is_number()) return "";
  return fmt::format(" (95%: {:.2f} to {:.2f}%)", 100 * ci[0].get<double>(), 100 * ci[1].get<double>());
}

void print(const std::string& text) { std::fputs(text.c_str(), stdout); }

// A field of a reply, null where the server left it out (a const json's operator[] on a missing key
// is undefined behaviour: a status that lacked one crashed now and then).
const json& field(const json& object, const char* key) {
  static const json missing;
  if (!object.is_object()) return missing;
  auto it = object.find(key);
  return it == object.end() ? missing : *it;
}

// What the turnkey scheduler (Perseus) adds: baseline, profiling, plan, measured, straggler.
void print_turnkey(const json& job) {
  if (const json& b = field(job, "baseline"); b.is_object())
    print(fmt::format(
        "  baseline (all-max, measured): {}{} and {} per iteration{}\n", number(field(b, "iteration_time"), "s"),
        interval(b.value("iteration_time_ci", json()), "s"), number(field(b, "energy"), "J"),
        b.contains("rounds") ? fmt::format(" over {} rounds ({} left out, {} probes since)", b.value("rounds", 0),
                                           b.value("rejected", 0), b.value("probes", 0))
                             : ""));
  if (const json& s = field(job, "schedule"); s.is_object())
    print(fmt::format("  schedule: {}, {} microbatches, {} model chunk(s) per stage\n", s.value("kind", ""),
                      s.value("microbatches", 0), s.value("virtual_stages", 1)));
  if (const json& p = field(job, "profiling"); p.is_object())
    print(fmt::format("  profiling: {}/{} clocks, {} rounds (one round per clock: {}){}\n", p.value("clocks_done", 0),
                      p.value("clocks_total", 0), p.value("rounds", 0), p.value("clocks_available", 0),
                      p.value("reused", false) ? fmt::format(", profile reused from {}", p.value("profile", "")) : ""));
  if (const json& p = field(job, "plan"); p.is_object())
    print(fmt::format("  plan: {}, predicted {} and {} per iteration ({} frontier points, {} step-ups){}\n",
                      p.value("label", ""), number(field(p, "predicted_time"), "s"),
                      number(field(p, "predicted_energy"), "J"), p.value("frontier_points", 0), p.value("step_ups", 0),
                      p.contains("reason") ? fmt::format("; why: {}", p.value("reason", "")) : ""));
  if (field(job, "saving").is_number()) {
    const json& ref = field(job, "reference");
    print(fmt::format("  deployed: saving {}{} of the energy at slowdown {}{} (measured against the {})\n",
                      percent(field(job, "saving")), percent_interval(job.value("saving_ci", json())),
                      percent(field(job, "slowdown")), percent_interval(job.value("slowdown_ci", json())),
                      ref.is_object() ? ref.value("name", "baseline") : std::string("baseline")));
  }
  if (const json& d = field(job, "decisions"); d.is_array())
    for (std::size_t i = d.size() > 3 ? d.size() - 3 : 0; i < d.size(); ++i)
      print(fmt::format("  decision at round {}: {}: {}\n", d[i].value("round", 0), d[i].value("event", ""),
                        d[i].value("detail", "")));
  if (const json& s = field(job, "straggler"); s.is_object())
    print(fmt::format(
        "  straggler: {} ({}), {:.3f}x; the others run the cheapest plan that finishes by {}\n",
        field(s, "dp_rank").is_number() ? fmt::format("pipeline {}", field(s, "dp_rank").get<int>()) : "the job",
        s.value("source", ""), s.value("slowdown", 1.0), number(field(s, "iteration_time"), "s")));
}

// The cluster's power budget (GET /power_budget), when the server has one.
void print_budget(const json& b) {
  if (!b.is_object() || !field(b, "budget").is_number()) return;
  print(fmt::format("power budget {} ({}): predicted {}, measured {} (all-max {}){}\n", number(field(b, "budget"), "W"),
                    b.value("source", ""), number(field(b, "predicted"), "W"), number(field(b, "measured"), "W"),
                    number(field(b, "all_max"), "W"),
                    b.value("within_reach", true) ? "" : "; out of reach of the plans"));
  const json& backstop = field(b, "backstop");
  if (backstop.is_object() && backstop.value("active", false))
    print(fmt::format("  backstop: GPU power limits of {} per GPU: {}\n", number(field(backstop, "power_limit"), "W"),
                      backstop.value("reason", "")));
}

// A job's part of the power budget: its share, what it measured, its pace.
void print_job_budget(const json& p) {
  if (!p.is_object()) return;
  print(fmt::format(
      "  power budget: share {}, measured {}, {}{}{}\n", number(field(p, "share"), "W"),
      number(field(p, "measured"), "W"),
      field(p, "pace").is_number() ? fmt::format("paced to {} per iteration ({} of its throughput)",
                                                 number(field(p, "pace"), "s"), percent(field(p, "throughput")))
                                   : std::string("unpaced"),
      field(p, "power_limit").is_number() ? fmt::format(", GPU power limit {}", number(field(p, "power_limit"), "W"))
                                          : "",
      p.value("weight", 1.0) != 1.0 ? fmt::format(", weight {:g}", p.value("weight", 1.0)) : ""));
}

void print_job(const json& job) {
  print(fmt::format("job {}\n  scheduler {} ({} client), {}, round {}, {}/{} ranks registered\n",
                    job.value("job_id", ""), job.value("scheduler", ""), job.value("dialect", ""),
                    job.value("phase", ""), job.value("round", 0), job.value("registered", 0),
                    job.value("world_size", 0)));
  print_turnkey(job);
  const json& measured = field(job, "measured");
  if (measured.is_object())
    print(fmt::format("  measured: iteration {}, energy {} per iteration\n",
                      number(field(measured, "iteration_time"), "s"), number(field(measured, "energy"), "J")));
  for (const auto& p : field(job, "pipelines"))
    print(fmt::format("    pipeline dp {}: iteration {}, energy {}{}\n", p.value("dp_rank", 0),
                      number(field(p, "iteration_time"), "s"), number(field(p, "energy"), "J"),
                      p.contains("plan") ? fmt::format(", {}", p.value("plan", "")) : ""));
  print_job_budget(field(job, "power_budget"));
  if (field(job, "end_detail").is_string())
    print(fmt::format("  ended: {}\n", end_reason(field(job, "end_detail").get<std::string>())));
}

int show_status(const StatusArgs& args) {
  ServerCall call(args.server);
  json body = call("GET", args.job_id.empty() ? "/jobs" : "/jobs/" + client::encode_path_segment(args.job_id));
  if (args.json) {
    std::printf("%s\n", body.dump(1).c_str());
    return kExitOk;
  }
  if (!args.job_id.empty()) {
    print_job(body);
    return kExitOk;
  }
  try {  // a server without a budget, or an older one without the route, shows none
    print_budget(call("GET", "/power_budget"));
  } catch (const Error&) {}
  if (body.empty()) std::printf("no jobs\n");
  for (const auto& summary : body) {  // the details of each (one may end meanwhile: skip it)
    try {
      print_job(call("GET", "/jobs/" + client::encode_path_segment(summary.value("job_id", ""))));
    } catch (const Error&) {}
  }
  return kExitOk;
}

// Redraws the status every `seconds` until Ctrl-C: in place on a terminal (cursor home, clear),
// else one block after another, each headed by its time. A failed refresh (the server restarting)
// is shown and retried, not fatal.
int watch_status(const StatusArgs& args, double seconds) {
  StopOnSignal stop;
  const bool terminal = ::isatty(STDOUT_FILENO) != 0;
  while (!stop.flag()->load()) {
    std::time_t now = std::time(nullptr);
    char clock[32];
    std::strftime(clock, sizeof clock, "%H:%M:%S", std::localtime(&now));
    if (terminal) print("\x1b[H\x1b[2J");
    print(fmt::format("perseus status {} every {} s at {} (Ctrl-C to stop)\n", args.server, seconds, clock));
    try {
      show_status(args);
    } catch (const Error& e) {
      print(fmt::format("  {}\n", e.what()));
    }
    std::fflush(stdout);
    for (auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
         std::chrono::steady_clock::now() < until && !stop.flag()->load();)
      std::this_thread::sleep_for(
          std::min<std::chrono::duration<double>>(until - std::chrono::steady_clock::now(), 50ms));
  }
  return kExitOk;
}

// For a script that just started the server: asks until it answers or `seconds` passed; what is
// not "nobody answers" (a refused token) ends the wait at once.
void wait_for_server(const std::string& server, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    try {
      ServerCall call(server);
      call("GET", "/info");
      return;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::not_found) throw;
      if (std::chrono::steady_clock::now() >= deadline)
        throw Error(fmt::format("{}; waited {} s", e.what(), seconds), e.kind(), e.settings());
    }
    std::this_thread::sleep_for(100ms);
  }
}

int run_status(const StatusArgs& args) {
  if (args.wait) wait_for_server(args.server, *args.wait);
  if (args.watch) return watch_status(args, *args.watch);
  return show_status(args);
}

}  // namespace

Runner add_status_command(CLI::App& app) {
  auto args = std::make_shared<StatusArgs>();
  auto* cmd = app.add_subcommand("status", "What a running perseus serve is doing, job by job");
  cmd->add_option("job_id", args->job_id, "One job (default: every job)");
  cmd->add_option("--server", args->server, "perseus serve's URL (token: PERSEUS_TOKEN)")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print the server's JSON as it is");
  cmd->add_option("--watch", args->watch, "Refresh every SECONDS (default 2) until Ctrl-C, in place on a terminal")
      ->expected(0, 1)
      ->default_str("2")
      ->check(between(0.1, 3600.0));
  cmd->add_option("--wait", args->wait,
                  "Wait up to SECONDS for the server to answer (a script that just started it); exit 66 if it does "
                  "not")
      ->check(between(0.0, 3600.0));
  return [args] { return run_status(*args); };
}

}  // namespace perseus::cli
