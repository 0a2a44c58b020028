#include "perseus/protocol/models.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <fmt/format.h>
#include <set>

#include "field_checks.hpp"
#include "perseus/profile/instruction_kind.hpp"
#include "perseus/util/csv.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus::protocol {

void bad_field(const std::string& field, const std::string& problem) {
  throw RequestError(Refusal::invalid_request, fmt::format("field '{}': {}", safe_text(field, 200), problem));
}

int int_from_integer(long long value, const std::string& field) {
  if (value < -2147483648LL || value > 2147483647LL) bad_field(field, "out of range");
  return static_cast<int>(value);
}

std::optional<int> int_from_float(double value) {
  // Range first: casting a double beyond long long is undefined.
  if (!(std::abs(value) < 2147483648.0) || value != static_cast<double>(static_cast<long long>(value))) return {};
  return static_cast<int>(value);
}

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& field, const std::string& problem) { bad_field(field, problem); }

const char* type_name(const json& value) {
  if (value.is_boolean()) return "a boolean";
  if (value.is_number_integer() || value.is_number_unsigned()) return "an integer";
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "a list";
  if (value.is_object()) return "an object";
  return "null";
}

void require_object(const json& body) {
  if (!body.is_object()) bad("body", fmt::format("expected a JSON object, got {}", type_name(body)));
}

const json& field(const json& body, const std::string& name) {
  auto it = body.find(name);
  if (it == body.end()) bad(name, "missing");
  return *it;
}

int as_int(const json& value, const std::string& name) {
  if (value.is_number_integer() || value.is_number_unsigned()) return int_from_integer(value.get<long long>(), name);
  if (value.is_number_float())
    if (auto v = int_from_float(value.get<double>())) return *v;
  bad(name, fmt::format("expected an integer, got {}", type_name(value)));
}

int int_field(const json& body, const std::string& name, int minimum) {
  int v = as_int(field(body, name), name);
  if (v < minimum) bad(name, fmt::format("must be at least {}, got {}", minimum, v));
  return v;
}

// Whether text[i..] starts with a well-formed UTF-8 sequence (no overlong forms, no surrogates);
// its length, or 0.
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char c = byte(i);
  if (c < 0x80) return 1;
  std::size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
  if (n == 0 || (n == 3 && c > 0xEF) || i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  unsigned char second = byte(i + 1);
  if ((c == 0xE0 && second < 0xA0) || (c == 0xED && second > 0x9F) || (c == 0xF0 && second < 0x90) ||
      (c == 0xF4 && second > 0x8F))
    return 0;
  return n;
}

// Strings that become part of a job id, and so of a directory name and of URL paths: what a file
// name or a URL path segment cannot carry as is becomes '_' (a Hugging Face name "org/model"
// becomes "org_model"), so that any name a framework reports is accepted.
std::string id_part(const json& body, const std::string& name) {
  const json& value = field(body, name);
  if (!value.is_string()) bad(name, fmt::format("expected a string, got {}", type_name(value)));
  const auto& text = value.get_ref<const std::string&>();
  if (text.empty()) bad(name, "must not be empty");
  if (text.size() > kMaxJobIdBytes) bad(name, fmt::format("at most {} bytes, got {}", kMaxJobIdBytes, text.size()));
  return sanitize_id_part(text);
}

// Zeus's optional job_metadata ends the job id, so it is part of every URL Zeus's client builds
// without escaping: '?', '#' and '%' would change what those URLs mean. A '/' (a Hugging Face
// model name such as meta-llama/Llama-2-7b) does not: the routes take the rest of the path as the
// id; in the records' directory name it is replaced (records_dir_name).
std::string job_metadata(const json& body) {
  auto it = body.find("job_metadata");
  if (it == body.end() || it->is_null()) return "";
  if (!it->is_string()) bad("job_metadata", fmt::format("expected a string or null, got {}", type_name(*it)));
  auto text = it->get<std::string>();
  if (text.size() > kMaxJobIdBytes)
    bad("job_metadata", fmt::format("at most {} bytes, got {}", kMaxJobIdBytes, text.size()));
  for (char c : text)
    if (c == '\\' || c == '?' || c == '#' || c == '%' || static_cast<unsigned char>(c) < 0x20)
      bad("job_metadata",
          fmt::format("'{}' may not contain '\\', '?', '#', '%' or control characters", safe_text(text)));
  return text;
}

