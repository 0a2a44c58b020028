#include "perseus/server/http_server.hpp"
#include "perseus/server/metrics.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>

#include "perseus/server/wire.hpp"
#include "perseus/util/error.hpp"

namespace perseus::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::size_t kReadBuffer = 16u << 10;  // a typical request in one read
// After a refusal sent before the body was read, what is left of the body is read and dropped
// (so that closing does not reset the connection before the client sees the refusal), in
// kDrainChunk pieces into one small buffer, for at most kDrainTime or kDrainBytes.
constexpr std::size_t kDrainChunk = 4096;
constexpr std::size_t kDrainBytes = 1u << 20;
constexpr auto kDrainTime = std::chrono::seconds(1);

class Session;

// Every connection the server holds, shared by the acceptor and every session (a session may
// outlive the server object while the io_context winds down). Two bounds: connections per remote
// address, and connections in all. Of the latter, idle ones — no request in progress: just
// accepted, kept alive between requests, or still sending a header — may hold at most
// `max_idle`, so that the rest stays free for requests in progress whatever other addresses hold
// (a host has many: 127.0.0.2, 127.0.0.3, ...). When a new connection would pass a bound, the
// longest-idle connection is closed to make room; only when every connection has a request in
// progress is the new one closed instead.
class Connections {
 public:
  Connections(std::size_t per_peer, std::size_t max_total, std::size_t max_idle)
      : per_peer_(per_peer), max_total_(max_total), max_idle_(max_idle) {}

  // A new connection from `peer`: false when it must be closed at once. `evict` gets the idle
  // sessions to close for it.
  bool admit(const asio::ip::address& peer, std::vector<std::weak_ptr<Session>>& evict) {
    std::lock_guard lock(mutex_);
    auto& n = per_peer_count_[peer];
    if (per_peer_ != 0 && n >= per_peer_) {
      if (n == 0) per_peer_count_.erase(peer);
      return false;
    }
    // The longest idle go first: one for the total, then as many as the idle bound needs.
    auto take_idle = [&] {
      if (idle_.empty()) return false;
      auto [session, weak] = idle_.front();
      evict.push_back(weak);
      index_.erase(session);
      idle_.pop_front();
      evicted_sessions_.insert(session);
      --total_;  // counted out now: its close follows on its own strand
      ++evicted_;
      return true;
    };
    if (max_total_ != 0 && total_ >= max_total_ && !take_idle()) {
      if (n == 0) per_peer_count_.erase(peer);
      return false;
    }
    while (max_idle_ != 0 && idle_.size() >= max_idle_ && take_idle()) {}
    ++n;
    ++total_;
    return true;
  }
  // The session is idle from now (waiting for a request's header) / has a request in progress.
  void idle(Session* session, std::weak_ptr<Session> weak) {
    std::lock_guard lock(mutex_);
    if (index_.count(session) != 0 || evicted_sessions_.count(session) != 0) return;
    idle_.emplace_back(session, std::move(weak));
    index_[session] = std::prev(idle_.end());
  }
  // False when the session was chosen to be closed: it must not start the request.
  bool busy(Session* session) {
    std::lock_guard lock(mutex_);
    if (evicted_sessions_.count(session) != 0) return false;
    auto it = index_.find(session);
    if (it != index_.end()) idle_.erase(it->second), index_.erase(it);
    return true;
  }
  // The session is gone.
  void release(const asio::ip::address& peer, Session* session) {
    std::lock_guard lock(mutex_);
    auto it = index_.find(session);
    if (it != index_.end()) idle_.erase(it->second), index_.erase(it);
    if (evicted_sessions_.erase(session) == 0) --total_;  // an evicted one was counted out already
    auto p = per_peer_count_.find(peer);
    if (p != per_peer_count_.end() && --p->second == 0) per_peer_count_.erase(p);
  }
  std::size_t per_peer() const { return per_peer_; }
  std::size_t max_total() const { return max_total_; }
  std::size_t max_idle() const { return max_idle_; }
  std::size_t evicted() const {
    std::lock_guard lock(mutex_);
    return evicted_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<asio::ip::address, std::size_t> per_peer_count_;
  std::list<std::pair<Session*, std::weak_ptr<Session>>> idle_;  // longest idle first
  std::unordered_map<Session*, std::list<std::pair<Session*, std::weak_ptr<Session>>>::iterator> index_;
  std::unordered_set<Session*> evicted_sessions_;
  std::size_t per_peer_, max_total_, max_idle_;
  std::size_t total_ = 0, evicted_ = 0;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, JobManager& jobs, const std::string& token, const HttpLimits& limits,
          std::shared_ptr<Connections> connections, asio::ip::address peer)
      : stream_(std::move(socket)),
        jobs_(jobs),
        token_(token),
        limits_(limits),
        connections_(std::move(connections)),
        peer_(std::move(peer)) {
    // Beast reads max(512, free capacity) per call: without room, a 5 KB result takes ~7 recvmsg.
    buffer_.reserve(kReadBuffer);
    metrics_->connection_opened();
  }
  ~Session() {
    connections_->release(peer_, this);
    metrics_->connection_closed();
  }

