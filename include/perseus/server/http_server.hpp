#pragma once
// The HTTP/1.1 front of the job manager, on Boost.Beast: asynchronous sessions, each on its own
// strand, so any number of threads may run the io_context (a request waiting at the schedule
// barrier holds no thread), keep-alive, JSON in and out, and errors as {"detail": "..."} with the
// status the artifact server uses.
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "perseus/server/job_manager.hpp"
#include "perseus/server/wire.hpp"

namespace perseus::server {

struct HttpResponse {
  int status = 200;
  std::string body;                                               // JSON text, unless content_type says otherwise
  std::vector<std::pair<std::string, std::string>> headers = {};  // extra response headers
  std::string content_type = "application/json";
};

// The reply to a refused request: its status from the one mapping (http_status), its body
// {"detail": ...}.
inline HttpResponse refusal_response(Refusal refusal, std::string_view detail) {
  return {http_status(refusal), error_body(detail)};
}

// The request header that carries a job's secret (asked for with the value `new` on
// POST /register_job, then sent on every request of that job; see JobManager).
inline constexpr const char* kJobSecretHeader = "Perseus-Job-Secret";

// Who sent a request: the job secret it carried, and whether it proved to be the administrator
// (the server's bearer token, which may act on every job).
struct Credentials {
  std::string job_secret;
  bool admin = false;
  bool loopback = false;  // the request came from this machine
};

// Routes one request: method, target (path and query) and body. `respond` is called exactly
// once, now or later (a schedule request waits for its round), possibly on another thread.
void route_request(JobManager& jobs, const std::string& method, const std::string& target, const std::string& body,
                   std::function<void(HttpResponse)> respond, const Credentials& credentials = {});

// Compares in time that depends only on the lengths, not on where the texts differ: a token
// check must not tell an attacker how many leading characters were right.
bool constant_time_equal(std::string_view a, std::string_view b);

// What one client may make the server hold. A schedule request waiting at its round's barrier is
// not idle: no timeout applies while the job manager holds it.
struct HttpLimits {
  // A request body above this gets 413 (told by Content-Length before any of it is read). The
  // largest legitimate body, a POST /result of many iterations of a long schedule, is ~20 bytes
  // per number: 8 MiB holds ~400,000 measurements.
  std::size_t max_body_bytes = 8u << 20;
  // Connections one remote address may hold at once; more are closed as they are accepted.
  // 0: no cap.
  std::size_t max_connections_per_peer = 0;
  // Connections the server holds at once, from every address. Idle ones (no request in progress:
  // just accepted, kept alive, or still sending a header) may take all but a reserve of an eighth
  // (at least 8): past either bound the longest-idle one is closed to make room, so connections
  // held open from many addresses cannot keep requests out. 0: no bound.
  std::size_t max_connections = 0;
  // A kept-alive connection with no request in progress, or a request still arriving, is
  // closed after this long.
  std::chrono::milliseconds idle_timeout{60000};
  // A reply the client does not take within this long drops the connection.
  std::chrono::milliseconds write_timeout{30000};
  // GET /metrics answers without the token (for scrapers on a trusted network).
  bool public_metrics = false;
};

class HttpServer {
 public:
  // Binds and listens at once; throws perseus::Error when the address cannot be used. With a
  // `token`, every request must carry `Authorization: Bearer <token>` (401 otherwise, before
  // its body is read).
  HttpServer(boost::asio::io_context& io, JobManager& jobs, const std::string& host, std::uint16_t port,
             std::string token = "", HttpLimits limits = {});
  ~HttpServer();
  std::uint16_t port() const;  // the bound port (useful with port 0)
  void stop();                 // stops accepting; open sessions finish their current exchange

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace perseus::server
