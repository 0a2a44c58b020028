// What one client may make `perseus serve` hold: the token and the body size are checked before a
// body is read, connections per peer are capped, idle connections and clients that do not read
// their replies are dropped, jobs and their sizes are bounded before anything is allocated, and a
// job registered with a secret takes changes only from who holds it.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "perseus/util/atomic_file.hpp"
#include "server_fixture.hpp"

namespace perseus::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::vector<std::string> kTwoMicrobatches = {"forward", "forward", "backward", "backward"};

// A plain TCP connection to a test server, for requests no HTTP client would send.
struct RawConnection {
  explicit RawConnection(const std::string& url, int receive_buffer = 0) {
    int port = std::stoi(url.substr(url.rfind(':') + 1));
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (receive_buffer > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    timeval send_timeout{5, 0};  // a send the server no longer reads gives up
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  }
  ~RawConnection() { ::close(fd); }

  bool send(const std::string& data) {
    for (std::size_t sent = 0; sent < data.size();) {
      auto n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }

  // What arrives until the response header is complete, the peer closes, or `within` passes.
  std::string read_header(std::chrono::milliseconds within = 10s) {
    std::string text;
    auto deadline = std::chrono::steady_clock::now() + within;
    while (text.find("\r\n\r\n") == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char chunk[4096];
      auto n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) break;
      text.append(chunk, static_cast<std::size_t>(n));
    }
    return text;
  }

  // Whether the server closed (or reset) the connection within `within`, without reading from it.
  bool closed_by_server(std::chrono::milliseconds within = 10s) {
    pollfd p{fd, POLLRDHUP, 0};
    return ::poll(&p, 1, static_cast<int>(within.count())) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

  int fd = -1;
  bool connected = false;
};

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::stoi(response.substr(9, 3));
}

std::string detail(const client::HttpReply& reply) { return json::parse(reply.body).at("detail").get<std::string>(); }

struct BoundsTest : ServerDirTest {};

TEST_F(BoundsTest, TheTokenIsCheckedBeforeTheBodyIsRead) {
  TestServer server(settings(), "0123456789abcdef-token");
  RawConnection c(server.url);
  ASSERT_TRUE(c.connected);
  // 100 MB announced, none sent: the refusal comes from the header alone.
  ASSERT_TRUE(c.send("POST /register_job HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n"));
  auto response = c.read_header();
  EXPECT_EQ(status_of(response), 401) << response;
  EXPECT_NE(response.find("WWW-Authenticate: Bearer"), std::string::npos) << response;
  EXPECT_TRUE(c.closed_by_server()) << "a connection whose body was not read cannot be kept";
}

TEST_F(BoundsTest, ABodyAboveTheLimitGets413BeforeItIsRead) {
  server::HttpLimits limits;
  limits.max_body_bytes = 4096;
  TestServer server(settings(), "", limits);
  {
    RawConnection c(server.url);
    ASSERT_TRUE(c.send("POST /register_job HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"));
    auto response = c.read_header();
    EXPECT_EQ(status_of(response), 413) << response;
    EXPECT_NE(response.find("at most 4096"), std::string::npos) << response;
  }
  {  // a chunked body has no length up front: it is cut at the limit
    RawConnection c(server.url);
    ASSERT_TRUE(c.send("POST /register_job HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n" +
                       std::string(5000, ' ') + "\r\n"));
    EXPECT_EQ(status_of(c.read_header()), 413);
  }
  {  // curl's Expect: 100-continue gets the refusal instead of the go-ahead
    RawConnection c(server.url);
    ASSERT_TRUE(
        c.send("POST /register_job HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n"));
    EXPECT_EQ(status_of(c.read_header()), 413);
  }
  // A body within the limit is read and answered as usual.
  std::string body = job_body(1).dump() + std::string(3000, ' ');
  EXPECT_EQ(server.call("POST", "/register_job", body).status, 200);
}

TEST_F(BoundsTest, EachPeerHoldsAtMostItsShareOfConnections) {
  server::HttpLimits limits;
  limits.max_connections_per_peer = 3;
  TestServer server(settings(), "", limits);
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<RawConnection>(server.url));
    ASSERT_TRUE(held.back()->send("GET /info HTTP/1.1\r\nHost: x\r\n\r\n"));
    ASSERT_EQ(status_of(held.back()->read_header()), 200);  // accepted and counted
  }
  RawConnection fourth(server.url);
  EXPECT_TRUE(fourth.closed_by_server()) << "a fourth connection from the same address is closed";
  ASSERT_TRUE(held[0]->send("GET /info HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_of(held[0]->read_header()), 200) << "the held ones still work";
  held.pop_back();  // one closes: there is room again (the server notices the close on its own time)
  bool served = false;
  for (int attempt = 0; attempt < 200 && !served; ++attempt) {
    RawConnection again(server.url);
    served = again.send("GET /info HTTP/1.1\r\nHost: x\r\n\r\n") && status_of(again.read_header(2s)) == 200;
    if (!served) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(served);
}

TEST_F(BoundsTest, IdleConnectionsAreClosed) {
  server::HttpLimits limits;
  limits.idle_timeout = 200ms;
  TestServer server(settings(), "", limits);
  RawConnection silent(server.url);
  EXPECT_TRUE(silent.closed_by_server()) << "a connection that never sends a request";
  RawConnection kept(server.url);
  ASSERT_TRUE(kept.send("GET /info HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_of(kept.read_header()), 200);
  EXPECT_TRUE(kept.closed_by_server()) << "a kept-alive connection with no next request";
  RawConnection slow(server.url);
  ASSERT_TRUE(slow.send("GET /info HTTP/1.1\r\n"));  // the header never completes
  EXPECT_TRUE(slow.closed_by_server());
}

TEST_F(BoundsTest, AScheduleRequestWaitingAtTheBarrierIsNotIdle) {
  server::HttpLimits limits;
  limits.idle_timeout = 100ms;
  TestServer server(settings(), "", limits);
  auto id = json::parse(server.post("/register_job", job_body(2)).body).get<std::string>();
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(server.post("/register_rank", rank_body(id, r, r, kTwoMicrobatches)).status, 200);
  auto first = server.get_async("/schedule/" + id + "?rank=0");
  std::this_thread::sleep_for(500ms);  // rank 0 waits at the barrier far longer than the idle timeout
  EXPECT_EQ(server.call("GET", "/schedule/" + id + "?rank=1").status, 200);
  EXPECT_EQ(first.get().status, 200);
}

TEST_F(BoundsTest, AClientThatDoesNotReadItsRepliesIsDropped) {
  server::HttpLimits limits;
  limits.write_timeout = 300ms;
  TestServer server(settings(), "", limits);
  RawConnection c(server.url, 4096);  // a small receive window that nobody empties
  std::string requests;
  for (int i = 0; i < 2000; ++i) requests += "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  // The replies (the web page, 28 KB each: ~56 MB) outgrow every buffer on the way within a few hundred
  // requests, however slowly a loaded machine serves them; the server's write then waits on the client.
  std::thread sender([&] { (void)c.send(requests); });
  EXPECT_TRUE(c.closed_by_server(30s)) << "the server still holds a connection whose client stopped reading";
  sender.join();
}

TEST_F(BoundsTest, TooManyJobsAre503AndEndedJobsMakeRoomFirst) {
  auto s = settings();
  s.max_jobs = 2;
  TestServer server(s);
  auto a = json::parse(server.post("/register_job", job_body(1)).body).get<std::string>();
  ASSERT_EQ(server.post("/register_job", job_body(2)).status, 200);
  auto full = server.post("/register_job", job_body(1));
  EXPECT_EQ(full.status, 503);
  EXPECT_NE(detail(full).find("max_jobs"), std::string::npos) << full.body;
  // Job a ends; the next registration forgets it early instead of being refused.
  ASSERT_EQ(server.post("/register_rank", rank_body(a, 0, 0, kTwoMicrobatches)).status, 200);
  ASSERT_EQ(server.post("/leave/" + client::encode_path_segment(a), {{"rank", 0}, {"reason", "test"}}).status, 200);
  EXPECT_EQ(server.post("/register_job", job_body(3)).status, 200);
  EXPECT_EQ(server.call("GET", "/jobs/" + client::encode_path_segment(a)).status, 404);
  EXPECT_EQ(server.jobs->job_count(), 2u);
}

TEST_F(BoundsTest, TheRanksOfAllJobsAreBoundedBeforeAnythingIsAllocated) {
  auto s = settings();
  s.max_total_ranks = 100;
  TestServer server(s);
  ASSERT_EQ(server.post("/register_job", job_body(8, 8)).status, 200);  // 64 ranks
  auto refused = server.post("/register_job", job_body(8, 8));
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(detail(refused).find("max_total_ranks"), std::string::npos) << refused.body;
  EXPECT_EQ(server.post("/register_job", job_body(4, 8)).status, 200);  // 32 more fit
}

TEST_F(BoundsTest, WorldSizeTimesScheduleLengthIsBounded) {
  auto s = settings();
  s.max_job_entries = 16;
  TestServer server(s);
  auto id = json::parse(server.post("/register_job", job_body(2)).body).get<std::string>();
  auto refused = server.post("/register_rank", rank_body(id, 0, 0, std::vector<std::string>(10, "forward")));
  EXPECT_EQ(refused.status, 422);
  EXPECT_NE(detail(refused).find("10 instructions x world size 2 = 20"), std::string::npos) << refused.body;
  EXPECT_EQ(server.post("/register_rank", rank_body(id, 0, 0, std::vector<std::string>(8, "forward"))).status, 200);
}

TEST_F(BoundsTest, DegreesWhoseProductWrapsAroundAreRefused) {
  TestServer server(settings());
  json body = job_body(1);
  // 968973220 * 49477 * 384773 = 2^64 + 4: a product taken in 64 bits wraps around to 4.
  body["pp_degree"] = 968973220;
  body["dp_degree"] = 49477;
  body["tp_degree"] = 384773;
  body["world_size"] = 4;
  auto reply = server.post("/register_job", body);
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(detail(reply).find("'world_size'"), std::string::npos) << reply.body;
  EXPECT_EQ(server.jobs->job_count(), 0u);
}

TEST_F(BoundsTest, ModelNamesBecomeSafeFileNamesAndJobIdsAreBounded) {
  TestServer server(settings());
  json hf = job_body(1);
  hf["model_name"] = "meta-llama/Llama-2-7b?v=1#x";
  auto reply = server.post("/register_job", hf);
  ASSERT_EQ(reply.status, 200) << reply.body;
  auto id = json::parse(reply.body).get<std::string>();
  EXPECT_NE(id.find("+meta-llama_Llama-2-7b_v=1_x+"), std::string::npos) << id;
  ASSERT_TRUE(server.jobs->flush_records(std::chrono::seconds(10)));  // records are written on their own thread
  EXPECT_TRUE(std::filesystem::is_directory(dir / id)) << "the records go to one directory named by the id";
  json dots = job_body(1);
  dots["partition_method"] = "..";
  reply = server.post("/register_job", dots);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_NE(json::parse(reply.body).get<std::string>().find("+__+"), std::string::npos);

  json long_part = job_body(1);
  long_part["model_name"] = std::string(201, 'm');
  reply = server.post("/register_job", long_part);
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(detail(reply).find("'model_name': at most 200 bytes, got 201"), std::string::npos) << reply.body;
  json long_id = job_body(1);
  long_id["model_name"] = std::string(150, 'm');
  long_id["framework"] = std::string(30, 'f');
  reply = server.post("/register_job", long_id);
  EXPECT_EQ(reply.status, 422);
  EXPECT_NE(detail(reply).find("the job id would be"), std::string::npos) << reply.body;
  EXPECT_EQ(server.jobs->job_count(), 2u);
}

TEST_F(BoundsTest, DurationsTooLongForTheClockDoNotFireAtOnce) {
  EXPECT_EQ(server::clamped_duration(1e10), server::clamped_duration(server::kMaxSettingSeconds));
  EXPECT_GT(server::clamped_duration(1e10).count(), 0);
  EXPECT_EQ(server::clamped_duration(-1).count(), 0);
  auto s = settings();
  s.round_timeout_s = 1e10;  // as nanoseconds it wraps around to the past
  TestServer server(s);
  auto id = json::parse(server.post("/register_job", job_body(2)).body).get<std::string>();
  ASSERT_EQ(server.post("/register_rank", rank_body(id, 0, 0, kTwoMicrobatches)).status, 200);
  std::this_thread::sleep_for(200ms);
  auto status = json::parse(server.call("GET", "/jobs/" + client::encode_path_segment(id)).body);
  EXPECT_EQ(status["phase"], "registering") << status.dump();
}

// The job secret, as perseus's client uses it: asked for at registration, then on every request.
struct SecretJob {
  SecretJob(TestServer& server, int pp) : http(server.url) {
    http.set_job_secret("new");
    auto reply = http.request("POST", "/register_job", job_body(pp).dump(), 5s);
    EXPECT_EQ(reply.status, 200) << reply.body;
    id = json::parse(reply.body).get<std::string>();  // still the id as a JSON string
    secret = http.received_job_secret();
    http.set_job_secret(secret);
  }
  client::HttpReply call(const std::string& method, const std::string& target, const json& body = nullptr) {
    return http.request(method, target, body.is_null() ? "" : body.dump(), 5s);
  }
  client::HttpClient http;
  std::string id, secret;
};

TEST_F(BoundsTest, AJobRegisteredWithASecretTakesChangesOnlyWithIt) {
  TestServer server(settings());
  SecretJob job(server, 2);
  EXPECT_EQ(job.secret.size(), 32u) << "128 random bits";
  SecretJob other(server, 1);
  EXPECT_NE(other.secret, job.secret);
  std::string path = client::encode_path_segment(job.id);

  // Anyone else, or another job's secret: 403 on every route that changes the job.
  client::HttpClient stranger(server.url), wrong(server.url);
  wrong.set_job_secret(other.secret);
  for (auto* c : {&stranger, &wrong}) {
    std::vector<std::tuple<std::string, std::string, json>> changes = {
        {"POST", "/register_rank", rank_body(job.id, 0, 0, kTwoMicrobatches)},
        {"POST", "/register_rank/" + path, rank_body("", 0, 0, kTwoMicrobatches)},
        {"GET", "/schedule/" + path + "?rank=0", nullptr},
        {"POST", "/result/" + path, result_body(0)},
        {"POST", "/heartbeat/" + path, {{"rank", 0}, {"progress", 1}}},
        {"POST", "/leave/" + path, {{"rank", 0}, {"reason", "not mine"}}},
        {"POST", "/straggler/" + path, {{"slowdown", 1.2}}},
        {"DELETE", "/straggler/" + path, nullptr}};
    for (const auto& [method, target, body] : changes) {
      auto reply = c->request(method, target, body.is_null() ? "" : body.dump(), 5s);
      EXPECT_EQ(reply.status, 403) << method << " " << target << ": " << reply.body;
      EXPECT_NE(reply.body.find("Perseus-Job-Secret"), std::string::npos) << reply.body;
    }
  }
  // Reading is not changing.
  EXPECT_EQ(stranger.request("GET", "/jobs/" + path, "", 5s).status, 200);
  // The job's own ranks, with the secret, run it as usual.
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(job.call("POST", "/register_rank", rank_body(job.id, r, r, kTwoMicrobatches)).status, 200);
  EXPECT_EQ(job.call("POST", "/heartbeat/" + path, {{"rank", 0}, {"progress", 1}}).status, 200);
  auto waiting = std::async(std::launch::async, [&] {
    client::HttpClient rank0(server.url);
    rank0.set_job_secret(job.secret);
    return rank0.request("GET", "/schedule/" + path + "?rank=0", "", 10s);
  });
  EXPECT_EQ(job.call("GET", "/schedule/" + path + "?rank=1").status, 200);
  EXPECT_EQ(waiting.get().status, 200);
  EXPECT_EQ(job.call("POST", "/result/" + path, result_body(0)).status, 200);
  // The secret is never shown: not in the job's status, not in its records.
  auto status = stranger.request("GET", "/jobs/" + path, "", 5s);
  EXPECT_EQ(status.body.find(job.secret), std::string::npos) << status.body;
  EXPECT_EQ(read_file(dir / job.id / "job.json").find(job.secret), std::string::npos);
}

TEST_F(BoundsTest, AJobsSecretSurvivesAServerRestart) {
  std::string id, secret;
  {
    TestServer server(settings());
    SecretJob job(server, 2);
    id = job.id, secret = job.secret;
  }
  TestServer restarted(settings());  // the same records directory: the job is restored
  client::HttpClient stranger(restarted.url), rank(restarted.url);
  rank.set_job_secret(secret);
  EXPECT_EQ(stranger.request("POST", "/register_rank", rank_body(id, 0, 0, kTwoMicrobatches).dump(), 5s).status, 403);
  EXPECT_EQ(rank.request("POST", "/register_rank", rank_body(id, 0, 0, kTwoMicrobatches).dump(), 5s).status, 200);
}

TEST_F(BoundsTest, JobsOfClientsThatAskForNoSecretWorkAsBefore) {
  TestServer server(settings());
  client::HttpClient artifact(server.url);  // the artifact's and Zeus's clients know of no secret
  auto reply = artifact.request("POST", "/register_job", job_body(1).dump(), 5s);
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(artifact.received_job_secret(), "");
  auto id = json::parse(reply.body).get<std::string>();
  EXPECT_EQ(artifact.request("POST", "/register_rank", rank_body(id, 0, 0, kTwoMicrobatches).dump(), 5s).status, 200);
  EXPECT_EQ(artifact.request("GET", "/schedule/" + client::encode_path_segment(id) + "?rank=0", "", 5s).status, 200);
}

TEST_F(BoundsTest, TheBearerTokenIsTheAdministratorsCredentialForEveryJob) {
  const std::string token = "0123456789abcdef-token";
  TestServer server(settings(), token);
  client::HttpClient rank0(server.url, token);
  rank0.set_job_secret("new");
  auto id = json::parse(rank0.request("POST", "/register_job", job_body(1).dump(), 5s).body).get<std::string>();
  ASSERT_EQ(rank0.received_job_secret().size(), 32u);
  client::HttpClient admin(server.url, token);  // no job secret
  EXPECT_EQ(admin.request("POST", "/leave/" + client::encode_path_segment(id), json{{"rank", 0}}.dump(), 5s).status,
            200);
}

}  // namespace
}  // namespace perseus::testing
