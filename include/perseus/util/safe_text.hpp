#pragma once
// Text built from what a request, a line or a file said is hostile: it may hold any bytes, any
// length and any nesting. Every reply and log line that quotes it goes through these, so that
// serialising it can never throw and a message never grows with its input.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace perseus {

inline constexpr std::size_t kQuoteBytes = 300;   // what a message quotes of one value
inline constexpr std::size_t kMaxJsonDepth = 64;  // every JSON input perseus reads is far flatter

// Valid UTF-8 for any bytes: each byte of an invalid sequence becomes U+FFFD, control characters
// become \xNN; longer than `max_bytes`, the text is cut (never inside a character) and says how
// long it was.
std::string safe_text(std::string_view text, std::size_t max_bytes = kQuoteBytes);

// JSON text for any value: strings that are not valid UTF-8 are written with U+FFFD (a plain
// dump() throws on them). Only for values whose depth is bounded (parsed with check_json_depth).
std::string safe_dump(const nlohmann::json& value, int indent = -1);

// What an error message says about a JSON value it refuses: a scalar as JSON text (cut like
// safe_text), a list or object by its size only — never its contents, which may nest deeply.
std::string describe_json(const nlohmann::json& value);

class JsonTooDeep : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws JsonTooDeep ("nested deeper than N levels at byte B") when the text's lists and objects
// nest deeper than `max_depth`; a linear scan, done before parsing, since everything that walks a
// parsed value (dump, copy, compare) recurses.
void check_json_depth(std::string_view text, std::size_t max_depth = kMaxJsonDepth);

}  // namespace perseus
