// The HTTP listener behind `perseus gpud --metrics-address`: GET /metrics and nothing else, with
// what a scraper can make it hold bounded (connections, request size, time per read and write).
#include "perseus/gpud/metrics_endpoint.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <array>
#include <optional>

#include "perseus/util/error.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus::gpud {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

class MetricsSession;

struct MetricsEndpoint::Impl : std::enable_shared_from_this<MetricsEndpoint::Impl> {
  Impl(asio::io_context& io, const Daemon& daemon, std::shared_ptr<gpu::GpuLibrary> gpu, MetricsLimits limits)
      : acceptor(io), daemon(daemon), gpu(std::move(gpu)), limits(limits) {}

  void accept();
  std::string scrape() {
    DaemonStats stats = daemon.stats();
    if (labels.size() != stats.gpus.size()) labels = gpud::gpu_labels(*gpu, static_cast<unsigned>(stats.gpus.size()));
    return render_metrics(stats, *gpu, labels, failures);
  }

  tcp::acceptor acceptor;
  const Daemon& daemon;
  std::shared_ptr<gpu::GpuLibrary> gpu;
  MetricsLimits limits;
  std::vector<std::string> labels;  // per GPU, read once
  ReadFailures failures;
  std::vector<std::weak_ptr<MetricsSession>> sessions;
  std::size_t open = 0;   // sessions alive
  bool refusing = false;  // at the connection cap: logged once per episode
  bool stopped = false;
};

class MetricsSession : public std::enable_shared_from_this<MetricsSession> {
 public:
  MetricsSession(tcp::socket socket, std::shared_ptr<MetricsEndpoint::Impl> endpoint)
      : stream_(std::move(socket)), buffer_(endpoint->limits.max_request_bytes), endpoint_(std::move(endpoint)) {
    ++endpoint_->open;
  }
  ~MetricsSession() { --endpoint_->open; }

  void read() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(endpoint_->limits.max_request_bytes));
    parser_->body_limit(endpoint_->limits.max_body_bytes);
    stream_.expires_after(endpoint_->limits.idle_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

 private:
  void on_read(beast::error_code ec) {
    if (endpoint_->stopped) return;
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset)
      return close();
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow)
      return reply(http::status::request_header_fields_too_large,
                   fmt::format("request headers over {} bytes\n", endpoint_->limits.max_request_bytes), false);
    if (ec == http::error::body_limit)
      return reply(http::status::payload_too_large,
                   fmt::format("request body over {} bytes\n", endpoint_->limits.max_body_bytes), false);
    if (ec) return reply(http::status::bad_request, fmt::format("malformed request: {}\n", ec.message()), false);

    const auto& request = parser_->get();
    std::string_view target(request.target().data(), request.target().size());
    std::string_view path = target.substr(0, target.find('?'));
    bool keep_alive = request.keep_alive();
    if (path != "/metrics")
      return reply(http::status::not_found,
                   fmt::format("no route {}: perseus gpud serves GET /metrics only\n", safe_text(path, 100)),
                   keep_alive);
    if (request.method() != http::verb::get && request.method() != http::verb::head)
      return reply(
          http::status::method_not_allowed,
          fmt::format("method {} not allowed on /metrics: use GET\n",
                      safe_text(std::string_view(request.method_string().data(), request.method_string().size()), 20)),
          keep_alive);
    std::string body;
    try {
      body = endpoint_->scrape();
    } catch (const std::exception& e) {
      spdlog::error("metrics: scrape failed: {}", safe_text(e.what()));
      return reply(http::status::internal_server_error, "metrics unavailable (see gpud's log)\n", false);
    }
    reply(http::status::ok, std::move(body), keep_alive, kMetricsContentType, request.method() == http::verb::head);
  }

  void reply(http::status status, std::string body, bool keep_alive, const char* type = "text/plain; charset=utf-8",
             bool head = false) {
    response_ = {};
    response_.result(status);
    response_.version(11);
    response_.set(http::field::server, "perseus-gpud");
    response_.set(http::field::content_type, type);
    if (status == http::status::method_not_allowed) response_.set(http::field::allow, "GET, HEAD");
    response_.keep_alive(keep_alive);
    response_.content_length(body.size());
    if (!head) response_.body() = std::move(body);
    stream_.expires_after(endpoint_->limits.idle_timeout);
    http::async_write(stream_, response_, [self = shared_from_this(), keep_alive](beast::error_code ec, std::size_t) {
      if (ec || self->endpoint_->stopped) return self->close();
      if (!keep_alive) return self->drain();
      self->read();
    });
  }

  // Closing with unread bytes would reset the connection, and the client might lose the reply: say
  // we are done, then read and drop what it still sends (bounded in bytes and time) until it closes.
  void drain() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(endpoint_->limits.idle_timeout);
    drain_more();
  }
  void drain_more() {
    if (drained_ >= kMaxDrainBytes) return close();
    stream_.async_read_some(asio::buffer(scratch_), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      self->drained_ += n;
      if (ec || self->endpoint_->stopped) return self->close();
      self->drain_more();
    });
  }

  static constexpr std::size_t kMaxDrainBytes = 1 << 20;
  std::array<char, 4096> scratch_{};
  std::size_t drained_ = 0;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
  std::shared_ptr<MetricsEndpoint::Impl> endpoint_;
};

void MetricsEndpoint::Impl::accept() {
  acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (self->stopped || ec == asio::error::operation_aborted) return;
    if (ec) {
      spdlog::debug("metrics: accept: {}", ec.message());
    } else if (self->open >= self->limits.max_connections) {
      if (!self->refusing)
        spdlog::warn("metrics: {} connections open, the most allowed: closing new ones until one ends",
                     self->limits.max_connections);
      self->refusing = true;
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      self->refusing = false;
      auto session = std::make_shared<MetricsSession>(std::move(socket), self);
      std::erase_if(self->sessions, [](const auto& s) { return s.expired(); });
      self->sessions.push_back(session);
      session->read();
    }
    self->accept();
  });
}

MetricsEndpoint::MetricsEndpoint(asio::io_context& io, const Daemon& daemon, std::shared_ptr<gpu::GpuLibrary> gpu,
                                 const MetricsAddress& address, MetricsLimits limits)
    : impl_(std::make_shared<Impl>(io, daemon, std::move(gpu), limits)) {
  beast::error_code ec;
  tcp::endpoint where(asio::ip::make_address(address.host, ec), address.port);
  auto& acceptor = impl_->acceptor;
  if (!ec) acceptor.open(where.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(where, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    beast::error_code ignored;
    acceptor.close(ignored);
    throw Error(fmt::format("metrics_address {}:{}: cannot listen: {}", address.host, address.port, ec.message()),
                ErrorKind::failed, {"metrics_address"});
  }
  impl_->accept();
}

MetricsEndpoint::~MetricsEndpoint() { stop(); }

unsigned short MetricsEndpoint::port() const {
  beast::error_code ec;
  auto local = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : local.port();
}

void MetricsEndpoint::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
  for (auto& weak : impl_->sessions)
    if (auto session = weak.lock()) session->close();
  impl_->sessions.clear();
}

}  // namespace perseus::gpud
