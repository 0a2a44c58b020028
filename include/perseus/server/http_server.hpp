#pragma once
// The HTTP/1.1 front of the job manager, on Boost.Beast: asynchronous sessions, each on its own
// strand, so any number of threads may run the io_context (a request waiting at the schedule
// barrier holds no thread), keep-alive, JSON in and out, and errors as {"detail": "..."} with the
// status the artifact server uses.
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "perseus/server/job_manager.hpp"

namespace perseus::server {

struct HttpResponse {
  int status = 200;
  std::string body;  // JSON text
};

// Routes one request: method, target (path and query) and body. `respond` is called exactly
// once, now or later (a schedule request waits for its round), possibly on another thread.
void route_request(JobManager& jobs, const std::string& method, const std::string& target, const std::string& body,
                   std::function<void(HttpResponse)> respond);

// Compares in time that depends only on the lengths, not on where the texts differ: a token
// check must not tell an attacker how many leading characters were right.
bool constant_time_equal(std::string_view a, std::string_view b);

class HttpServer {
 public:
  // Binds and listens at once; throws perseus::Error when the address cannot be used. With a
  // `token`, every request must carry `Authorization: Bearer <token>` (401 otherwise).
  HttpServer(boost::asio::io_context& io, JobManager& jobs, const std::string& host, std::uint16_t port,
             std::string token = "");
  ~HttpServer();
  std::uint16_t port() const;  // the bound port (useful with port 0)
  void stop();                 // stops accepting; open sessions finish their current exchange

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace perseus::server