// A list of power states (power_state_range; Zeus's available_frequencies, where repeats are
// allowed as Zeus allows them): positive, stored unique and descending.
std::vector<int> power_states(const json& body, const std::string& name, bool repeats_allowed) {
  const json& states = field(body, name);
  if (!states.is_array()) bad(name, fmt::format("expected a list, got {}", type_name(states)));
  if (states.empty()) bad(name, "must not be empty");
  std::set<int> unique;
  for (std::size_t i = 0; i < states.size(); ++i) {
    std::string where = fmt::format("{}[{}]", name, i);
    int v = as_int(states[i], where);
    if (v <= 0) bad(where, fmt::format("must be positive, got {}", v));
    if (!unique.insert(v).second && !repeats_allowed) bad(where, fmt::format("{} appears twice", v));
  }
  return {unique.rbegin(), unique.rend()};
}

}  // namespace

std::string sanitize_id_part(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::size_t n = utf8_sequence(text, i);
    char c = text[i];
    bool unsafe = n == 0 || static_cast<unsigned char>(c) < 0x20 || c == 0x7F || c == '/' || c == '\\' || c == '+' ||
                  c == '?' || c == '#' || c == '%';
    if (unsafe) {
      out.push_back('_');
      i += n == 0 ? 1 : n;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  if (out == "." || out == "..") out.assign(out.size(), '_');
  return out;
}

std::string records_dir_name(const std::string& job_id) {
  std::string out;
  out.reserve(job_id.size());
  for (char c : job_id) {
    if (c == '/') out += "%2F";
    else if (c == '%') out += "%25";
    else out.push_back(c);
  }
  return out;
}

void check_job_id_length(const std::string& job_id) {
  if (job_id.size() > kMaxJobIdBytes)
    throw RequestError(Refusal::invalid_request,
                       fmt::format("the job id would be {} bytes, at most {}: shorten framework, model_name, "
                                   "partition_method or job_metadata",
                                   job_id.size(), kMaxJobIdBytes));
}

const std::vector<std::string>& pipe_instruction_names() {
  static const std::vector<std::string> names = {"load",
                                                 "forward",
                                                 "backward",
                                                 "p2p",
                                                 "cc",
                                                 "step",
                                                 "low",
                                                 "high",
                                                 "other",
                                                 "pure_backward",
                                                 "backward_input",
                                                 "backward_weight",
                                                 "forward_backward"};
  return names;
}

bool is_compute_instruction(const std::string& name) { return parse_instruction_kind(name).has_value(); }

std::vector<InstructionKind> compute_kinds(const std::vector<std::string>& pipe_schedule) {
  std::vector<InstructionKind> kinds;
  for (const auto& name : pipe_schedule)
    if (auto kind = parse_instruction_kind(name)) kinds.push_back(*kind);
  return kinds;
}

json parse_body(const std::string& text) {
  try {
    check_json_depth(text);
    return json::parse(text);
  } catch (const JsonTooDeep& e) {
    throw RequestError(Refusal::invalid_request, fmt::format("field 'body': {}", e.what()));
  } catch (const json::parse_error& e) {
    throw RequestError(Refusal::invalid_request, fmt::format("field 'body': malformed JSON at byte {}", e.byte));
  } catch (const json::exception& e) {  // e.g. 406: a number too large for a double
    throw RequestError(Refusal::invalid_request, fmt::format("field 'body': {}", e.what()));
  }
}

Heartbeat heartbeat_from_json(const json& body) {
  if (!body.is_object()) bad("body", fmt::format("expected an object, got {}", type_name(body)));
  Heartbeat beat;
  beat.rank = int_field(body, "rank", 0);
  const json& progress = field(body, "progress");
  if (progress.is_number_unsigned()) beat.progress = progress.get<std::uint64_t>();
  else if (progress.is_number_integer() && progress.get<long long>() >= 0)
    beat.progress = progress.get<std::uint64_t>();
  else bad("progress", fmt::format("expected a non-negative integer, got {}", describe_json(progress)));
  return beat;
}

Leave leave_from_json(const json& body) {
  if (!body.is_object()) bad("body", fmt::format("expected an object, got {}", type_name(body)));
  Leave leave;
  leave.rank = int_field(body, "rank", 0);
  if (body.contains("reason")) {
    if (!body["reason"].is_string()) bad("reason", fmt::format("expected a string, got {}", type_name(body["reason"])));
    leave.reason =
        std::string(utf8_prefix(body["reason"].get_ref<const std::string&>(), 1000));  // into every rank's log
  }
  if (body.contains("finished")) {
    if (!body["finished"].is_boolean())
      bad("finished", fmt::format("expected true or false, got {}", type_name(body["finished"])));
    leave.finished = body["finished"].get<bool>();
  }
  return leave;
}

StragglerNotice straggler_from_json(const json& body) {
  require_object(body);
  StragglerNotice notice;
  auto number = [&](const char* name, double low, double high) -> std::optional<double> {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) bad(name, fmt::format("expected a number, got {}", type_name(*it)));
    double value = it->get<double>();
    if (!(value >= low && value <= high)) bad(name, fmt::format("must be between {} and {}, got {}", low, high, value));
    return value;
  };
  notice.slowdown = number("slowdown", 1.0, 100.0);
  notice.iteration_time = number("iteration_time", 1e-6, 1e6);
  if (notice.slowdown.has_value() == notice.iteration_time.has_value())
    bad(notice.slowdown ? "iteration_time" : "slowdown", "give exactly one of slowdown and iteration_time");
  if (body.contains("dp_rank") && !body["dp_rank"].is_null()) notice.dp_rank = int_field(body, "dp_rank", 0);
  for (const auto& [key, value] : body.items())
    if (key != "slowdown" && key != "iteration_time" && key != "dp_rank") bad(key, "unknown field");
  return notice;
}