  void start() { read_header(); }

  // Chosen to make room (Connections::admit): closed on its own strand unless a request began.
  static void evict(const std::weak_ptr<Session>& weak) {
    auto self = weak.lock();
    if (!self) return;
    asio::post(self->stream_.get_executor(), [self] {
      self->evicted_ = true;
      self->close();
    });
  }

 private:
  // The header first: the token and the body's size are checked before any of the body is read.
  void read_header() {
    if (evicted_) return close();
    connections_->idle(this, weak_from_this());
    parser_.emplace();
    // Checked once the token is (a stranger learns nothing); none here would refuse every body.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    stream_.expires_after(limits_.idle_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  bool read_failed(beast::error_code ec) {
    if (!ec) return false;
    if (ec == http::error::end_of_stream) {
      close();
    } else if (ec == http::error::body_limit) {
      refuse(Refusal::too_large,
             fmt::format("request body too large: at most {} bytes (the server's max_body_bytes setting)",
                         limits_.max_body_bytes));
    } else if (ec == http::error::header_limit) {
      refuse(Refusal::header_too_large, "request header too large");
    } else {
      if (ec != beast::error::timeout && ec != asio::error::operation_aborted && ec != asio::error::connection_reset)
        spdlog::debug("read: {}", ec.message());
      if (ec.category() == beast::error_code(http::error::bad_method).category())
        refuse(Refusal::malformed, "malformed HTTP request");
      else close();
    }
    return true;
  }

