#pragma once
// A small blocking HTTP/1.1 client (Boost.Beast) for talking to `perseus serve`: one request
// per call on a kept-alive connection, reconnecting when the server closed it.
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "perseus/util/error.hpp"

namespace perseus::client {

// The server could not be reached, or stopped answering (connection refused or reset, no answer
// in time): unlike an HTTP error, this may pass when the server is back.
class ServerUnreachable : public Error {
 public:
  using Error::Error;
};

// The server took the connection but did not answer within the deadline (stopped, hung, or a
// barrier that takes longer).
class ServerTimeout : public ServerUnreachable {
 public:
  using ServerUnreachable::ServerUnreachable;
};

// The largest reply a client reads (a schedule of a million instructions is ~6 MB); a larger one
// fails the request (perseus::Error) as soon as its header announces it, before any of it is held.
inline constexpr std::size_t kMaxReplyBytes = std::size_t{64} << 20;
inline constexpr std::size_t kMaxReplyHeaderBytes = 16u << 10;

struct HttpReply {
  int status = 0;
  std::string body;
};

class HttpClient {
 public:
  // `url`: http://host:port (a trailing path is ignored). Throws perseus::Error on a bad URL.
  // `token`: sent as `Authorization: Bearer <token>` (perseus serve --token-file).
  explicit HttpClient(const std::string& url, std::string token = "");
  ~HttpClient();
  // Throws ServerUnreachable when the server cannot be reached or does not answer within `timeout`
  // (name lookup and connect included; zero: no deadline).
  HttpReply request(const std::string& method, const std::string& target, const std::string& body,
                    std::chrono::milliseconds timeout);
  // From any thread: ends the request in progress (ServerUnreachable "cancelled") and refuses
  // later ones. For shutting down a thread that may be waiting on the server.
  void cancel();
  const std::string& url() const { return url_; }
  // A job's secret (perseus serve gives one to a registration that asks with "new"): sent as the
  // Perseus-Job-Secret header on every later request; "" sends none.
  void set_job_secret(std::string secret);
  // The Perseus-Job-Secret header of the last reply ("" when it had none).
  const std::string& received_job_secret() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string url_;
};

// Percent-encodes a job id for use in a path ('+' and anything unusual).
std::string encode_path_segment(const std::string& text);

}  // namespace perseus::client
