#pragma once
// The wire format between `perseus gpud` and its clients: one JSON object per line
// over a Unix stream socket. A request names an operation and its arguments,
//   {"op": "lock_graphics_clock", "device": 0, "min": 1200, "max": 1200}
// and gets one reply line, {"ok": true, "value": ...} or {"ok": false, "kind": "busy", "error": "..."},
// where kind is a GpuErrorKind's name, so the client raises the same GpuError NVML would have.
// Besides the GPU operations, {"op": "uuid", "device": N} answers the GPU's UUID, and
// {"op": "rapl"} the daemon's RAPL counters (cpu/rapl.hpp) for callers that may not read them:
// [{"package": 0, "dram": false, "energy_uj": ..., "max_energy_range_uj": ...}, ...].
#include <optional>
#include <string>
#include <string_view>

#include "perseus/gpu/gpu.hpp"

namespace perseus::gpud {

inline constexpr int kProtocolVersion = 1;
inline constexpr std::size_t kMaxLineBytes = 4096;  // every request is far smaller
inline constexpr const char* kDefaultSocket = "/run/perseus/gpud.sock";
inline constexpr const char* kSocketEnv = "PERSEUS_GPUD_SOCKET";

// One request line, decoded and checked for shape: the operation is known and every argument it
// needs is there as a 32-bit unsigned integer. (The daemon then checks the values against its GPUs.)
// Throws GpuError(invalid_argument) naming the field; this is what the fuzzer drives.
struct Request {
  std::string op;
  unsigned device = 0, memory = 0, min = 0, max = 0, mw = 0;
};
Request parse_request(std::string_view line);

std::string_view error_kind_name(gpu::GpuErrorKind kind);
std::optional<gpu::GpuErrorKind> error_kind_from_name(std::string_view name);

}  // namespace perseus::gpud
