#include "perseus/util/error.hpp"

#include <fmt/format.h>

#include <utility>

#include "perseus/util/safe_text.hpp"

namespace perseus {

namespace {

// A problem quotes what it read; a 10 MB field must not become a 10 MB message, nor invalid
// UTF-8 an invalid message.
std::string cut(const std::string& text) { return safe_text(text, kQuoteBytes); }

std::string describe(const std::string& file, std::size_t line, const std::string& field, const std::string& problem) {
  std::string where = file;
  if (line > 0) where += fmt::format(":{}", line);
  if (!field.empty()) return fmt::format("{}: field '{}': {}", where, cut(field), cut(problem));
  return fmt::format("{}: {}", where, cut(problem));
}
}  // namespace

InputError::InputError(const std::string& file, std::size_t line, const std::string& field, const std::string& problem,
                       std::vector<std::string> settings)
    : Error(describe(file, line, field, problem), ErrorKind::bad_input, std::move(settings)) {}

}  // namespace perseus
