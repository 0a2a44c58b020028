#include "perseus/baselines/zeus.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "perseus/baselines/all_max.hpp"
#include "perseus/util/error.hpp"

namespace perseus {

namespace {

void check_options(const ZeusOptions& options) {
  if (!(options.eta >= 0 && options.eta <= 1)) throw SettingError("eta", "eta must be in [0, 1]");
  if (!(options.max_power >= 0) || !std::isfinite(options.max_power)) {
    throw SettingError("max_power", "max_power must be a non-negative number of watts");
  }
}

double max_power_of(const ZeusOptions& options, const Profile& profile) {
  return options.max_power > 0 ? options.max_power : profile_max_power(profile);
}

// Clocks present in every given clock list, fastest first.
std::vector<int> common_clocks(const std::vector<const std::vector<int>*>& lists) {
  std::vector<int> common = *lists.front();
  for (const auto* list : lists) {
    std::vector<int> kept;
    for (int c : common) {
      if (std::find(list->begin(), list->end(), c) != list->end()) kept.push_back(c);
    }
    common = std::move(kept);
  }
  return common;
}

std::vector<std::vector<int>> uniform(const Emulator& emulator, const std::vector<int>& stage_clock) {
  std::vector<std::vector<int>> f;
  for (std::size_t s = 0; s < emulator.layout().size(); ++s) {
    f.emplace_back(emulator.layout()[s].size(), stage_clock[s]);
  }
  return f;
}

}  // namespace

double profile_max_power(const Profile& profile) {
  double best = 0;
  for (const auto& row : profile.rows) {
    if (row.time > 0) best = std::max(best, row.energy / row.time);
  }
  return best;
}

Plan zeus_global_plan(const Emulator& emulator, const Profile& profile, const ZeusOptions& options) {
  check_options(options);
  const int S = emulator.config().num_stages;
  std::vector<const std::vector<int>*> lists;
  for (const auto& stage : emulator.layout())
    for (const auto& inst : stage) lists.push_back(&emulator.clocks(inst));
  const auto clocks = common_clocks(lists);
  if (clocks.empty())
    throw Error(fmt::format("{}: no clock is profiled on every stage", profile.source), ErrorKind::bad_input);
  const double max_power = max_power_of(options, profile);
  double best_cost = std::numeric_limits<double>::infinity();
  int best = clocks.front();
  for (int clock : clocks) {
    const auto [time, energy] = emulator.time_and_energy(uniform(emulator, std::vector<int>(S, clock)));
    const double cost = options.eta * energy + (1 - options.eta) * S * max_power * time;
    if (cost < best_cost) {
      best_cost = cost;
      best = clock;
    }
  }
  return emulated_plan(emulator, uniform(emulator, std::vector<int>(S, best)));
}

Plan zeus_stage_plan(const Emulator& emulator, const Profile& profile, const ZeusOptions& options) {
  check_options(options);
  const int S = emulator.config().num_stages;
  const double max_power = max_power_of(options, profile);
  std::vector<int> chosen(S);
  for (int s = 0; s < S; ++s) {
    // One clock for the GPU: profiled for every instruction it runs (every model chunk it holds).
    const auto& order = emulator.layout()[static_cast<std::size_t>(s)];
    std::vector<const std::vector<int>*> lists;
    for (const auto& inst : order) lists.push_back(&emulator.clocks(inst));
    const auto clocks = common_clocks(lists);
    if (clocks.empty()) {
      throw Error(fmt::format("{}: stage {} has no clock profiled for both forward and backward", profile.source, s),
                  ErrorKind::bad_input);
    }
    double best_cost = std::numeric_limits<double>::infinity();
    for (int clock : clocks) {
      double cost = 0;
      for (const auto& inst : order) {
        const auto c = *emulator.cost(inst, clock);
        cost += options.eta * c.energy + (1 - options.eta) * max_power * c.time;
      }
      if (cost < best_cost) {
        best_cost = cost;
        chosen[s] = clock;
      }
    }
  }
  return emulated_plan(emulator, uniform(emulator, chosen));
}

}  // namespace perseus
