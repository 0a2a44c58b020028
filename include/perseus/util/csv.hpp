#pragma once
// Minimal CSV reading for numeric files: comma-separated, no quoting, CRLF tolerated.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace perseus {

std::vector<std::string_view> split_csv_line(std::string_view line);
std::string_view trim(std::string_view text);

// Strict number parsing: the whole field must be the number (after trimming).
std::optional<double> parse_double(std::string_view text);
std::optional<long long> parse_integer(std::string_view text);
// The longest prefix of at most `max_bytes` that does not cut a UTF-8 character in two.
std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes);

// Iterates the lines of a text, numbering them from 1 and stripping a trailing '\r'.
class LineReader {
 public:
  explicit LineReader(std::string_view text) : text_(text) {}
  bool next(std::string_view& line);
  std::size_t line_number() const { return line_number_; }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
  std::size_t line_number_ = 0;
};

}  // namespace perseus