JobInfo job_info_from_json(const json& body) {
  require_object(body);
  JobInfo info;
  if (auto it = body.find("job_id"); it != body.end()) {
    if (!it->is_string()) bad("job_id", fmt::format("expected a string, got {}", type_name(*it)));
    if (!it->get<std::string>().empty()) bad("job_id", "must be empty: the server assigns it");
  }
  info.pp_degree = int_field(body, "pp_degree", 1);
  info.dp_degree = int_field(body, "dp_degree", 1);
  info.tp_degree = int_field(body, "tp_degree", 1);
  info.world_size = int_field(body, "world_size", 1);
  // Each degree is below 2^31, so pp * dp fits in 62 bits; its product with tp may not, so that
  // one is checked (a product that wraps around must not pass for a small world size).
  long long pp_dp = static_cast<long long>(info.pp_degree) * info.dp_degree, product = 0;
  if (__builtin_mul_overflow(pp_dp, static_cast<long long>(info.tp_degree), &product))
    bad("world_size",
        fmt::format("must equal pp_degree * dp_degree * tp_degree, which is above 2^63, got {}", info.world_size));
  if (product != info.world_size)
    bad("world_size",
        fmt::format("must equal pp_degree * dp_degree * tp_degree = {}, got {}", product, info.world_size));
  if (auto it = body.find("job_secret"); it != body.end()) {  // a stored job's (the server drops a client's)
    bool hex = it->is_string() && it->get_ref<const std::string&>().size() <= 128 &&
               std::all_of(it->get_ref<const std::string&>().begin(), it->get_ref<const std::string&>().end(),
                           [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
    if (!hex) bad("job_secret", "expected at most 128 hexadecimal digits");
    info.job_secret = it->get<std::string>();
  }
  if (auto it = body.find("weight"); it != body.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0 && it->get<double>() <= 1e6))
      bad("weight", fmt::format("expected a priority weight between 0 (excluded) and 1e6, got {}", describe_json(*it)));
    info.weight = it->get<double>();
  }
  // Any of the artifact's model fields makes it the Perseus dialect (then all are required);
  // none of them is Zeus's JobInfo.
  bool perseus = false;
  for (const char* name : {"framework", "model_name", "partition_method", "microbatch_size", "num_microbatches"})
    perseus = perseus || body.contains(name);
  if (!perseus) {
    info.dialect = Dialect::zeus;
    info.job_metadata = job_metadata(body);
    return info;
  }
  info.framework = id_part(body, "framework");
  info.model_name = id_part(body, "model_name");
  info.partition_method = id_part(body, "partition_method");
  info.microbatch_size = int_field(body, "microbatch_size", 1);
  info.num_microbatches = int_field(body, "num_microbatches", 1);
  return info;
}

