#pragma once
// What `perseus serve` builds from a request's target and what it answers: any bytes in a path,
// a query or an error's detail make a valid reply (invalid UTF-8 replaced, long quotes cut),
// so no request can make the reply path throw.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "perseus/protocol/models.hpp"

namespace perseus::protocol {

inline constexpr std::size_t kMaxDetailBytes = 1000;  // an error's detail; what it quotes is cut to fit

// The HTTP status of a refused request (the artifact's and Zeus's clients match on 500 for an ended job).
int http_status(Refusal refusal);

// {"detail": "..."}, the body of every error reply.
std::string error_body(std::string_view detail);
// A reply's JSON text; never throws, whatever strings `body` holds.
std::string json_body(const nlohmann::json& body);

// %XX sequences decoded (any byte may result); other text as is.
std::string percent_decode(std::string_view text);
// The value of `key` in a query string, decoded ('+' in a query means space).
std::optional<std::string> query_value(std::string_view query, std::string_view key);
// The `rank` query parameter; RequestError (invalid_request) when missing or not an integer.
int rank_parameter(std::string_view query);

}  // namespace perseus::protocol
