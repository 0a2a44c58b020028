// POST /result bodies are the server's hot path: 1,024 ranks each send thousands of numbers per
// round. nlohmann's lexer and glibc's strtod take ~85 µs for a 4.4 KB result (over 85 ms of one
// core per round at 1,024 ranks), simdjson ~8 µs, so results are decoded with simdjson; every
// other body, and the text of a malformed one, goes through nlohmann (parse_body).
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <fmt/format.h>

#include "field_checks.hpp"
#include "perseus/protocol/models.hpp"
#include "perseus/protocol/physical_bounds.hpp"

namespace perseus::protocol {
namespace {

namespace dom = simdjson::dom;
using Type = dom::element_type;

[[noreturn]] void bad(const std::string& field, const std::string& problem) { bad_field(field, problem); }

const char* type_name(dom::element value) {
  switch (value.type()) {
    case Type::BOOL:
      return "a boolean";
    case Type::INT64:
    case Type::UINT64:
      return "an integer";
    case Type::DOUBLE:
      return "a number";
    case Type::STRING:
      return "a string";
    case Type::ARRAY:
      return "a list";
    case Type::OBJECT:
      return "an object";
    default:
      return "null";
  }
}

double as_number(dom::element value, const std::string& name) {
  double v = 0;
  if (value.type() == Type::BOOL || value.get_double().get(v))
    bad(name, fmt::format("expected a number, got {}", type_name(value)));
  if (!std::isfinite(v)) bad(name, "must be finite");
  return v;
}

// Same rule as the other bodies: an integer, or an integral float such as 4.0 (Python clients).
int as_int(dom::element value, const std::string& name) {
  std::int64_t i = 0;
  if (value.type() == Type::INT64 || value.type() == Type::UINT64) {
    if (value.get_int64().get(i)) bad(name, "out of range");  // a uint64 above int64's range
    return int_from_integer(i, name);
  }
  if (value.type() == Type::DOUBLE)
    if (auto v = int_from_float(value.get_double().value_unsafe())) return *v;
  bad(name, fmt::format("expected an integer, got {}", type_name(value)));
}

// What a measured value may be (physical_bounds.hpp): a time or an energy.
struct Bound {
  double max;
  const char* unit;
  const char* why;
};
constexpr Bound kTimeBound{kMaxMeasuredSeconds, "s", "a day"};
constexpr Bound kEnergyBound{kMaxMeasuredJoules, "J", "a day at the most a GPU draws"};

[[noreturn]] void out_of_bounds(const std::string& name, double v, const Bound& bound) {
  bad(name, fmt::format("{} {} is no measurement: a value must be between 0 and {:.0f} {} ({})", v, bound.unit,
                        bound.max, bound.unit, bound.why));
}

[[noreturn]] void too_large(const std::string& name, const std::string& problem) {
  throw RequestError(Refusal::too_large, fmt::format("field '{}': {}", name, problem));
}

// Names an element only when it is bad: formatting a name per number would cost more than parsing.
// `most`: the most elements it may have (0: any number).
std::vector<double> number_list(dom::element value, const std::string& name, const Bound& bound, std::size_t most = 0) {
  dom::array array;
  if (value.get_array().get(array)) bad(name, fmt::format("expected a list, got {}", type_name(value)));
  if (most != 0 && array.size() > most)
    too_large(name, fmt::format("{} iterations, at most {} (the server's max_result_iterations setting)", array.size(),
                                most));
  std::vector<double> out;
  out.reserve(array.size());
  for (dom::element v : array) {
    double d = 0;
    if (v.type() == Type::BOOL || v.get_double().get(d) || !std::isfinite(d))
      d = as_number(v, fmt::format("{}[{}]", name, out.size()));
    if (!(d >= 0 && d <= bound.max)) out_of_bounds(fmt::format("{}[{}]", name, out.size()), d, bound);
    out.push_back(d);
  }
  return out;
}

// Every instruction has one row per iteration measured (`iterations`: the result's).
Breakdown breakdown(dom::object body, const char* name, const Bound& bound, std::size_t iterations_measured,
                    const ResultLimits& limits) {
  Breakdown out;
  dom::element value;
  if (body[name].get(value)) return out;  // optional, as in the artifact
  dom::object object;
  if (value.get_object().get(object)) bad(name, fmt::format("expected an object, got {}", type_name(value)));
  if (limits.max_instructions != 0 && object.size() > limits.max_instructions)
    too_large(name, fmt::format("{} instructions, at most {}", object.size(), limits.max_instructions));
  for (dom::key_value_pair field : object) {
    std::string where = fmt::format("{}.{}", name, std::string_view(field.key));
    dom::array iterations;
    if (field.value.get_array().get(iterations))
      bad(where, fmt::format("expected a list of lists, got {}", type_name(field.value)));
    if (iterations.size() > iterations_measured)
      too_large(where, fmt::format("{} rows for {} iterations measured (iter_time): one row per iteration",
                                   iterations.size(), iterations_measured));
    auto& rows = out[std::string(field.key)];
    rows.reserve(iterations.size());
    for (dom::element row : iterations)
      rows.push_back(number_list(row, fmt::format("{}[{}]", where, rows.size()), bound));
  }
  return out;
}

dom::element required(dom::object body, const char* name) {
  dom::element value;
  if (body[name].get(value)) bad(name, "missing");
  return value;
}

}  // namespace

ProfilingResult profiling_result_from_text(std::string_view text, const ResultLimits& limits) {
  // One parser per thread for the usual results: its buffers (~15 bytes per byte of JSON) grow to
  // the largest and are reused. A larger one gets a parser of its own, freed when it is decoded, so
  // that one large result does not make every I/O thread keep its buffers.
  constexpr std::size_t kReusedUpTo = 1u << 20;
  // Decoding takes ~10 bytes per byte of JSON. A body with more lists than the limits allow (rows of
  // empty lists cost the most: 3 bytes of JSON, 24 of vector) is refused before any of that.
  if (limits.max_iterations != 0 && limits.max_instructions != 0) {
    const std::size_t most_lists = 2 + 2 * limits.max_instructions * (limits.max_iterations + 1);
    if (static_cast<std::size_t>(std::count(text.begin(), text.end(), '[')) > most_lists)
      too_large("body", fmt::format("more lists than {} iterations of {} instructions hold (the server's "
                                    "max_result_iterations setting)",
                                    limits.max_iterations, limits.max_instructions));
  }
  thread_local dom::parser reused;
  std::optional<dom::parser> once;
  dom::parser& parser = text.size() <= kReusedUpTo ? reused : once.emplace();
  dom::element doc;
  if (auto error = parser.parse(text.data(), text.size()).get(doc)) {
    parse_body(std::string(text));  // throws with the byte nlohmann stops at
    bad("body", fmt::format("malformed JSON: {}", simdjson::error_message(error)));  // e.g. a number past 1e308
  }
  dom::object body;
  if (doc.get_object().get(body)) bad("body", fmt::format("expected a JSON object, got {}", type_name(doc)));
  ProfilingResult result;
  result.rank = as_int(required(body, "rank"), "rank");
  if (result.rank < 0) bad("rank", fmt::format("must be at least 0, got {}", result.rank));
  result.iter_time = number_list(required(body, "iter_time"), "iter_time", kTimeBound, limits.max_iterations);
  result.iter_energy = number_list(required(body, "iter_energy"), "iter_energy", kEnergyBound, limits.max_iterations);
  const std::size_t iterations = std::max(result.iter_time.size(), result.iter_energy.size());
  result.time_breakdown = breakdown(body, "time_breakdown", kTimeBound, iterations, limits);
  result.energy_breakdown = breakdown(body, "energy_breakdown", kEnergyBound, iterations, limits);
  dom::element stale;
  if (!body["stale"].get(stale)) {
    bool flag = false;
    if (stale.get_bool().get(flag)) bad("stale", fmt::format("expected true or false, got {}", type_name(stale)));
    result.stale = flag;
  }
  for (auto [name, field] : {std::pair{"clock_changes", &result.clock_changes}, {"clocks_late", &result.clocks_late}}) {
    dom::element value;
    if (body[name].get(value)) continue;  // optional
    *field = as_int(value, name);
    if (*field < 0) bad(name, fmt::format("must be at least 0, got {}", *field));
  }
  if (result.clocks_late > result.clock_changes)
    bad("clocks_late", fmt::format("{} is more than clock_changes ({})", result.clocks_late, result.clock_changes));
  return result;
}

}  // namespace perseus::protocol
