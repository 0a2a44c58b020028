#include "server_connection.hpp"

#include <fmt/format.h>

#include "perseus/client/client.hpp"
#include "perseus/protocol/job_outcome.hpp"
#include "perseus/util/error.hpp"

namespace perseus::client {

using nlohmann::json;

std::unique_ptr<HttpClient> Endpoint::open() const {
  auto http = std::make_unique<HttpClient>(server_url, token);
  http->set_job_secret(job_secret);
  return http;
}

void ServerConnection::open() { http_ = endpoint_.open(); }

void ServerConnection::cancel() {
  if (http_) http_->cancel();
}

void ServerConnection::set_job_secret(std::string secret) {
  endpoint_.job_secret = std::move(secret);
  if (http_) http_->set_job_secret(endpoint_.job_secret);
}

json ServerConnection::call(const std::string& method, const std::string& target, const json& body) {
  auto reply = http_->request(method, target, body.is_null() ? "" : body.dump(), endpoint_.request_timeout);
  json parsed;
  try {
    parsed = json::parse(reply.body);
  } catch (const json::parse_error&) {
    throw Error(
        fmt::format("{} {}: the server answered {} with a body that is not JSON", method, target, reply.status));
  }
  if (reply.status == 503)  // the server is stopping: it may be back soon
    throw ServerUnreachable(fmt::format("{} {}: HTTP 503: {}", method, target, reply.body));
  // A schedule request this client gave up on, reaching a server that was paused, superseded the
  // one it asked again with: ask again.
  if (reply.status == 409 && method == "GET")
    throw ServerTimeout(fmt::format("{} {}: HTTP 409: {}", method, target, reply.body));
  if (reply.status != 200) {
    std::string detail = parsed.is_object() && parsed.contains("detail") && parsed["detail"].is_string()
                             ? parsed["detail"].get<std::string>()
                             : reply.body;
    if (protocol::says_done(detail)) throw ProfilingDone(detail);
    throw Error(fmt::format("{} {}: HTTP {}: {}", method, target, reply.status, detail));
  }
  return parsed;
}

}  // namespace perseus::client
