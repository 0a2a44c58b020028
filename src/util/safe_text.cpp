#include "perseus/util/safe_text.hpp"

#include <fmt/format.h>

namespace perseus {

namespace {

// The length of the valid UTF-8 character at the start of `text` (RFC 3629: no overlong forms,
// no surrogates, nothing above U+10FFFF); 0 when it is not one.
std::size_t utf8_length(std::string_view text) {
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  unsigned char low = 0x80, high = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) low = 0xA0;
    if (b0 == 0xED) high = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) low = 0x90;
    if (b0 == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (text.size() < n) return 0;
  if (byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 2; i < n; ++i)
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string safe_text(std::string_view text, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 16);
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t n = utf8_length(text.substr(i));
    const unsigned char c = static_cast<unsigned char>(text[i]);
    std::string piece;
    if (n == 0) piece = "\xEF\xBF\xBD", n = 1;  // U+FFFD
    else if (n == 1 && (c < 0x20 || c == 0x7F)) piece = fmt::format("\\x{:02x}", c);
    else piece = std::string(text.substr(i, n));
    if (out.size() + piece.size() > max_bytes) break;
    out += piece;
    i += n;
  }
  if (i < text.size()) out += fmt::format("... ({} bytes in all)", text.size());
  return out;
}

std::string safe_dump(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string describe_json(const nlohmann::json& value) {
  if (value.is_array()) return fmt::format("a list of {} items", value.size());
  if (value.is_object()) return fmt::format("an object of {} fields", value.size());
  return safe_text(safe_dump(value));
}

void check_json_depth(std::string_view text, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) throw JsonTooDeep(fmt::format("nested deeper than {} levels at byte {}", max_depth, i));
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

}  // namespace perseus
