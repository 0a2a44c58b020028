#include "perseus/client/http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <atomic>
#include <optional>

#include "perseus/util/error.hpp"

namespace perseus::client {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {
constexpr const char* kJobSecretHeader = "Perseus-Job-Secret";  // as perseus serve names it
}  // namespace

struct HttpClient::Impl {
  asio::io_context io;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;  // kept: Beast reads max(512, free capacity) bytes per call
  std::string host, port;
  std::string token;
  std::string job_secret, received_job_secret;
  std::atomic<bool> cancelled{false};
};

HttpClient::HttpClient(const std::string& url, std::string token) : impl_(std::make_unique<Impl>()), url_(url) {
  impl_->token = std::move(token);
  std::string rest = url;
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  else if (rest.find("://") != std::string::npos)
    throw Error(fmt::format("server URL '{}': only http:// is supported", url), ErrorKind::bad_setting);
  rest = rest.substr(0, rest.find('/'));
  auto colon = rest.rfind(':');
  impl_->host = colon == std::string::npos ? rest : rest.substr(0, colon);
  impl_->port = colon == std::string::npos ? "7787" : rest.substr(colon + 1);
  if (impl_->host.empty() || impl_->port.empty())
    throw Error(fmt::format("server URL '{}' has no host or port", url), ErrorKind::bad_setting);
}

HttpClient::~HttpClient() = default;

HttpReply HttpClient::request(const std::string& method, const std::string& target, const std::string& body,
                              std::chrono::milliseconds timeout) {
  // One retry: a kept-alive connection the server closed in between fails on first use.
  for (int attempt = 0;; ++attempt) {
    if (impl_->cancelled.load()) throw ServerUnreachable(fmt::format("{} {}{}: cancelled", method, url_, target));
    beast::error_code ec;
    bool done = false;
    // The reply's size is bounded before any of its body is read (a Content-Length above the bound
    // is refused from the header): a broken or hostile server cannot make training allocate it.
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxReplyBytes);
    parser.header_limit(kMaxReplyHeaderBytes);
    http::request<http::string_body> req(http::string_to_verb(method), target, 11);
    req.set(http::field::host, impl_->host);
    req.set(http::field::content_type, "application/json");
    if (!impl_->token.empty()) req.set(http::field::authorization, "Bearer " + impl_->token);
    if (!impl_->job_secret.empty()) req.set(kJobSecretHeader, impl_->job_secret);
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();
    auto& buffer = impl_->buffer;
    auto exchange = [&] {
      http::async_write(*impl_->stream, req, [&](beast::error_code e, std::size_t) {
        if (e) {
          ec = e;
          done = true;
          return;
        }
        // The header first: a Content-Length above the bound ends the exchange before any of the
        // body is read (the parser's own check alone let some through).
        http::async_read_header(*impl_->stream, buffer, parser, [&](beast::error_code e2, std::size_t) {
          if (!e2 && parser.content_length() && *parser.content_length() > kMaxReplyBytes) e2 = http::error::body_limit;
          if (e2 || parser.is_done()) {
            ec = e2;
            done = true;
            return;
          }
          http::async_read(*impl_->stream, buffer, parser, [&](beast::error_code e3, std::size_t) {
            ec = e3;
            done = true;
          });
        });
      });
    };
    // Everything (name lookup and connect included) runs on the io_context, so the deadline bounds
    // the whole request, and cancel() from another thread ends it at once.
    tcp::resolver resolver(impl_->io);
    if (!impl_->stream) {
      impl_->stream.emplace(impl_->io);
      buffer.clear();
      buffer.reserve(16u << 10);
      resolver.async_resolve(impl_->host, impl_->port, [&](beast::error_code e, tcp::resolver::results_type results) {
        if (e) {
          ec = e;
          done = true;
          return;
        }
        impl_->stream->async_connect(results, [&](beast::error_code e2, const tcp::endpoint&) {
          if (e2) {
            ec = e2;
            done = true;
            return;
          }
          impl_->stream->socket().set_option(tcp::no_delay(true), e2);
          exchange();
        });
      });
    } else {
      exchange();
    }
    impl_->io.restart();
    if (timeout.count() > 0) impl_->io.run_for(timeout);
    else impl_->io.run();
    if (!done) {  // out of time: abandon the connection (its answer must not reach a later request)
      resolver.cancel();
      impl_->stream->socket().close(ec);
      impl_->io.restart();
      impl_->io.run();  // the cancelled handlers finish at once
      ec = beast::error::timeout;
    }
    if (!ec) {
      auto res = parser.release();
      if (!res.keep_alive()) impl_->stream.reset();
      auto secret = res.find(kJobSecretHeader);
      impl_->received_job_secret = secret != res.end() ? std::string(secret->value()) : std::string();
      return {static_cast<int>(res.result_int()), res.body()};
    }
    impl_->stream.reset();
    if (ec == http::error::body_limit || ec == http::error::header_limit || ec == http::error::buffer_overflow)
      throw Error(
          fmt::format("{} {}{}: the server's reply is larger than a reply may be ({} bytes of body, {} of "
                      "header): not read",
                      method, url_, target, kMaxReplyBytes, kMaxReplyHeaderBytes));
    bool stale =
        ec == http::error::end_of_stream || ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
    if (attempt == 0 && stale && !impl_->cancelled.load()) continue;
    if (impl_->cancelled.load()) throw ServerUnreachable(fmt::format("{} {}{}: cancelled", method, url_, target));
    if (ec == beast::error::timeout)
      throw ServerTimeout(fmt::format("{} {}{}: no answer in {} ms", method, url_, target, timeout.count()));
    throw ServerUnreachable(fmt::format("{} {}{}: {}", method, url_, target, ec.message()));
  }
}

void HttpClient::cancel() {
  impl_->cancelled.store(true);
  asio::post(impl_->io, [impl = impl_.get()] {
    beast::error_code ignored;
    if (impl->stream) impl->stream->socket().close(ignored);
  });
}

void HttpClient::set_job_secret(std::string secret) { impl_->job_secret = std::move(secret); }

const std::string& HttpClient::received_job_secret() const { return impl_->received_job_secret; }

std::string encode_path_segment(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') out.push_back(static_cast<char>(c));
    else out += fmt::format("%{:02X}", c);
  }
  return out;
}

}  // namespace perseus::client
