#pragma once
// What the turnkey loop reports of the rounds it deployed: each round's time and energy next to the
// reference it was measured against, the saving and slowdown over the last rounds with 95%
// intervals, the energy saved so far, and the mean of the rounds on the current plans.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "perseus/online/statistics.hpp"

namespace perseus::online {

// What the reported numbers are measured against: the all-max baseline as the current conditions
// would make it run (a whole-cluster slowdown or a straggler stretches it; docs/design.md#the-turnkey-loop).
struct Reference {
  std::string name;           // "all-max baseline", "... at the straggler's pace", "... under current conditions"
  double iteration_time = 0;  // seconds per iteration
  double energy = 0;          // joules per iteration, whole job
  double conditions = 1;  // its iteration time over the baseline's (the pipelines' conditions, the slowest deciding)
};

// Mean of the rounds on the current plans.
struct MeasuredRounds {
  double iteration_time = 0, energy = 0;
  int rounds = 0;
};

class DeployedRounds {
 public:
  // The saving and slowdown are over the last `report_rounds` rounds.
  explicit DeployedRounds(std::size_t report_rounds) : report_rounds_(report_rounds) {}

  struct Round {
    double time = 0, energy = 0;  // per iteration
    Reference reference;
    int iterations = 0;
  };
  // A deployed round (an all-max probe's too) of `iterations` iterations.
  void add(double time, double energy, int iterations, Reference reference);
  const Round& last() const { return recent_.back(); }
  // The round added last ran the current plans (it counts in measured()); new plans start anew.
  void last_ran_the_plans();
  void new_plans() { on_plans_.clear(); }
  // The baseline moved: every reference kept is stretched by these factors.
  void rebase(double time_factor, double energy_factor);
  // The last `rounds` rounds added were measured against a reference now known to be wrong: theirs
  // is `reference` (the energy saved so far with it); the oldest of them ran that share of its time
  // under it (a change that came within it), the rest under its own.
  void restate(std::size_t rounds, const Reference& reference, double oldest_share = 1);
  // As above, each round with its own: `references` are the last rounds' new references, oldest first.
  void restate(const std::vector<Reference>& references, double oldest_share = 1);

  std::optional<MeasuredRounds> measured() const;
  // 1 - energy/reference energy and time/reference time - 1 over the last rounds (sums over sums),
  // the interval widened by the baseline's relative half-width (energy's, time's).
  std::optional<Estimate> saving(double baseline_relative_half_width) const;
  std::optional<Estimate> slowdown(double baseline_relative_half_width) const;
  // Joules saved so far: per round, (reference - measured energy per iteration) x its iterations.
  double energy_saved() const { return energy_saved_; }
  long long iterations() const { return iterations_; }

 private:
  std::size_t report_rounds_;
  std::vector<Round> recent_;    // the last deployed rounds, probes included
  std::vector<Round> on_plans_;  // the last rounds on the current plans
  double energy_saved_ = 0;
  long long iterations_ = 0;
};

}  // namespace perseus::online
