// The schedulers `perseus serve --scheduler` knows. Adding one: write its class and configure
// function in schedulers/, then add a line here.
#include <fmt/format.h>

#include "perseus/server/scheduler.hpp"
#include "perseus/util/error.hpp"
#include "schedulers/schedulers.hpp"

namespace perseus::server {
namespace {

struct Entry {
  const char* name;
  SchedulerFactory (*configure)(const nlohmann::json&);
};

constexpr Entry kSchedulers[] = {
    {"AllMaxFrequency", configure_all_max_frequency},
    {"TwoFrequencies", configure_two_frequencies},
    {"InstructionProfiler", configure_instruction_profiler},
    {"PointSolution", configure_point_solution},
};

}  // namespace

std::vector<std::string> scheduler_names() {
  std::vector<std::string> names;
  for (const auto& e : kSchedulers) {
    names.emplace_back(e.name);
    names.push_back(std::string(e.name) + "3D");
  }
  return names;
}

SchedulerFactory configure_scheduler(const std::string& name, const nlohmann::json& args) {
  for (const auto& e : kSchedulers) {
    if (name == e.name) return e.configure(args);
    if (name == std::string(e.name) + "3D") return make_3d_parallel(e.configure(args));
  }
  throw Error(fmt::format("unknown scheduler '{}' (one of: {})", name, fmt::join(scheduler_names(), ", ")), kExitUsage);
}

}  // namespace perseus::server
