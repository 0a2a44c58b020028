// POST /register_job with a secret the client brings (Perseus-Job-Secret: 32+ hex digits): the
// ranks of a job whose rank 0 could not reach the server at start each register the job with the
// secret rank 0 shared; the server makes one job of them.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "perseus/client/http_client.hpp"
#include "perseus/protocol/job_secret.hpp"
#include "server_fixture.hpp"

namespace perseus::testing {
namespace {

using nlohmann::json;

struct Registration {
  int status;
  std::string body, secret;
};

Registration register_with(const TestServer& server, const std::string& secret, const json& job) {
  client::HttpClient c(server.url);
  c.set_job_secret(secret);
  auto reply = c.request("POST", "/register_job", job.dump(), std::chrono::seconds(10));
  return {reply.status, reply.body, c.received_job_secret()};
}

struct JobSecretRegistration : ServerDirTest {};

TEST_F(JobSecretRegistration, EveryRankBringingTheSecretGetsTheOneJob) {
  TestServer server(settings());
  const std::string secret = protocol::new_job_secret();
  ASSERT_TRUE(protocol::is_job_secret(secret)) << secret;
  auto first = register_with(server, secret, job_body(2));
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.secret, secret);
  auto second = register_with(server, secret, job_body(2));
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.body, first.body) << "the same job";
  EXPECT_EQ(json::parse(server.call("GET", "/jobs").body).size(), 1u);

  // The job is guarded by it: a request without it is refused, one with it is not.
  std::string id = json::parse(first.body).get<std::string>();
  std::string target = "/register_rank/" + client::encode_path_segment(id);
  client::HttpClient stranger(server.url);
  EXPECT_EQ(stranger.request("POST", target, rank_body(id, 0, 0, {"forward"}).dump(), std::chrono::seconds(5)).status,
            403);
  client::HttpClient rank(server.url);
  rank.set_job_secret(secret);
  EXPECT_EQ(rank.request("POST", target, rank_body(id, 0, 0, {"forward"}).dump(), std::chrono::seconds(5)).status, 200);
}

TEST_F(JobSecretRegistration, AnotherShapeWithTheSameSecretOrAMalformedSecretIsRefused) {
  TestServer server(settings());
  const std::string secret = protocol::new_job_secret();
  ASSERT_EQ(register_with(server, secret, job_body(2)).status, 200);
  auto other = register_with(server, secret, job_body(4));
  EXPECT_EQ(other.status, 409) << other.body;
  EXPECT_NE(other.body.find("world size 2"), std::string::npos) << other.body;
  for (const std::string& bad :
       std::vector<std::string>{"short", "0123456789ABCDEF0123456789ABCDEF", std::string(129, 'a')}) {
    auto refused = register_with(server, bad, job_body(2));
    EXPECT_EQ(refused.status, 422) << bad;
    EXPECT_NE(refused.body.find("Perseus-Job-Secret"), std::string::npos) << refused.body;
  }
  // "new" still asks the server for one; a distinct secret is a distinct job.
  auto asked = register_with(server, "new", job_body(2));
  ASSERT_EQ(asked.status, 200);
  EXPECT_TRUE(protocol::is_job_secret(asked.secret)) << asked.secret;
  EXPECT_EQ(register_with(server, protocol::new_job_secret(), job_body(2)).status, 200);
  EXPECT_EQ(json::parse(server.call("GET", "/jobs").body).size(), 3u);
}

}  // namespace
}  // namespace perseus::testing
