// Load benchmark of `perseus serve`: N simulated ranks on loopback (default 1,024), each on its
// own kept-alive connection, register, then run R rounds of GET /schedule (the barrier) and
// POST /result. The server runs in-process on its own I/O thread exactly as `perseus serve`
// runs it; the ranks are asynchronous clients on a second thread.
//
// Two latencies per round: the cycle, from the first schedule request of the round to the last
// result acknowledged (rounds overlap: a rank asks for round r+1 as soon as its round-r result
// is acknowledged), which is the stall of a job whose ranks all reach the round at once; and the
// release, from the last rank's schedule request (when the barrier can open) to the last rank
// holding its schedule. Prints rounds per second, CPU per round and p50/p99/max.
//
//   perseus_bench_server_load [--ranks N] [--rounds R] [--stages S] [--tensor-parallel T]
//                             [--iterations I] [--microbatches M] [--threads T] [--dump DIR]
//                             [--scheduler NAME] [--url URL] [--scrape-hz F]
// Each result carries I iterations of M forward and M backward times and energies. The job is
// S stages x N/(S*T) pipelines x T tensor-parallel ranks (rank = (dp x S + pp) x T + tp). With
// --url the ranks load a `perseus serve` already running there (its own process, so that its
// memory can be read on its own) and the server-side options are that server's. --scrape-hz F:
// a scraper on its own thread and connection reads GET /metrics F times a second while the rounds
// run (what a Prometheus scraper costs the round rate).
#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <fmt/format.h>
#include <random>
#include <spdlog/spdlog.h>
#include <thread>

#include "loopback_bench.hpp"
#include "perseus/client/http_client.hpp"
#include "perseus/server/http_server.hpp"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using namespace perseus::bench;

namespace {

struct Round {
  Clock::time_point start = Clock::time_point::max(), end = Clock::time_point::min();
  Clock::time_point last_ask = Clock::time_point::min();  // when the barrier could open
  Clock::time_point released = Clock::time_point::min();  // when the last rank had its schedule
  int acked = 0;
};

struct Load {
  int ranks = 1024, rounds = 200;
  std::string job_id;
  std::vector<Round> round_stats;
  int finished = 0;
};

class Rank : public std::enable_shared_from_this<Rank> {
 public:
  Rank(asio::io_context& io, int rank, Load& load, std::string result)
      : stream_(io), rank_(rank), load_(load), result_(std::move(result)) {
    buffer_.reserve(16u << 10);
  }

  void start(const tcp::endpoint& server) {
    stream_.async_connect(server, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->fail("connect", ec);
      self->stream_.socket().set_option(tcp::no_delay(true));
      self->ask();
    });
  }

 private:
  void ask() {
    if (round_ == load_.rounds) {
      ++load_.finished;
      return;
    }
    auto& stats = load_.round_stats[static_cast<std::size_t>(round_)];
    stats.start = std::min(stats.start, Clock::now());
    stats.last_ask = std::max(stats.last_ask, Clock::now());
    send(http::verb::get, "/schedule/" + load_.job_id + "?rank=" + std::to_string(rank_), "", [this] {
      auto& stats = load_.round_stats[static_cast<std::size_t>(round_)];
      stats.released = std::max(stats.released, Clock::now());
      report();
    });
  }

  void report() {
    send(http::verb::post, "/result/" + load_.job_id, result_, [this] {
      auto& stats = load_.round_stats[static_cast<std::size_t>(round_)];
      stats.end = std::max(stats.end, Clock::now());
      ++stats.acked;
      ++round_;
      ask();
    });
  }

  template <typename Next>
  void send(http::verb verb, std::string target, std::string body, Next next) {
    req_ = {verb, target, 11};
    req_.set(http::field::host, "127.0.0.1");
    req_.keep_alive(true);
    req_.body() = std::move(body);
    req_.prepare_payload();
    http::async_write(stream_, req_, [self = shared_from_this(), next](beast::error_code ec, std::size_t) {
      if (ec) return self->fail("write", ec);
      self->res_ = {};
      http::async_read(self->stream_, self->buffer_, self->res_, [self, next](beast::error_code ec2, std::size_t) {
        if (ec2) return self->fail("read", ec2);
        if (self->res_.result_int() != 200) {
          std::fprintf(stderr, "rank %d: HTTP %u %s\n", self->rank_, self->res_.result_int(),
                       self->res_.body().c_str());
          std::exit(1);
        }
        next();
      });
    });
  }