  void on_header(beast::error_code ec) {
    if (read_failed(ec)) return;
    const auto& header = parser_->get();
    started_ = std::chrono::steady_clock::now();
    route_ =
        route_of(std::string_view(header.target().data(), header.target().size()).substr(0, header.target().find('?')));
    const bool public_metrics = limits_.public_metrics && route_ == "metrics" && header.method() == http::verb::get;
    if (!token_.empty() && !authorized(header) && !public_page(header) && !public_metrics) {
      unauthorized_ = true;
      return refuse(Refusal::unauthorized,
                    "missing or wrong bearer token (Authorization: Bearer <token>; the client's token option "
                    "or PERSEUS_TOKEN)");
    }
    // A request in progress: not idle, never closed to make room (unless it was chosen already).
    if (evicted_ || !connections_->busy(this)) return close();
    if (auto length = parser_->content_length(); length && *length > limits_.max_body_bytes)
      return refuse(Refusal::too_large,
                    fmt::format("request body too large: {} bytes, at most {} (the server's max_body_bytes setting)",
                                *length, limits_.max_body_bytes));
    parser_->body_limit(limits_.max_body_bytes);  // a chunked body stops here
    if (parser_->is_done()) return on_request();
    if (beast::iequals(header[http::field::expect], "100-continue")) {
      // curl and others wait for this before sending a large body.
      auto go_on = std::make_shared<http::response<http::empty_body>>(http::status::continue_, header.version());
      stream_.expires_after(limits_.write_timeout);
      return http::async_write(stream_, *go_on, [self = shared_from_this(), go_on](beast::error_code e, std::size_t) {
        if (e) return self->close();
        self->read_body();
      });
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(limits_.idle_timeout);
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (self->read_failed(ec)) return;
      self->on_request();
    });
  }

  void on_request() {
    request_ = parser_->release();
    parser_.reset();
    stream_.expires_never();  // a schedule request may wait a whole round
    std::string method(request_.method_string());
    std::string target(request_.target());
    Credentials credentials;
    // With a token, only its holder gets this far, but for the web page (public_page).
    credentials.admin = !token_.empty() && authorized(request_);
    credentials.loopback =
        peer_.is_loopback() || (peer_.is_v6() && peer_.to_v6().is_v4_mapped() &&
                                asio::ip::make_address_v4(asio::ip::v4_mapped, peer_.to_v6()).is_loopback());
    if (auto it = request_.find(kJobSecretHeader); it != request_.end())
      credentials.job_secret = std::string(it->value());
    route_request(
        jobs_, method, target, request_.body(),
        [self = shared_from_this()](HttpResponse response) {
          // The answer may come from the job manager's strand: write on this session's.
          asio::post(self->stream_.get_executor(),
                     [self, response = std::move(response)]() mutable { self->write(std::move(response)); });
        },
        credentials);
  }

  void write(HttpResponse response) {
    request_.body().clear();
    response_ = {};
    response_.version(version_ != 0 ? version_ : request_.version());
    version_ = 0;
    response_.result(static_cast<http::status>(response.status));
    metrics_->request_done(route_, response.status,
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
    response_.set(http::field::server, "perseus");
    response_.set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) response_.set(name, value);
    if (unauthorized_) response_.set(http::field::www_authenticate, "Bearer");
    unauthorized_ = false;
    response_.keep_alive(keep_alive_ && request_.keep_alive());
    response_.body() = std::move(response.body);
    response_.prepare_payload();
    stream_.expires_after(limits_.write_timeout);  // a client that does not read its reply is dropped
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->response_.body().clear();
      if (ec) return self->close();
      if (self->draining_) return self->drain();
      if (!self->response_.keep_alive()) return self->close();
      self->read_header();
    });
  }

  // The web page (web_page.hpp) holds no job data: exactly GET / needs no token, every other
  // target does (the page asks for it when a JSON route answers 401).
  static bool public_page(const http::request_parser<http::string_body>::value_type& header) {
    return header.method() == http::verb::get && header.target() == "/";
  }

  bool authorized(const http::request_parser<http::string_body>::value_type& header) const {
    auto it = header.find(http::field::authorization);
    if (it == header.end()) return false;
    std::string_view value(it->value().data(), it->value().size());
    constexpr std::string_view kScheme = "Bearer ";
    if (value.size() < kScheme.size() || !beast::iequals(beast::string_view(value.data(), kScheme.size()),
                                                         beast::string_view(kScheme.data(), kScheme.size())))
      return false;
    return constant_time_equal(value.substr(kScheme.size()), token_);
  }

  // Answers and closes without reading (the rest of) the request.
  void refuse(Refusal refusal, const std::string& detail) {
    keep_alive_ = false;
    draining_ = parser_.has_value() && parser_->is_header_done() && !parser_->is_done();
    version_ = parser_ && parser_->is_header_done() ? parser_->get().version() : 11;
    parser_.reset();
    request_ = {};
    write(refusal_response(refusal, detail));
  }

  // The body a refused request is still sending: read into one small buffer and dropped, briefly.
  void drain() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    if (!scratch_) {
      scratch_ = std::make_unique<std::array<char, kDrainChunk>>();
      drain_until_ = std::chrono::steady_clock::now() + kDrainTime;
    }
    auto left = drain_until_ - std::chrono::steady_clock::now();
    if (drained_ >= kDrainBytes || left <= std::chrono::steady_clock::duration::zero()) return close();
    stream_.expires_after(left);
    stream_.async_read_some(asio::buffer(*scratch_), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      if (ec) return self->close();
      self->drained_ += n;
      self->drain();
    });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  JobManager& jobs_;
  std::string token_;  // empty: no authorization required
  const HttpLimits limits_;
  std::shared_ptr<Connections> connections_;
  asio::ip::address peer_;
  bool evicted_ = false;
  bool unauthorized_ = false;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::string_view route_ = "other";  // route_of's: a static string
  std::shared_ptr<HttpMetrics> metrics_ = jobs_.http_metrics();
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  bool keep_alive_ = true;
  unsigned version_ = 0;  // of a request refused before it was read whole
  bool draining_ = false;
  std::unique_ptr<std::array<char, kDrainChunk>> scratch_;
  std::size_t drained_ = 0;
  std::chrono::steady_clock::time_point drain_until_;
};

}  // namespace

struct HttpServer::Impl {
  Impl(asio::io_context& io, JobManager& jobs, HttpLimits limits)
      : io(io),
        acceptor(asio::make_strand(io)),
        retry(acceptor.get_executor()),
        jobs(jobs),
        limits(limits),
        connections(std::make_shared<Connections>(limits.max_connections_per_peer, limits.max_connections,
                                                  idle_bound(limits))) {}

