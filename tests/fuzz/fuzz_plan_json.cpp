// perseus's JSON plan reader on arbitrary bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "perseus/plan/plan_files.hpp"
#include "perseus/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    perseus::parse_json_plan(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const perseus::Error&) {}
  return 0;
}
