#pragma once
// What the client's units share to reach the server for one rank: the server's address and bearer
// token, the request deadline, the rank's identity in its job (rank, job id, job secret), and the
// kept-alive HTTP connection that the registration and the exchange take turns on.
//
// Threads and locking: nothing here is locked; one thread owns a ServerConnection at a time. The
// client's constructor's thread owns it while the client starts, then the exchange thread from its
// start until it is joined (it may finish the registration, setting the job id and secret). Any
// other thread reads the identity only after the owner published it (the client's `connected` flag,
// stored with release and loaded with acquire) or was joined. One exception: cancel() may be called
// from any thread, to cut short a request in progress. The heartbeat and a rank leaving its job do
// not share the connection: each opens its own from a copy of the Endpoint.
#include <chrono>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "perseus/client/http_client.hpp"

namespace perseus::client {

// Where the server is, and who this rank is in its job: what every connection to the server carries.
struct Endpoint {
  std::string server_url;
  std::string token;  // the server's bearer token
  std::chrono::milliseconds request_timeout{30000};
  int rank = 0;
  std::string job_id;      // "" until the job is registered or known
  std::string job_secret;  // "" when the job has none

  // A new connection carrying the token and the job's secret. Throws perseus::Error on a bad URL.
  std::unique_ptr<HttpClient> open() const;
};

class ServerConnection {
 public:
  explicit ServerConnection(Endpoint endpoint) : endpoint_(std::move(endpoint)) {}

  // Makes the HTTP connection; call() needs it. Throws perseus::Error on a bad URL.
  void open();
  // JSON from the server, within the request deadline. Throws ProfilingDone when the server says the
  // job is done, ServerUnreachable when it cannot be reached or is stopping (503), ServerTimeout
  // when it did not answer in time or superseded a schedule request (409 on a GET: ask again), and
  // perseus::Error for any other failure.
  nlohmann::json call(const std::string& method, const std::string& target, const nlohmann::json& body);
  // From any thread: ends the request in progress and refuses later ones (shutting down).
  void cancel();

  const Endpoint& endpoint() const { return endpoint_; }
  const std::string& job_id() const { return endpoint_.job_id; }
  const std::string& job_secret() const { return endpoint_.job_secret; }
  void set_job_id(std::string id) { endpoint_.job_id = std::move(id); }
  // Sent with every later request.
  void set_job_secret(std::string secret);
  // The job secret the server's last answer carried ("" when none).
  const std::string& received_job_secret() const { return http_->received_job_secret(); }

 private:
  Endpoint endpoint_;
  std::unique_ptr<HttpClient> http_;
};

}  // namespace perseus::client
