#pragma once
// The messages of the HTTP API, field for field as the Perseus artifact server
// sends and accepts them, with the validation that turns a bad request into a 422 naming the
// field.
#include <chrono>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "perseus/profile/instruction_kind.hpp"

namespace perseus::protocol {

// Why the server refuses a request. Domain code says which; http_status (replies.hpp) is the one
// place that turns it into the HTTP status the reply carries.
enum class Refusal {
  malformed,           // not an HTTP request the server can read, or a body a route cannot take at all
  unauthorized,        // the server's bearer token is missing or wrong
  invalid_request,     // a field, the body or a query parameter is bad, or over a limit of the job
  forbidden,           // the job's secret is missing or wrong, or the caller may not change this
  not_found,           // no such job, rank, resource or route (yet)
  method_not_allowed,  // the route does not take this method
  conflict,            // the request contradicts the job's state (already registered, no round running)
  too_large,           // a body, or a result, holds more than the server's settings or the job's schedule allow
  header_too_large,    // the request's header is over the server's limit
  job_ended,           // the job has ended: the detail is its outcome (the artifact's clients match on it)
  internal,            // the server failed (a bug): the detail says what
  over_capacity,       // the server holds as many jobs or ranks as it may
  not_stored,          // the change could not be made durable; nothing changed
  server_stopping,     // the server is shutting down
};

// A request the server refuses: why, and the `detail` it answers with.
class RequestError : public std::runtime_error {
 public:
  RequestError(Refusal refusal, const std::string& detail) : std::runtime_error(detail), refusal_(refusal) {}
  Refusal refusal() const { return refusal_; }

