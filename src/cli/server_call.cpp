#include "perseus/cli/server_call.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>

#include "perseus/util/error.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus::cli {

namespace {
std::string token_from_environment() {
  const char* token = std::getenv("PERSEUS_TOKEN");
  return token != nullptr ? token : "";
}
// What a person does about a 403: the server names its header; the commands take the secret from
// the environment.
std::string forbidden_hint() {
  const char* secret = std::getenv("PERSEUS_JOB_SECRET");
  if (secret != nullptr && *secret != '\0') return ". PERSEUS_JOB_SECRET is set, but not to this job's secret";
  return ". Set PERSEUS_JOB_SECRET to the job's secret (`perseus simulate` prints it when it registers the job; in "
         "training, rank 0's client has it as job_secret) or PERSEUS_TOKEN to the server's token";
}

}  // namespace

ServerCall::ServerCall(std::string server) : server_(std::move(server)), http_(server_, token_from_environment()) {
  // A job registered with a secret takes changes (perseus straggler) only with it or the token.
  if (const char* secret = std::getenv("PERSEUS_JOB_SECRET")) http_.set_job_secret(secret);
}

nlohmann::json ServerCall::operator()(const std::string& method, const std::string& target, const std::string& body) {
  client::HttpReply reply;
  try {
    reply = http_.request(method, target, body, std::chrono::seconds(10));
  } catch (const client::ServerUnreachable& e) {
    throw Error(fmt::format("{} (is `perseus serve` running there?)", e.what()), ErrorKind::not_found);
  }
  nlohmann::json parsed = nlohmann::json::value_t::discarded;  // what the server sent is checked like any input
  try {
    check_json_depth(reply.body);
    parsed = nlohmann::json::parse(reply.body, nullptr, false);
  } catch (const JsonTooDeep&) {}
  if (reply.status != 200) {
    std::string detail = parsed.is_object() && parsed.contains("detail") && parsed["detail"].is_string()
                             ? parsed["detail"].get<std::string>()
                             : reply.body;
    if (reply.status == 403) detail += forbidden_hint();
    throw Error(fmt::format("{} {}{}: HTTP {}: {}", method, server_, target, reply.status, detail), ErrorKind::failed);
  }
  return parsed;
}

}  // namespace perseus::cli
