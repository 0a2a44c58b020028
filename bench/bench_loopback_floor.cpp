// What this machine's loopback TCP can do at all for the round shape of bench_server_load, with
// no HTTP, no JSON and no job logic: N connections; per round each client sends a "result" the
// server answers at once, then a "schedule request" the server answers only when all N have
// arrived (the barrier). Fixed-size messages, raw Asio, one server thread and one client thread
// as in the load benchmark. The cycle latency here is a floor under perseus serve's.
//
//   perseus_bench_loopback_floor [--ranks N] [--rounds R] [--request BYTES] [--response BYTES]
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "loopback_bench.hpp"

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace perseus::bench;

namespace {

struct Setup {
  int ranks = 1024, rounds = 100;
  std::size_t request = 6600, response = 200;
};

// Server side of one connection: answers the result at once, holds the schedule request.
class Peer : public std::enable_shared_from_this<Peer> {
 public:
  Peer(tcp::socket socket, const Setup& setup, std::vector<std::shared_ptr<Peer>>& waiting)
      : socket_(std::move(socket)), in_(setup.request), out_(setup.response), setup_(setup), waiting_(waiting) {}

  void read() {
    asio::async_read(socket_, asio::buffer(in_), [self = shared_from_this()](auto ec, std::size_t) {
      if (ec) return;
      self->result_next_ = !self->result_next_;
      if (!self->result_next_) return self->write();  // that was a result: acknowledged at once
      self->waiting_.push_back(self);
      if (static_cast<int>(self->waiting_.size()) < self->setup_.ranks) return;
      auto release = std::move(self->waiting_);
      self->waiting_.clear();
      for (auto& peer : release) peer->write();
    });
  }

 private:
  void write() {
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](auto ec, std::size_t) {
      if (!ec) self->read();
    });
  }

  tcp::socket socket_;
  std::vector<char> in_, out_;
  const Setup& setup_;
  std::vector<std::shared_ptr<Peer>>& waiting_;
  bool result_next_ = true;  // the next message read is a result, else a schedule request
};

struct Round {
  Clock::time_point start = Clock::time_point::max(), end = Clock::time_point::min();
};

// Client side: result, then schedule request, R times.
class Rank : public std::enable_shared_from_this<Rank> {
 public:
  Rank(asio::io_context& io, const Setup& setup, std::vector<Round>& rounds)
      : socket_(io), in_(setup.response), out_(setup.request), setup_(setup), rounds_(rounds) {}

  tcp::socket& socket() { return socket_; }

  void step() {
    if (!asking_) {
      if (round_ == setup_.rounds) return;
      auto& r = rounds_[static_cast<std::size_t>(round_)];
      r.start = std::min(r.start, Clock::now());
    }
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](auto ec, std::size_t) {
      if (ec) return;
      asio::async_read(self->socket_, asio::buffer(self->in_), [self](auto ec2, std::size_t) {
        if (ec2) return;
        if (self->asking_) {
          auto& r = self->rounds_[static_cast<std::size_t>(self->round_++)];
          r.end = std::max(r.end, Clock::now());
        }
        self->asking_ = !self->asking_;
        self->step();
      });
    });
  }

 private:
  tcp::socket socket_;
  std::vector<char> in_, out_;
  const Setup& setup_;
  std::vector<Round>& rounds_;
  int round_ = 0;
  bool asking_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  Setup setup;
  for (int i = 1; i + 1 < argc; i += 2) {
    long value = std::atol(argv[i + 1]);
    if (!std::strcmp(argv[i], "--ranks")) setup.ranks = static_cast<int>(value);
    else if (!std::strcmp(argv[i], "--rounds")) setup.rounds = static_cast<int>(value);
    else if (!std::strcmp(argv[i], "--request")) setup.request = static_cast<std::size_t>(value);
    else if (!std::strcmp(argv[i], "--response")) setup.response = static_cast<std::size_t>(value);
  }
  raise_open_file_limit();

  asio::io_context server_io(1), client_io(1);
  tcp::acceptor acceptor(server_io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  std::vector<std::shared_ptr<Peer>> waiting;
  std::function<void()> accept = [&] {
    acceptor.async_accept([&](auto ec, tcp::socket socket) {
      if (ec) return;
      socket.set_option(tcp::no_delay(true));
      std::make_shared<Peer>(std::move(socket), setup, waiting)->read();
      accept();
    });
  };
  accept();
  auto work = asio::make_work_guard(server_io);
  std::vector<std::thread> server;
  server.emplace_back([&] { server_io.run(); });

  std::vector<Round> rounds(static_cast<std::size_t>(setup.rounds));
  std::vector<std::shared_ptr<Rank>> ranks;
  for (int r = 0; r < setup.ranks; ++r) {
    ranks.push_back(std::make_shared<Rank>(client_io, setup, rounds));
    ranks.back()->socket().connect(acceptor.local_endpoint());
    ranks.back()->socket().set_option(tcp::no_delay(true));
  }
  double server_cpu0 = cpu_seconds(server), client_cpu0 = this_thread_cpu_seconds();
  auto start = Clock::now();
  for (auto& rank : ranks) rank->step();
  client_io.run();
  double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  double server_ms = (cpu_seconds(server) - server_cpu0) * 1e3 / setup.rounds;
  double client_ms = (this_thread_cpu_seconds() - client_cpu0) * 1e3 / setup.rounds;
  work.reset();
  server_io.stop();
  server.front().join();

  std::vector<double> cycle_ms;
  for (const auto& r : rounds) cycle_ms.push_back(std::chrono::duration<double, std::milli>(r.end - r.start).count());
  std::printf("ranks %d, rounds %d, request %zu B, response %zu B (raw loopback TCP, no HTTP)\n", setup.ranks,
              setup.rounds, setup.request, setup.response);
  std::printf("rounds/s %.1f\n", setup.rounds / total_s);
  std::printf("CPU per round: server %.1f ms, simulated ranks %.1f ms\n", server_ms, client_ms);
  std::printf("round cycle ms: p50 %.2f  p99 %.2f  max %.2f\n", percentile(cycle_ms, 0.5), percentile(cycle_ms, 0.99),
              *std::max_element(cycle_ms.begin(), cycle_ms.end()));
  return 0;
}
