#include "perseus/client/http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

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
};

HttpClient::HttpClient(const std::string& url, std::string token) : impl_(std::make_unique<Impl>()), url_(url) {
  impl_->token = std::move(token);
  std::string rest = url;
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  else if (rest.find("://") != std::string::npos)
    throw Error(fmt::format("server URL '{}': only http:// is supported", url), kExitUsage);
  rest = rest.substr(0, rest.find('/'));
  auto colon = rest.rfind(':');
  impl_->host = colon == std::string::npos ? rest : rest.substr(0, colon);
  impl_->port = colon == std::string::npos ? "7787" : rest.substr(colon + 1);
  if (impl_->host.empty() || impl_->port.empty()) throw Error(fmt::format("server URL '{}' has no host or port", url), kExitUsage);
}

HttpClient::~HttpClient() = default;

HttpReply HttpClient::request(const std::string& method, const std::string& target, const std::string& body,
                              std::chrono::milliseconds timeout) {
  // One retry: a kept-alive connection the server closed in between fails on first use.
  for (int attempt = 0;; ++attempt) {
    try {
      if (!impl_->stream) {
        impl_->stream.emplace(impl_->io);
        impl_->buffer.clear();
        impl_->buffer.reserve(16u << 10);
        tcp::resolver resolver(impl_->io);
        impl_->stream->expires_after(timeout.count() > 0 ? timeout : std::chrono::milliseconds(30000));
        impl_->stream->connect(resolver.resolve(impl_->host, impl_->port));
        impl_->stream->socket().set_option(tcp::no_delay(true));
      }
      http::request<http::string_body> req(http::string_to_verb(method), target, 11);
      req.set(http::field::host, impl_->host);
      req.set(http::field::content_type, "application/json");
      if (!impl_->token.empty()) req.set(http::field::authorization, "Bearer " + impl_->token);
      if (!impl_->job_secret.empty()) req.set(kJobSecretHeader, impl_->job_secret);
      req.keep_alive(true);
      req.body() = body;
      req.prepare_payload();
      if (timeout.count() > 0) impl_->stream->expires_after(timeout);
      else impl_->stream->expires_never();
      // Synchronous calls ignore tcp_stream's timer, so run them on the io_context.
      beast::error_code ec;
      http::response<http::string_body> res;
      auto& buffer = impl_->buffer;
      bool done = false;
      http::async_write(*impl_->stream, req, [&](beast::error_code e, std::size_t) {
        if (e) {
          ec = e;
          done = true;
          return;
        }
        http::async_read(*impl_->stream, buffer, res, [&](beast::error_code e2, std::size_t) {
          ec = e2;
          done = true;
        });
      });
      impl_->io.restart();
      impl_->io.run();
      if (!done || ec) throw beast::system_error(ec ? ec : beast::error_code(asio::error::timed_out));
      if (!res.keep_alive()) impl_->stream.reset();
      auto secret = res.find(kJobSecretHeader);
      impl_->received_job_secret = secret != res.end() ? std::string(secret->value()) : std::string();
      return {static_cast<int>(res.result_int()), res.body()};
    } catch (const beast::system_error& e) {
      impl_->stream.reset();
      bool stale = e.code() == http::error::end_of_stream || e.code() == asio::error::connection_reset ||
                   e.code() == asio::error::broken_pipe;
      if (attempt == 0 && stale) continue;
      throw ServerUnreachable(fmt::format("{} {}{}: {}", method, url_, target,
                              e.code() == beast::error::timeout ? "no answer in time" : e.code().message()));
    }
  }
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