  // Idle connections may take all but a reserve of max_connections: an eighth, at least 8.
  static std::size_t idle_bound(const HttpLimits& limits) {
    if (limits.max_connections == 0) return 0;
    std::size_t reserve = std::max<std::size_t>(8, limits.max_connections / 8);
    return limits.max_connections > reserve ? limits.max_connections - reserve : 1;
  }

  void accept() {
    acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) return accept_failed(ec);
      if (failures > 0) spdlog::warn("accept works again after {} failed attempts", failures);
      failures = 0;
      beast::error_code ignored;
      auto peer = socket.remote_endpoint(ignored).address();
      std::vector<std::weak_ptr<Session>> evict;
      if (!connections->admit(peer, evict)) {
        // Once per 1,000 refusals: a client opening connections in a loop must not flood the log.
        if (refused++ % 1000 == 0)
          spdlog::warn(
              "{}: a new connection is closed at once: that address holds max_connections_per_peer ({}), or "
              "every one of max_connections ({}) has a request in progress ({} closed so far)",
              peer.to_string(), connections->per_peer(), connections->max_total(), refused);
        socket.close(ignored);
        return accept();
      }
      for (const auto& weak : evict) {
        // Once per 1,000: many idle connections (from however many addresses) must not flood the log.
        if (evictions++ % 1000 == 0)
          spdlog::warn(
              "idle connections at their bound ({} of max_connections {}): closing the longest idle to make room "
              "({} so far)",
              connections->max_idle(), connections->max_total(), evictions);
        Session::evict(weak);
      }
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Session>(std::move(socket), jobs, token, limits, connections, peer)->start();
      accept();
    });
  }

  // Out of descriptors (or memory), the pending connection stays queued and accept fails again at
  // once: retrying at once would spin a core and flood the log. Wait, doubling up to a second,
  // and say so once per outage.
  void accept_failed(const beast::error_code& ec) {
    bool resources = ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
                     ec == asio::error::no_memory || ec.value() == ENFILE;
    if (!resources) {
      spdlog::debug("accept: {}", ec.message());  // a connection reset before it was accepted
      return accept();
    }
    if (failures++ == 0)
      spdlog::error(
          "accept: {}; new connections wait until one closes (retrying up to every {} ms; raise the "
          "open-file limit, ulimit -n, for more ranks)",
          ec.message(), kMaxAcceptDelay.count());
    auto delay = std::min(kMaxAcceptDelay, std::chrono::milliseconds(5) * (1 << std::min(failures, 8)));
    retry.expires_after(delay);
    retry.async_wait([this](const beast::error_code& wait_ec) {
      if (!wait_ec && acceptor.is_open()) accept();
    });
  }

  static constexpr std::chrono::milliseconds kMaxAcceptDelay{1000};
  asio::io_context& io;
  tcp::acceptor acceptor;
  asio::steady_timer retry;
  int failures = 0;
  std::uint16_t port = 0;
  JobManager& jobs;
  std::string token;
  HttpLimits limits;
  std::shared_ptr<Connections> connections;
  std::size_t refused = 0, evictions = 0;
};

bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (b.empty() ? 0 : b[i % b.size()]));
  return diff == 0;
}

HttpServer::HttpServer(asio::io_context& io, JobManager& jobs, const std::string& host, std::uint16_t port,
                       std::string token, HttpLimits limits)
    : impl_(std::make_unique<Impl>(io, jobs, limits)) {
  impl_->token = std::move(token);
  beast::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) throw Error(fmt::format("host '{}' is not an IP address: {}", host, ec.message()), ErrorKind::bad_setting);
  tcp::endpoint endpoint(address, port);
  auto& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw Error(fmt::format("cannot listen on {}:{}: {}", host, port, ec.message()), ErrorKind::failed);
  impl_->port = a.local_endpoint().port();
  impl_->accept();
}

HttpServer::~HttpServer() = default;

std::uint16_t HttpServer::port() const { return impl_->port; }

void HttpServer::stop() {
  asio::post(impl_->acceptor.get_executor(), [impl = impl_.get()] {
    beast::error_code ignored;
    impl->retry.cancel();
    impl->acceptor.close(ignored);
  });
}

}  // namespace perseus::server
