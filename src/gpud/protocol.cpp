#include "perseus/gpud/protocol.hpp"

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>

#include "perseus/util/safe_text.hpp"

namespace perseus::gpud {
namespace {

using gpu::GpuErrorKind;
constexpr std::array<std::pair<GpuErrorKind, std::string_view>, 6> kNames{{
    {GpuErrorKind::library_missing, "library_missing"},
    {GpuErrorKind::no_permission, "no_permission"},
    {GpuErrorKind::not_supported, "not_supported"},
    {GpuErrorKind::invalid_argument, "invalid_argument"},
    {GpuErrorKind::busy, "busy"},
    {GpuErrorKind::other, "other"},
}};

using nlohmann::json;

gpu::GpuError bad(const std::string& message) { return gpu::GpuError(GpuErrorKind::invalid_argument, message); }

unsigned unsigned_arg(const json& request, const char* name) {
  auto it = request.find(name);
  if (it == request.end()) throw bad(fmt::format("field '{}': missing", name));
  if (!it->is_number_unsigned() || it->get<std::uint64_t>() > 0xffffffffu)
    throw bad(fmt::format("field '{}': expected a non-negative integer, got {}", name, describe_json(*it)));
  return it->get<unsigned>();
}

// Each operation and the arguments it needs besides `device` (none for the first three).
struct Operation {
  std::string_view name;
  bool device;
  std::array<const char*, 2> args;
};
constexpr std::array<Operation, 21> kOperations{{
    {"hello", false, {}},
    {"device_count", false, {}},
    {"rapl", false, {}},
    {"name", true, {}},
    {"uuid", true, {}},
    {"supported_memory_clocks", true, {}},
    {"supported_graphics_clocks", true, {"memory", nullptr}},
    {"current_graphics_clock", true, {}},
    {"current_memory_clock", true, {}},
    {"power_limit", true, {}},
    {"power_limit_range", true, {}},
    {"total_energy", true, {}},
    {"power_usage", true, {}},
    {"claim", true, {}},
    {"release", true, {}},
    {"lock_graphics_clock", true, {"min", "max"}},
    {"lock_memory_clock", true, {"min", "max"}},
    {"set_power_limit", true, {"mw", nullptr}},
    {"reset_graphics_clock", true, {}},
    {"reset_memory_clock", true, {}},
    {"reset", true, {}},
}};

}  // namespace

Request parse_request(std::string_view line) {
  json request;
  try {
    check_json_depth(line, 4);  // a request is one flat object
    request = json::parse(line);
  } catch (const JsonTooDeep& e) {
    throw bad(fmt::format("malformed request: {}", e.what()));
  } catch (const json::exception& e) {  // its message quotes the bytes it stopped at
    throw bad(fmt::format("malformed request: {}", safe_text(e.what())));
  }
  if (!request.is_object()) throw bad("a request is a JSON object");
  auto op_it = request.find("op");
  if (op_it == request.end() || !op_it->is_string()) throw bad("field 'op': missing");
  Request out;
  out.op = op_it->get<std::string>();
  const Operation* found = nullptr;
  for (const auto& o : kOperations)
    if (o.name == out.op) found = &o;
  if (found == nullptr) throw bad(fmt::format("field 'op': unknown operation '{}'", safe_text(out.op, 100)));
  if (found->device) out.device = unsigned_arg(request, "device");
  for (const char* arg : found->args) {
    if (arg == nullptr) continue;
    unsigned value = unsigned_arg(request, arg);
    std::string_view name = arg;
    (name == "memory" ? out.memory : name == "min" ? out.min : name == "max" ? out.max : out.mw) = value;
  }
  return out;
}

std::string_view error_kind_name(GpuErrorKind kind) {
  for (const auto& [k, name] : kNames)
    if (k == kind) return name;
  return "other";
}

std::optional<GpuErrorKind> error_kind_from_name(std::string_view name) {
  for (const auto& [k, n] : kNames)
    if (n == name) return k;
  return std::nullopt;
}

}  // namespace perseus::gpud
