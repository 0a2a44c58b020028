#include "perseus/gpud/protocol.hpp"

#include <array>
#include <utility>

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

}  // namespace

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