RankInfo rank_info_from_json(const json& body) {
  require_object(body);
  RankInfo info;
  if (auto it = body.find("job_id"); it != body.end()) {
    if (!it->is_string()) bad("job_id", fmt::format("expected a string, got {}", type_name(*it)));
    if (it->get_ref<const std::string&>().size() > kMaxJobIdBytes)
      bad("job_id", fmt::format("at most {} bytes, got {}", kMaxJobIdBytes, it->get_ref<const std::string&>().size()));
    info.job_id = it->get<std::string>();
  }
  info.rank = int_field(body, "rank", 0);
  info.dp_rank = int_field(body, "dp_rank", 0);
  info.pp_rank = int_field(body, "pp_rank", 0);
  info.tp_rank = int_field(body, "tp_rank", 0);
  if (body.contains("available_frequencies") && !body.contains("pipe_schedule")) {
    info.dialect = Dialect::zeus;
    info.power_state_range = power_states(body, "available_frequencies", true);
    return info;
  }
  const json& schedule = field(body, "pipe_schedule");
  if (!schedule.is_array()) bad("pipe_schedule", fmt::format("expected a list, got {}", type_name(schedule)));
  const auto& names = pipe_instruction_names();
  for (std::size_t i = 0; i < schedule.size(); ++i) {
    std::string where = fmt::format("pipe_schedule[{}]", i);
    if (!schedule[i].is_string()) bad(where, fmt::format("expected a string, got {}", type_name(schedule[i])));
    auto name = schedule[i].get<std::string>();
    if (std::find(names.begin(), names.end(), name) == names.end())
      bad(where, fmt::format("unknown instruction '{}' (one of: {})", safe_text(name), fmt::join(names, ", ")));
    info.pipe_schedule.push_back(name);
  }
  info.power_state_range = power_states(body, "power_state_range", false);
  if (auto it = body.find("max_power_w"); it != body.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0 && it->get<double>() <= 100000))
      bad("max_power_w", fmt::format("expected watts between 0 and 100000, got {}", describe_json(*it)));
    info.max_power_w = it->get<double>();
  }
  if (auto it = body.find("min_power_w"); it != body.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0 && it->get<double>() <= 100000))
      bad("min_power_w", fmt::format("expected watts between 0 and 100000, got {}", describe_json(*it)));
    info.min_power_w = it->get<double>();
  }
  return info;
}

PowerStateSchedule schedule_from_json(const json& body) {
  require_object(body);
  PowerStateSchedule schedule;
  schedule.rank = int_field(body, "rank", 0);
  const json& states = field(body, "power_states");
  if (!states.is_array()) bad("power_states", fmt::format("expected a list, got {}", type_name(states)));
  for (std::size_t i = 0; i < states.size(); ++i)
    schedule.power_states.push_back(as_int(states[i], fmt::format("power_states[{}]", i)));
  if (auto it = body.find("power_limit"); it != body.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0 && it->get<double>() <= 100000))
      bad("power_limit", fmt::format("expected watts between 0 and 100000, got {}", describe_json(*it)));
    schedule.power_limit_w = it->get<double>();
  }
  return schedule;
}