  void fail(const char* what, beast::error_code ec) {
    std::fprintf(stderr, "rank %d: %s: %s\n", rank_, what, ec.message().c_str());
    std::exit(1);
  }

  beast::tcp_stream stream_;
  int rank_;
  Load& load_;
  std::string result_;
  int round_ = 0;
  beast::flat_buffer buffer_;
  http::request<http::string_body> req_;
  http::response<http::string_body> res_;
};

}  // namespace

int main(int argc, char** argv) {
  Load load;
  int stages = 8;
  int iterations = 5, microbatches = 16;  // per reported result
  int server_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string dump, url, scheduler = "AllMaxFrequency3D";
  double scrape_hz = 0;
  int tp = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tensor-parallel")) tp = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--url")) url = argv[i + 1];
    else if (!std::strcmp(argv[i], "--scheduler")) scheduler = argv[i + 1];
    else if (!std::strcmp(argv[i], "--ranks")) load.ranks = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) load.rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--stages")) stages = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dump")) dump = argv[i + 1];
    else if (!std::strcmp(argv[i], "--iterations")) iterations = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--microbatches")) microbatches = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) server_threads = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--scrape-hz")) scrape_hz = std::max(0.0, std::atof(argv[i + 1]));
  }
  if (load.ranks % (stages * tp) != 0) stages = 1, tp = 1;
  raise_open_file_limit();

  perseus::server::ServerSettings settings;
  settings.dump_data = !dump.empty();
  settings.dump_dir = dump.empty() ? "." : dump;
  settings.log_level = "warning";
  spdlog::set_level(spdlog::level::warn);
  settings.scheduler = scheduler;
  asio::io_context server_io(server_threads);
  std::optional<perseus::server::JobManager> jobs;
  std::optional<perseus::server::HttpServer> http_server;
  std::vector<std::thread> server_pool;
  if (url.empty()) {
    jobs.emplace(asio::make_strand(server_io), settings,
                 perseus::server::configure_scheduler(scheduler, json::object()));
    http_server.emplace(server_io, *jobs, "127.0.0.1", 0);
    for (int t = 0; t < server_threads; ++t)
      server_pool.emplace_back([&] {
        pthread_setname_np(pthread_self(), "server-io");  // so that profilers can tell the sides apart
        server_io.run();
      });
    url = "http://127.0.0.1:" + std::to_string(http_server->port());
  }
  auto colon = url.rfind(':');
  auto port = static_cast<unsigned short>(std::atoi(url.c_str() + colon + 1));

  // Register the job and its ranks (not timed).
  perseus::client::HttpClient setup(url);
  int dp = load.ranks / (stages * tp);
  json job = {{"job_id", ""},          {"pp_degree", stages},           {"dp_degree", dp},
              {"tp_degree", tp},       {"world_size", load.ranks},      {"framework", "bench"},
              {"model_name", "load"},  {"partition_method", "uniform"}, {"microbatch_size", 1},
              {"num_microbatches", 16}};
  load.job_id =
      json::parse(setup.request("POST", "/register_job", job.dump(), std::chrono::seconds(10)).body).get<std::string>();
  std::vector<std::string> schedule;
  for (int m = 0; m < 16; ++m) schedule.insert(schedule.end(), {"forward", "backward"});
  std::vector<int> clocks;
  for (int c = 1410; c >= 210; c -= 15) clocks.push_back(c);
  auto t0 = Clock::now();
  for (int r = 0; r < load.ranks; ++r) {
    json rank = {{"job_id", load.job_id},      {"rank", r},         {"dp_rank", r / (stages * tp)},
                 {"pp_rank", r / tp % stages}, {"tp_rank", r % tp}, {"pipe_schedule", schedule},
                 {"power_state_range", clocks}};
    auto reply = setup.request("POST", "/register_rank", rank.dump(), std::chrono::seconds(10));
    if (reply.status != 200) {
      std::fprintf(stderr, "register_rank %d: %s\n", r, reply.body.c_str());
      return 1;
    }
  }
  double register_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("registered %d ranks in %.2f s; rounds start\n", load.ranks, register_s);
  std::fflush(stdout);
  load.job_id = perseus::client::encode_path_segment(load.job_id);

  // A realistic result: per iteration, one time and energy per forward and backward, measured
  // values with full double precision (what the client sends), different for every rank.
  auto n = static_cast<std::size_t>(iterations), m = static_cast<std::size_t>(microbatches);
  std::mt19937_64 random(42);
  auto measured = [&](double low, double high, std::size_t count) {
    std::uniform_real_distribution<double> value(low, high);
    std::vector<double> out(count);
    for (auto& v : out) v = value(random);
    return out;
  };
  auto result_of = [&](int rank) {
    json result = {{"rank", rank}, {"iter_time", measured(1.0, 1.5, n)}, {"iter_energy", measured(250, 350, n)}};
    for (const char* kind : {"forward", "backward"})
      for (std::size_t i = 0; i < n; ++i) {
        result["time_breakdown"][kind].push_back(measured(0.01, 0.03, m));
        result["energy_breakdown"][kind].push_back(measured(2.0, 9.0, m));
      }
    return result.dump();
  };
  std::size_t body_bytes = result_of(0).size();

  load.round_stats.resize(static_cast<std::size_t>(load.rounds));
  asio::io_context client_io(1);
  tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), port);
  for (int r = 0; r < load.ranks; ++r) {
    std::make_shared<Rank>(client_io, r, load, result_of(r))->start(endpoint);
  }
  std::atomic<bool> rounds_done{false};
  std::size_t scrapes = 0, scrape_bytes = 0;
  double scrape_ms = 0;
  std::thread scraper;
  if (scrape_hz > 0)
    scraper = std::thread([&] {
      perseus::client::HttpClient metrics(url);
      const auto period = std::chrono::duration<double>(1.0 / scrape_hz);
      auto next = Clock::now();
      while (!rounds_done.load()) {
        auto t = Clock::now();
        auto reply = metrics.request("GET", "/metrics", "", std::chrono::seconds(10));
        scrape_ms += std::chrono::duration<double, std::milli>(Clock::now() - t).count();
        scrape_bytes = reply.body.size();
        ++scrapes;
        next += std::chrono::duration_cast<Clock::duration>(period);
        while (!rounds_done.load() && Clock::now() < next) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  auto start = Clock::now();
  double server_cpu0 = cpu_seconds(server_pool), client_cpu0 = this_thread_cpu_seconds();
  client_io.run();
  rounds_done = true;
  if (scraper.joinable()) scraper.join();
  if (scrapes > 0)
    std::printf("scraped GET /metrics %zu times (%.1f per second asked), %.2f ms each on average, %zu bytes\n", scrapes,
                scrape_hz, scrape_ms / double(scrapes), scrape_bytes);
  double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  double server_cpu_ms = (cpu_seconds(server_pool) - server_cpu0) * 1e3 / load.rounds;
  double client_cpu_ms = (this_thread_cpu_seconds() - client_cpu0) * 1e3 / load.rounds;

  std::vector<double> latencies_ms, release_ms;
  for (const auto& r : load.round_stats) {
    latencies_ms.push_back(std::chrono::duration<double, std::milli>(r.end - r.start).count());
    release_ms.push_back(std::chrono::duration<double, std::milli>(r.released - r.last_ask).count());
  }
  if (http_server) asio::post(server_io, [&] { http_server->stop(); });
  server_io.stop();
  for (auto& t : server_pool) t.join();
  std::printf("ranks %d (pp %d x dp %d x tp %d), rounds %d, result body %zu bytes, %s, registration %.2f s\n",
              load.ranks, stages, dp, tp, load.rounds, body_bytes,
              http_server ? fmt::format("in-process server, {} threads", server_threads).c_str() : url.c_str(),
              register_s);
  std::printf("rounds/s %.1f\n", load.rounds / total_s);
  if (http_server)
    std::printf("CPU per round: server %.1f ms (all its threads), simulated ranks %.1f ms\n", server_cpu_ms,
                client_cpu_ms);
  else std::printf("CPU per round: simulated ranks %.1f ms (the server's: its process)\n", client_cpu_ms);
  std::printf("round cycle ms (first ask .. last result):     p50 %.2f  p99 %.2f  max %.2f\n",
              percentile(latencies_ms, 0.5), percentile(latencies_ms, 0.99),
              *std::max_element(latencies_ms.begin(), latencies_ms.end()));
  std::printf("barrier release ms (last ask .. last schedule):  p50 %.2f  p99 %.2f  max %.2f\n",
              percentile(release_ms, 0.5), percentile(release_ms, 0.99),
              *std::max_element(release_ms.begin(), release_ms.end()));
  return load.finished == load.ranks ? 0 : 1;
}
