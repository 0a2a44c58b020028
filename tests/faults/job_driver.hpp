#pragma once
// Jobs driven over HTTP as their ranks would drive them, for fault tests against a real
// `perseus serve`: what the server acknowledged (registrations, rounds whose every result got 200)
// is counted, so that a test can check it after killing and restarting the server.
#include <chrono>
#include <future>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "perseus/client/http_client.hpp"
#include "server_fixture.hpp"

namespace perseus::testing {

// A two-rank job (Perseus dialect, or Zeus's with `zeus_metadata`).
struct DrivenJob {
  std::string url, id;
  bool zeus = false;
  int acked_ranks = 0;   // register_rank answered 200
  int acked_rounds = 0;  // rounds whose every result was answered 200

  // Registers the job and its ranks; false at the first refusal (acknowledged parts counted).
  bool start(const std::string& base_url, const std::string& model, std::optional<std::string> zeus_metadata = {},
             std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    url = base_url;
    zeus = zeus_metadata.has_value();
    nlohmann::json body = job_body(2);
    if (zeus) {
      body = {{"job_id", ""},   {"pp_degree", 2},  {"dp_degree", 1},
              {"tp_degree", 1}, {"world_size", 2}, {"job_metadata", *zeus_metadata}};
    } else {
      body["model_name"] = model;
    }
    auto reply = call("POST", "/register_job", body.dump(), limit);
    if (!reply || reply->status != 200) return false;
    id = nlohmann::json::parse(reply->body).get<std::string>();
    for (int r = 0; r < 2; ++r) {
      nlohmann::json rank = zeus ? nlohmann::json{{"rank", r},
                                                  {"dp_rank", 0},
                                                  {"pp_rank", r},
                                                  {"tp_rank", 0},
                                                  {"available_frequencies", {1410, 1200}}}
                                 : rank_body(id, r, r, {"forward", "backward"});
      std::string path = zeus ? "/register_rank/" + client::encode_path_segment(id) : "/register_rank";
      auto ranked = call("POST", path, rank.dump(), limit);
      if (!ranked || ranked->status != 200) return false;
      ++acked_ranks;
    }
    return true;
  }

  // One round: both ranks ask (the barrier), then both report. False when a request failed.
  bool round(std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    std::string path = "/schedule/" + client::encode_path_segment(id);
    auto ask = [&](int rank) { return call("GET", path + "?rank=" + std::to_string(rank), "", limit); };
    auto first = std::async(std::launch::async, ask, 0);
    auto second = ask(1);
    auto one = first.get();
    if (!one || !second || one->status != 200 || second->status != 200) return false;
    for (int r = 0; r < 2; ++r) {
      auto reply = call("POST", "/result/" + client::encode_path_segment(id), result_body(r).dump(), limit);
      if (!reply || reply->status != 200) return false;
    }
    ++acked_rounds;
    return true;
  }

  // GET /jobs/{id}; null when the server does not serve it.
  nlohmann::json status() const {
    auto reply = call("GET", "/jobs/" + client::encode_path_segment(id), "", std::chrono::seconds(10));
    return reply && reply->status == 200 ? nlohmann::json::parse(reply->body) : nlohmann::json(nullptr);
  }

  std::optional<client::HttpReply> call(const std::string& method, const std::string& target, const std::string& body,
                                        std::chrono::milliseconds limit) const {
    try {
      return client::HttpClient(url).request(method, target, body, limit);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
};

}  // namespace perseus::testing