json to_json(const JobInfo& info) {
  if (info.dialect == Dialect::zeus) {
    json out = {{"job_id", info.job_id},       {"pp_degree", info.pp_degree},   {"dp_degree", info.dp_degree},
                {"tp_degree", info.tp_degree}, {"world_size", info.world_size}, {"job_metadata", nullptr}};
    if (!info.job_metadata.empty()) out["job_metadata"] = info.job_metadata;
    if (!info.job_secret.empty()) out["job_secret"] = info.job_secret;
    if (info.weight != 1) out["weight"] = info.weight;
    return out;
  }
  json out = {{"job_id", info.job_id},
              {"pp_degree", info.pp_degree},
              {"dp_degree", info.dp_degree},
              {"tp_degree", info.tp_degree},
              {"world_size", info.world_size},
              {"framework", info.framework},
              {"model_name", info.model_name},
              {"partition_method", info.partition_method},
              {"microbatch_size", info.microbatch_size},
              {"num_microbatches", info.num_microbatches}};
  if (!info.job_secret.empty()) out["job_secret"] = info.job_secret;
  if (info.weight != 1) out["weight"] = info.weight;
  return out;
}

json to_json(const RankInfo& info) {
  if (info.dialect == Dialect::zeus)
    return {{"job_id", info.job_id},   {"rank", info.rank},       {"dp_rank", info.dp_rank},
            {"pp_rank", info.pp_rank}, {"tp_rank", info.tp_rank}, {"available_frequencies", info.power_state_range}};
  json out = {{"job_id", info.job_id},
              {"rank", info.rank},
              {"dp_rank", info.dp_rank},
              {"pp_rank", info.pp_rank},
              {"tp_rank", info.tp_rank},
              {"pipe_schedule", info.pipe_schedule},
              {"power_state_range", info.power_state_range}};
  if (info.max_power_w) out["max_power_w"] = *info.max_power_w;
  if (info.min_power_w) out["min_power_w"] = *info.min_power_w;
  return out;
}

json to_json(const PowerStateSchedule& schedule) {
  json out = {{"rank", schedule.rank}, {"power_states", schedule.power_states}};
  if (schedule.power_limit_w) out["power_limit"] = *schedule.power_limit_w;
  return out;
}

json to_zeus_json(const PowerStateSchedule& schedule) {
  json pairs = json::array();
  for (std::size_t i = 0; i < schedule.power_states.size() && i < schedule.instructions.size(); ++i)
    pairs.push_back(json::array({schedule.instructions[i], schedule.power_states[i]}));
  return {{"rank", schedule.rank}, {"frequencies", std::move(pairs)}};
}

json to_json(const ProfilingResult& result) {
  json out = {{"rank", result.rank},
              {"iter_time", result.iter_time},
              {"iter_energy", result.iter_energy},
              {"time_breakdown", result.time_breakdown},
              {"energy_breakdown", result.energy_breakdown}};
  if (result.stale) out["stale"] = true;
  if (result.clock_changes > 0) out["clock_changes"] = result.clock_changes;
  if (result.clocks_late > 0) out["clocks_late"] = result.clocks_late;
  return out;
}

std::string make_job_id(const JobInfo& info, const std::string& scheduler_name,
                        std::chrono::system_clock::time_point when) {
  std::time_t t = std::chrono::system_clock::to_time_t(when);
  std::tm local{};
  localtime_r(&t, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d-%H-%M-%S", &local);
  if (info.dialect == Dialect::zeus)
    return fmt::format("{}+dp{}+pp{}+tp{}+{}{}{}", stamp, info.dp_degree, info.pp_degree, info.tp_degree,
                       scheduler_name, info.job_metadata.empty() ? "" : "+", info.job_metadata);
  return fmt::format("{}+{}+{}+{}+dp{}+pp{}+tp{}+mbs{}+nmb{}+{}", stamp, info.framework, info.model_name,
                     info.partition_method, info.dp_degree, info.pp_degree, info.tp_degree, info.microbatch_size,
                     info.num_microbatches, scheduler_name);
}

}  // namespace perseus::protocol
