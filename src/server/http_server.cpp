#include "perseus/server/http_server.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>

#include "perseus/util/error.hpp"

namespace perseus::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::size_t kBodyLimit = 64u << 20;          // a result of many iterations of a long schedule
constexpr std::size_t kReadBuffer = 16u << 10;         // a typical request in one read
constexpr auto kIdleTimeout = std::chrono::seconds(300);  // between requests on a kept-alive connection

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, JobManager& jobs, const std::string& token)
      : stream_(std::move(socket)), jobs_(jobs), token_(token) {
    // Beast reads max(512, free capacity) per call: without room, a 5 KB result takes ~7 recvmsg.
    buffer_.reserve(kReadBuffer);
  }

  void start() { read(); }

 private:
  void read() {
    parser_.emplace();
    parser_->body_limit(kBodyLimit);
    stream_.expires_after(kIdleTimeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream) return close();
    if (ec == http::error::body_limit) return reply_and_close(413, "request body too large");
    if (ec) {
      if (ec != beast::error::timeout && ec != asio::error::operation_aborted && ec != asio::error::connection_reset)
        spdlog::debug("read: {}", ec.message());
      if (ec.category() == beast::error_code(http::error::bad_method).category())
        return reply_and_close(400, "malformed HTTP request");
      return close();
    }
    request_ = parser_->release();
    if (!token_.empty() && !authorized()) {
      unauthorized_ = true;
      return write({401, nlohmann::json{{"detail", "missing or wrong bearer token (Authorization: Bearer <token>; "
                                                   "the client's token option or PERSEUS_TOKEN)"}}.dump()});
    }
    stream_.expires_never();  // a schedule request may wait a whole round
    std::string method(request_.method_string());
    std::string target(request_.target());
    route_request(jobs_, method, target, request_.body(), [self = shared_from_this()](HttpResponse response) {
      // The answer may come from the job manager's strand: write on this session's.
      asio::post(self->stream_.get_executor(),
                 [self, response = std::move(response)]() mutable { self->write(std::move(response)); });
    });
  }

  void write(HttpResponse response) {
    response_ = {};
    response_.version(request_.version());
    response_.result(static_cast<http::status>(response.status));
    response_.set(http::field::server, "perseus");
    response_.set(http::field::content_type, "application/json");
    if (unauthorized_) response_.set(http::field::www_authenticate, "Bearer");
    unauthorized_ = false;
    response_.keep_alive(keep_alive_ && request_.keep_alive());
    response_.body() = std::move(response.body);
    response_.prepare_payload();
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec || !self->response_.keep_alive()) return self->close();
      self->read();
    });
  }

  bool authorized() const {
    auto it = request_.find(http::field::authorization);
    if (it == request_.end()) return false;
    std::string_view value(it->value().data(), it->value().size());
    constexpr std::string_view kScheme = "Bearer ";
    if (value.size() < kScheme.size() ||
        !beast::iequals(beast::string_view(value.data(), kScheme.size()), beast::string_view(kScheme.data(), kScheme.size())))
      return false;
    return constant_time_equal(value.substr(kScheme.size()), token_);
  }

  void reply_and_close(int status, const std::string& detail) {
    keep_alive_ = false;
    request_ = {};
    request_.version(11);
    write({status, nlohmann::json{{"detail", detail}}.dump()});
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  JobManager& jobs_;
  std::string token_;  // empty: no authorization required
  bool unauthorized_ = false;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  bool keep_alive_ = true;
};

}  // namespace

struct HttpServer::Impl {
  Impl(asio::io_context& io, JobManager& jobs) : io(io), acceptor(asio::make_strand(io)), retry(acceptor.get_executor()), jobs(jobs) {}

  void accept() {
    acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) return accept_failed(ec);
      if (failures > 0) spdlog::warn("accept works again after {} failed attempts", failures);
      failures = 0;
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Session>(std::move(socket), jobs, token)->start();
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
      spdlog::error("accept: {}; new connections wait until one closes (retrying up to every {} ms; raise the "
                    "open-file limit, ulimit -n, for more ranks)", ec.message(), kMaxAcceptDelay.count());
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
};

bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (b.empty() ? 0 : b[i % b.size()]));
  return diff == 0;
}

HttpServer::HttpServer(asio::io_context& io, JobManager& jobs, const std::string& host, std::uint16_t port,
                       std::string token)
    : impl_(std::make_unique<Impl>(io, jobs)) {
  impl_->token = std::move(token);
  beast::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) throw Error(fmt::format("--host '{}' is not an IP address: {}", host, ec.message()), kExitUsage);
  tcp::endpoint endpoint(address, port);
  auto& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw Error(fmt::format("cannot listen on {}:{}: {}", host, port, ec.message()), kExitFailure);
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
