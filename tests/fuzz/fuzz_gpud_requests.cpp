// perseus gpud's request decoder on arbitrary bytes: the daemon runs privileged, so a request
// line from any local user must decode or be refused with GpuError(invalid_argument), nothing else.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "perseus/gpud/protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > perseus::gpud::kMaxLineBytes) return 0;  // the daemon refuses longer lines before decoding
  try {
    (void)perseus::gpud::parse_request(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const perseus::gpu::GpuError& e) {
    if (e.kind() != perseus::gpu::GpuErrorKind::invalid_argument) __builtin_trap();
  }
  return 0;
}
