// The profile CSV reader on arbitrary bytes: a perseus::Error naming the problem is the only
// acceptable failure (any other exception, crash, leak or undefined behaviour is a finding).
#include <cstddef>
#include <cstdint>
#include <string>

#include "perseus/profile/profile.hpp"
#include "perseus/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    perseus::parse_profile(std::string(reinterpret_cast<const char*>(data), size), "fuzz.csv");
  } catch (const perseus::Error&) {}
  return 0;
}