 private:
  Refusal refusal_;
};

// Instruction names a rank's pipe schedule may use (the artifact's PipeInstruction).
const std::vector<std::string>& pipe_instruction_names();
bool is_compute_instruction(const std::string& name);  // an instruction kind: forward, backward, backward_input, ...
// The kinds of a pipe schedule's compute instructions, in order (its other entries left out): the
// schedule parsed once, compared as kinds from there on.
std::vector<InstructionKind> compute_kinds(const std::vector<std::string>& pipe_schedule);

// The server speaks two dialects, told apart by the request bodies: the Perseus
// artifact's (pipe_schedule, power_state_range, power_states) and Zeus master's
// pipeline-frequency optimizer's (available_frequencies, frequencies as [instruction, MHz]).
enum class Dialect { perseus, zeus };

// A job id and each of its parts are at most this long (as Zeus's): the id names the job's records
// directory and appears in every log line and URL of the job.
inline constexpr std::size_t kMaxJobIdBytes = 200;

struct JobInfo {
  std::string job_id;
  int pp_degree = 1, dp_degree = 1, tp_degree = 1, world_size = 1;
  // Perseus dialect only.
  std::string framework, model_name, partition_method;
  int microbatch_size = 1, num_microbatches = 1;
  Dialect dialect = Dialect::perseus;
  // Zeus dialect only: appended to the job id when not empty.
  std::string job_metadata = {};
  // Set by the server when the registering client asked for one: every request that changes the
  // job must then carry it. Persisted with the job (to_json writes it when set); never shown.
  std::string job_secret = {};
  // Optional field "weight": the job's priority under a cluster power budget (its throughput counts
  // this many times); 1 by default, written only when it is not.
  double weight = 1;
};

struct RankInfo {
  std::string job_id;
  int rank = 0, dp_rank = 0, pp_rank = 0, tp_rank = 0;
  // Empty for Zeus's client, which does not send its instruction order: schedulers that serve it
  // take the order from their plan and say it in PowerStateSchedule::instructions.
  std::vector<std::string> pipe_schedule;
  std::vector<int> power_state_range;  // unique, sorted descending (Zeus: available_frequencies)
  Dialect dialect = Dialect::perseus;
  // The GPU's maximum power limit (W), when the client says it (optional field "max_power_w"): the
  // bound a measured result must keep (physical_bounds.hpp).
  std::optional<double> max_power_w = {};
  // The GPU's minimum power limit (W) when the client says it (optional field "min_power_w"): a
  // power budget never asks for a lower one.
  std::optional<double> min_power_w = {};
  bool operator==(const RankInfo&) const = default;
};

struct PowerStateSchedule {
  int rank = 0;
  std::vector<int> power_states;  // one per entry of the rank's pipe_schedule
  // The instruction of each power state, for a rank registered without a pipe_schedule.
  std::vector<std::string> instructions = {};
  // A cluster power budget's backstop: the GPU's power limit (W) while this schedule runs (optional
  // field "power_limit", absent: none; perseus's client sets it and restores the GPU's own at the end,
  // other clients ignore it).
  std::optional<double> power_limit_w = {};
};

// POST /heartbeat/{job_id}: a rank is alive, and how far its training thread got (hooks called),
// so that a rank that stopped — killed or hung — is told apart from one waiting at the barrier.
struct Heartbeat {
  int rank = 0;
  std::uint64_t progress = 0;
};

// POST /leave/{job_id}: a rank cannot take part any more (its GPU refused, perseus failed on
// it); the job ends so that no rank waits for it at the barrier.
// `finished`: the rank is done (its training ended and it closed its client), not failing: once every
// rank finished the job ends as done.
struct Leave {
  int rank = 0;
  std::string reason;
  bool finished = false;
};

// POST /straggler/{job_id}: an external fault detector says the job's iterations now take longer:
// `slowdown` times the measured all-max iteration time, or `iteration_time` seconds (exactly one).
// `dp_rank`, when given, names the slow pipeline (it keeps its plan; the others slow down to it).
struct StragglerNotice {
  std::optional<double> slowdown, iteration_time;
  std::optional<int> dp_rank;
};

using Breakdown = std::map<std::string, std::vector<std::vector<double>>>;

struct ProfilingResult {
  int rank = 0;
  std::vector<double> iter_time;    // seconds, per iteration
  std::vector<double> iter_energy;  // joules, per iteration
  Breakdown time_breakdown;         // instruction -> per iteration -> per occurrence, seconds
  Breakdown energy_breakdown;       // same shape, joules
  // perseus's client: this rank did not run the round's schedule from the round's start (it
  // arrived late), so the round's measurements mix schedules and the round is run again.
  // Optional in the body ("stale": true); the artifact's server ignores it.
  bool stale = false;
  // perseus's client: clock locks it made this round, and how many of them had not taken effect
  // by the end of the instruction they were made for (read back from the GPU). Optional in the
  // body ("clock_changes", "clocks_late"; 0 when absent).
  int clock_changes = 0, clocks_late = 0;
};

// Parsing checks every field and throws RequestError (invalid_request) naming it. `what` prefixes the
// field, e.g. "body".
JobInfo job_info_from_json(const nlohmann::json& body);
RankInfo rank_info_from_json(const nlohmann::json& body);
PowerStateSchedule schedule_from_json(const nlohmann::json& body);
Heartbeat heartbeat_from_json(const nlohmann::json& body);
Leave leave_from_json(const nlohmann::json& body);
StragglerNotice straggler_from_json(const nlohmann::json& body);
// What one POST /result may hold, checked while it is decoded (too_large naming the field), so
// that a result is refused before it is held: iterations (iter_time, iter_energy, rows of each
// breakdown instruction), and instructions named in each breakdown. 0: no bound.
struct ResultLimits {
  std::size_t max_iterations = 0;
  std::size_t max_instructions = 0;
};
// POST /result's body, decoded with simdjson (the hot path); same checks and messages.
ProfilingResult profiling_result_from_text(std::string_view body, const ResultLimits& limits = {});

nlohmann::json to_json(const JobInfo& info);
nlohmann::json to_json(const RankInfo& info);
nlohmann::json to_json(const PowerStateSchedule& schedule);
// Zeus's FrequencySchedule: {rank, frequencies: [[instruction, MHz], ...]} from `instructions`.
nlohmann::json to_zeus_json(const PowerStateSchedule& schedule);
nlohmann::json to_json(const ProfilingResult& result);

// `YYYY-MM-DD-HH-MM-SS+framework+model+partition+dpD+ppP+tpT+mbsB+nmbN+Scheduler`, local time;
// Zeus dialect: `YYYY-MM-DD-HH-MM-SS+dpD+ppP+tpT+Scheduler[+job_metadata]`.
std::string make_job_id(const JobInfo& info, const std::string& scheduler_name,
                        std::chrono::system_clock::time_point when);

// A free-text part of a job id made safe as a file name and a URL path segment: '/', '\\', '+',
// '?', '#', '%', control characters and invalid UTF-8 become '_' ("." and ".." too).
std::string sanitize_id_part(std::string_view text);
// Throws RequestError (invalid_request) when `job_id` is longer than kMaxJobIdBytes.
void check_job_id_length(const std::string& job_id);
// The job's records directory under the dump directory: its id with '/' (allowed in Zeus's
// job_metadata, e.g. a Hugging Face model name) written %2F and '%' written %25, so that it is one
// directory and two ids never share one (org/model and org_model stay apart).
std::string records_dir_name(const std::string& job_id);

// Parses JSON text; throws RequestError (invalid_request) saying where it is malformed.
nlohmann::json parse_body(const std::string& text);

}  // namespace perseus::protocol
