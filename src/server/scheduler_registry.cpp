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
  std::optional<PowerMode> mode;  // what its power states are; none: either
};

const Entry kSchedulers[] = {
    {"AllMaxFrequency", configure_all_max_frequency, PowerMode::frequency},
    {"TwoFrequencies", configure_two_frequencies, PowerMode::frequency},
    {"InstructionProfiler", configure_instruction_profiler, std::nullopt},
    {"PointSolution", configure_point_solution, PowerMode::frequency},
    {"AllMaxPowerLimit", configure_all_max_power_limit, PowerMode::power_limit},
    {"ZeusGlobalPowerLimit", configure_zeus_global_power_limit, PowerMode::power_limit},
    {"ZeusLocalPowerState", configure_zeus_local_power_state, std::nullopt},
    {"Perseus", configure_perseus, PowerMode::frequency},
};

const Entry* find_entry(const std::string& name) {
  for (const auto& e : kSchedulers)
    if (name == e.name || name == std::string(e.name) + "3D") return &e;
  return nullptr;
}

}  // namespace

std::vector<std::string> scheduler_names() {
  std::vector<std::string> names;
  for (const auto& e : kSchedulers) {
    names.emplace_back(e.name);
    names.push_back(std::string(e.name) + "3D");
  }
  return names;
}

std::optional<PowerMode> scheduler_mode(const std::string& name) {
  const Entry* e = find_entry(name);
  if (e == nullptr) return std::nullopt;
  return e->mode;
}

SchedulerFactory configure_scheduler(const std::string& name, const nlohmann::json& args) {
  if (const Entry* e = find_entry(name))
    return name == e->name ? e->configure(args) : make_3d_parallel(e->configure(args));
  throw Error(fmt::format("unknown scheduler '{}' (one of: {})", name, fmt::join(scheduler_names(), ", ")),
              ErrorKind::bad_setting);
}

}  // namespace perseus::server
