// Every request body decoder of `perseus serve` on arbitrary bytes, through to the reply the
// server would send: the first byte picks the route. A RequestError (422 naming the field) is
// the only acceptable failure, and its error reply, like every success reply, must serialise.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "perseus/protocol/models.hpp"
#include "perseus/protocol/physical_bounds.hpp"
#include "perseus/protocol/replies.hpp"

namespace {

// What the server sends back: checked to be JSON, as a client would read it.
void reply(const std::string& body) {
  if (nlohmann::json::parse(body, nullptr, false).is_discarded()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  using namespace perseus::protocol;
  try {
    switch (data[0] % 8) {
      case 0:
        reply(json_body(to_json(job_info_from_json(parse_body(body)))));
        break;  // POST /register_job
      case 1:
        reply(json_body(to_json(rank_info_from_json(parse_body(body)))));
        break;   // POST /register_rank
      case 2: {  // POST /result (simdjson)
        ProfilingResult result = profiling_result_from_text(body);
        (void)implausible_result(result, 300);
        reply(json_body(to_json(result)));
        break;
      }
      case 3:
        heartbeat_from_json(parse_body(body));
        break;  // POST /heartbeat
      case 4:
        reply(json_body(to_json(schedule_from_json(parse_body(body)))));
        break;   // the client reading GET /schedule
      case 5: {  // POST /leave: the reason is echoed
        Leave leave = leave_from_json(parse_body(body));
        reply(json_body(nlohmann::json(leave.reason)));
        break;
      }
      case 6:
        straggler_from_json(parse_body(body));
        break;   // POST /straggler
      case 7: {  // a request target: path and query decoded, as the routes do, and echoed in an error
        auto question = body.find('?');
        std::string path = percent_decode(body.substr(0, question));
        if (question != std::string::npos) (void)rank_parameter(std::string_view(body).substr(question + 1));
        reply(error_body("job '" + path + "' not found"));
        break;
      }
    }
  } catch (const RequestError& e) {
    reply(error_body(e.what()));
  }
  return 0;
}
