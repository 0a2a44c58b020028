// POST /result bodies are the server's hot path: 1,024 ranks each send thousands of numbers per
// round. nlohmann's lexer and glibc's strtod take ~85 µs for a 4.4 KB result (over 85 ms of one
// core per round at 1,024 ranks), simdjson ~8 µs, so results are decoded with simdjson; every
// other body, and the text of a malformed one, goes through nlohmann (parse_body).
#include <simdjson.h>

#include <cmath>
#include <fmt/format.h>

#include "field_checks.hpp"
#include "perseus/protocol/models.hpp"

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

// Names an element only when it is bad: formatting a name per number would cost more than parsing.
std::vector<double> number_list(dom::element value, const std::string& name) {
  dom::array array;
  if (value.get_array().get(array)) bad(name, fmt::format("expected a list, got {}", type_name(value)));
  std::vector<double> out;
  out.reserve(array.size());
  for (dom::element v : array) {
    double d = 0;
    if (v.type() != Type::BOOL && !v.get_double().get(d) && std::isfinite(d)) out.push_back(d);
    else out.push_back(as_number(v, fmt::format("{}[{}]", name, out.size())));
  }
  return out;
}

Breakdown breakdown(dom::object body, const char* name) {
  Breakdown out;
  dom::element value;
  if (body[name].get(value)) return out;  // optional, as in the artifact
  dom::object object;
  if (value.get_object().get(object)) bad(name, fmt::format("expected an object, got {}", type_name(value)));
  for (dom::key_value_pair field : object) {
    std::string where = fmt::format("{}.{}", name, std::string_view(field.key));
    dom::array iterations;
    if (field.value.get_array().get(iterations))
      bad(where, fmt::format("expected a list of lists, got {}", type_name(field.value)));
    auto& rows = out[std::string(field.key)];
    for (dom::element row : iterations) rows.push_back(number_list(row, fmt::format("{}[{}]", where, rows.size())));
  }
  return out;
}

dom::element required(dom::object body, const char* name) {
  dom::element value;
  if (body[name].get(value)) bad(name, "missing");
  return value;
}

}  // namespace

ProfilingResult profiling_result_from_text(std::string_view text) {
  // One parser per thread: its buffers grow to the largest result and are reused.
  thread_local dom::parser parser;
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
  result.iter_time = number_list(required(body, "iter_time"), "iter_time");
  result.iter_energy = number_list(required(body, "iter_energy"), "iter_energy");
  result.time_breakdown = breakdown(body, "time_breakdown");
  result.energy_breakdown = breakdown(body, "energy_breakdown");
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
