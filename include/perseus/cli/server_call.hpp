#pragma once
// One request to a running `perseus serve` from a command (status, straggler): the token from
// $PERSEUS_TOKEN, and errors that say what to do (Error: 66 when nobody answers, 1 otherwise).
#include <nlohmann/json.hpp>
#include <string>

#include "perseus/client/http_client.hpp"

namespace perseus::cli {

class ServerCall {
 public:
  explicit ServerCall(std::string server);
  // The JSON answer of a 200; throws Error naming the request, the status and the server's detail.
  nlohmann::json operator()(const std::string& method, const std::string& target, const std::string& body = "");

 private:
  std::string server_;
  client::HttpClient http_;
};

}  // namespace perseus::cli
