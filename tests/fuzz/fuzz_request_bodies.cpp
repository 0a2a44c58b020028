// Every request body decoder of `perseus serve` on arbitrary bytes; the first byte picks the
// route. A RequestError (422 naming the field) is the only acceptable failure.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "perseus/server/models.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  using namespace perseus::server;
  try {
    switch (data[0] % 7) {
      case 0: job_info_from_json(parse_body(body)); break;       // POST /register_job
      case 1: rank_info_from_json(parse_body(body)); break;      // POST /register_rank
      case 2: profiling_result_from_text(body); break;           // POST /result (simdjson)
      case 3: heartbeat_from_json(parse_body(body)); break;      // POST /heartbeat
      case 4: schedule_from_json(parse_body(body)); break;       // the client reading GET /schedule
      case 5: {                                                  // POST /leave: the reason is echoed as JSON
        Leave leave = leave_from_json(parse_body(body));
        (void)nlohmann::json(leave.reason).dump();
        break;
      }
      case 6: straggler_from_json(parse_body(body)); break;      // POST /straggler

    }
  } catch (const RequestError&) {
  }
  return 0;
}
