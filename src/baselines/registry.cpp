#include "perseus/baselines/registry.hpp"

#include <fmt/format.h>

#include "perseus/baselines/all_max.hpp"
#include "perseus/baselines/envpipe.hpp"
#include "perseus/util/error.hpp"

namespace perseus {

const std::vector<std::string>& baseline_names() {
  static const std::vector<std::string> names{"all-max", "envpipe-balanced", "envpipe-greedy", "zeus-global",
                                              "zeus-stage"};
  return names;
}

BaselineResult run_baseline(const std::string& name, const Profile& profile, const Emulator& emulator,
                            const BaselineOptions& options) {
  BaselineResult result;
  result.name = name;
  if (name == "all-max") {
    result.plan = all_max_plan(emulator);
    result.note = "every instruction at its top clock";
  } else if (name == "envpipe-balanced" || name == "envpipe-greedy") {
    auto env = envpipe_plan(emulator, name == "envpipe-greedy" ? EnvPipePolicy::greedy : EnvPipePolicy::balanced);
    result.plan = std::move(env.plan);
    result.note = fmt::format("{} clock raises; stopped: {}", env.steps, env.stop_reason);
  } else if (name == "zeus-global") {
    result.plan = zeus_global_plan(emulator, profile, options.zeus);
    result.note = fmt::format("one clock for every GPU: {} MHz", result.plan.frequencies.front().front());
  } else if (name == "zeus-stage") {
    result.plan = zeus_stage_plan(emulator, profile, options.zeus);
    std::vector<int> clocks;
    for (const auto& stage : result.plan.frequencies) clocks.push_back(stage.front());
    result.note = fmt::format("one clock per stage: {} MHz", fmt::join(clocks, ", "));
  } else {
    throw Error(fmt::format("unknown baseline '{}': choose one of {}", name, fmt::join(baseline_names(), ", ")),
                ErrorKind::bad_setting);
  }
  return result;
}

}  // namespace perseus
