#include "perseus/protocol/job_secret.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <random>

namespace perseus::protocol {

std::string new_job_secret() {
  std::random_device random;
  std::string out;
  for (int i = 0; i < 4; ++i) out += fmt::format("{:08x}", static_cast<std::uint32_t>(random()));
  return out;
}

bool is_job_secret(std::string_view text) {
  return text.size() >= 32 && text.size() <= 128 &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace perseus::protocol
