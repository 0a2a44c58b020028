#include "perseus/protocol/replies.hpp"

#include <fmt/format.h>

#include <charconv>

#include "perseus/protocol/models.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus::protocol {

int http_status(Refusal refusal) {
  switch (refusal) {
    case Refusal::malformed:
      return 400;
    case Refusal::unauthorized:
      return 401;
    case Refusal::invalid_request:
      return 422;
    case Refusal::forbidden:
      return 403;
    case Refusal::too_large:
      return 413;
    case Refusal::header_too_large:
      return 431;
    case Refusal::not_found:
      return 404;
    case Refusal::method_not_allowed:
      return 405;
    case Refusal::conflict:
      return 409;
    case Refusal::job_ended:
    case Refusal::internal:
      return 500;
    case Refusal::over_capacity:
    case Refusal::not_stored:
    case Refusal::server_stopping:
      return 503;
  }
  return 500;
}

std::string error_body(std::string_view detail) {
  return safe_dump(nlohmann::json{{"detail", safe_text(detail, kMaxDetailBytes)}});
}

std::string json_body(const nlohmann::json& body) { return safe_dump(body); }

std::string percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      int value = 0;
      auto [ptr, ec] = std::from_chars(text.data() + i + 1, text.data() + i + 3, value, 16);
      if (ec == std::errc() && ptr == text.data() + i + 3) {
        out.push_back(static_cast<char>(value));
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

std::optional<std::string> query_value(std::string_view query, std::string_view key) {
  while (!query.empty()) {
    auto amp = query.find('&');
    auto pair = query.substr(0, amp);
    auto eq = pair.find('=');
    if (pair.substr(0, eq) == key) {
      std::string value = eq == std::string_view::npos ? "" : std::string(pair.substr(eq + 1));
      for (auto& c : value)
        if (c == '+') c = ' ';
      return percent_decode(value);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

int rank_parameter(std::string_view query) {
  auto value = query_value(query, "rank");
  if (!value) throw RequestError(Refusal::invalid_request, "query parameter 'rank': missing");
  int rank = 0;
  auto [ptr, ec] = std::from_chars(value->data(), value->data() + value->size(), rank);
  if (ec != std::errc() || ptr != value->data() + value->size() || value->empty())
    throw RequestError(Refusal::invalid_request,
                       fmt::format("query parameter 'rank': expected an integer, got '{}'", safe_text(*value)));
  return rank;
}

}  // namespace perseus::protocol
