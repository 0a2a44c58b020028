#include "perseus/util/error.hpp"

#include <fmt/format.h>

namespace perseus {

namespace {
std::string describe(const std::string& file, std::size_t line, const std::string& field,
                     const std::string& problem) {
  std::string where = file;
  if (line > 0) where += fmt::format(":{}", line);
  if (!field.empty()) return fmt::format("{}: field '{}': {}", where, field, problem);
  return fmt::format("{}: {}", where, problem);
}
}  // namespace

InputError::InputError(const std::string& file, std::size_t line, const std::string& field,
                       const std::string& problem)
    : Error(describe(file, line, field, problem), kExitDataError) {}

}  // namespace perseus
