// The turnkey loop under a cluster's power budget: what the job can run slower than it does (its
// frontier from the unpaced plans on, in measured terms), a pace it is told to keep, and what a GPU
// power limit would make of it. The server's power-budget coordinator chooses the paces.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "perseus/online/turnkey_controller.hpp"
#include "perseus/profile/time_energy.hpp"

namespace perseus::online {

bool TurnkeyController::paced() const {
  return pace_ && target_plan_ &&
         *pace_ / scale_ > std::max(target_plan_->time, straggler_ ? straggler_->compute_time : 0.0);
}

double TurnkeyController::unpaced_time() const {
  return std::max(target_plan_->time, straggler_ ? straggler_->compute_time : 0.0);
}

std::optional<double> TurnkeyController::pace() const { return pace_; }

std::vector<PaceOption> TurnkeyController::pace_options(std::size_t most) const {
  std::vector<PaceOption> out;
  if (phase_ != ControllerPhase::deployed || !plans_ || !target_plan_ || most == 0) return out;
  const double p_block = plans_->emulator ? plans_->emulator->config().p_block : p_block_.value_or(0);
  const double blocking = p_block * shape_.num_stages;  // watts of one pipeline that waits
  const double copies = double(shape_.pipelines) * shape_.gpus_per_stage;
  // The emulator's energies in measured terms: what the measured all-max baseline spends over what
  // the emulator says all-max spends (the gradient synchronisation and the like).
  const double emulated_all_max = plans_->all_max().energy * copies;
  const double energy_scale =
      emulated_all_max > 0 && baseline_.energy() > 0 ? baseline_.energy() / emulated_all_max : 1;
  // At a pace t a pipeline runs the cheapest candidate that finishes by t and waits for the rest:
  // energy(t) = min over candidates c with c.time <= t of (c.energy - blocking c.time) + blocking t.
  // The target plan is one: it may be a frontier point fitted to the target, faster than every point.
  std::vector<TimeEnergy> by_time;  // energy less the waiting it counts, time ascending
  for (const auto& c : plans_->candidates) by_time.push_back({c.time, c.energy - blocking * c.time});
  by_time.push_back({target_plan_->time, target_plan_->energy - blocking * target_plan_->time});
  std::sort(by_time.begin(), by_time.end(), [](const TimeEnergy& a, const TimeEnergy& b) {
    return std::tie(a.time, a.energy) < std::tie(b.time, b.energy);
  });
  for (std::size_t i = 1; i < by_time.size(); ++i)
    by_time[i].energy = std::min(by_time[i].energy, by_time[i - 1].energy);
  auto at = [&](double t) {
    auto it = std::upper_bound(by_time.begin(), by_time.end(), t,
                               [](double time, const TimeEnergy& point) { return time < point.time; });
    const double base = it == by_time.begin() ? by_time.front().energy : std::prev(it)->energy;
    return PaceOption{t * scale_, (base + blocking * t) * copies * energy_scale};
  };
  const double floor = unpaced_time();
  out.push_back(at(floor));
  // The slower frontier points' own times, evenly thinned, the slowest included.
  std::vector<double> slower;
  for (const auto& c : plans_->candidates)
    if (c.point && c.time > floor) slower.push_back(c.time);
  std::sort(slower.begin(), slower.end());
  slower.erase(std::unique(slower.begin(), slower.end()), slower.end());
  const std::size_t room = most - 1, n = slower.size();
  if (n <= room) {
    for (double t : slower) out.push_back(at(t));
  } else if (room > 0) {
    for (std::size_t k = 0; k < room; ++k)
      out.push_back(at(slower[room == 1 ? n - 1 : (k * (n - 1) + (room - 1) / 2) / (room - 1)]));
  }
  return out;
}

void TurnkeyController::set_pace(std::optional<double> iteration_time, bool hold_probes) {
  if (iteration_time && !(std::isfinite(*iteration_time) && *iteration_time > 0)) iteration_time.reset();
  if (defer_while_choosing([this, iteration_time, hold_probes] { set_pace(iteration_time, hold_probes); })) return;
  hold_probes_ = hold_probes;
  if (iteration_time == pace_) return;
  const bool was_paced = paced();
  pace_ = iteration_time;
  if (phase_ != ControllerPhase::deployed || !target_plan_) return;
  if (paced()) {
    decide(DecisionEvent::paced, fmt::format("the cluster's power budget asks for {:.6g} s per iteration", *pace_));
    assign_plans(DecisionEvent::paced_for_power_budget);
  } else if (was_paced) {
    decide(DecisionEvent::pace_lifted, "the cluster's power budget lets the job run unpaced");
    assign_plans(DecisionEvent::unpaced);
  }
}

std::optional<PaceOption> TurnkeyController::under_power_limit(double watts) const {
  if (phase_ != ControllerPhase::deployed || !plans_ || !plans_->emulator || !target_plan_) return std::nullopt;
  const Emulator& emulator = *plans_->emulator;
  auto frequencies = target_plan_->frequencies;
  const auto& layout = emulator.layout();
  for (std::size_t s = 0; s < frequencies.size() && s < layout.size(); ++s)
    for (std::size_t slot = 0; slot < frequencies[s].size() && slot < layout[s].size(); ++slot) {
      const Instruction& inst = layout[s][slot];
      int chosen = frequencies[s][slot];
      for (int clock : emulator.clocks(inst)) {  // fastest first
        if (clock > frequencies[s][slot]) continue;
        chosen = clock;
        auto cost = emulator.cost(inst, clock);
        if (cost && cost->time > 0 && cost->energy / cost->time <= watts) break;
      }
      frequencies[s][slot] = chosen;
    }
  const auto [time, energy] = emulator.time_and_energy(frequencies);
  const double copies = double(shape_.pipelines) * shape_.gpus_per_stage;
  const double emulated_all_max = plans_->all_max().energy * copies;
  const double energy_scale =
      emulated_all_max > 0 && baseline_.energy() > 0 ? baseline_.energy() / emulated_all_max : 1;
  return PaceOption{time * scale_, energy * copies * energy_scale};
}

}  // namespace perseus::online
