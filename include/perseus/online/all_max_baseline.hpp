#pragma once
// The all-max baseline the turnkey loop measures everything against: the mean time and energy per
// iteration of clean all-max rounds (the warm-up's, then the probes that agreed with it), outlying
// rounds in time or energy left out, with 95% intervals no narrower than one round's noise allows.
#include <array>
#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "perseus/online/statistics.hpp"

namespace perseus::online {

struct AllMaxRound {
  double time = 0, energy = 0;  // per iteration, at the baseline's conditions
};

class AllMaxBaseline {
 public:
  // Adds a round; with `keep_last`, only that many of the newest rounds stay.
  void add(AllMaxRound round, std::optional<std::size_t> keep_last = std::nullopt);
  // Every round anew (two probes in a row that moved the baseline).
  void replace(std::vector<AllMaxRound> rounds) { rounds_ = std::move(rounds); }
  bool empty() const { return rounds_.empty(); }
  std::size_t size() const { return rounds_.size(); }

  // Estimates from the rounds; `spread_floor(time)` is the least standard deviation of one round's
  // time that the noise measured makes (a few rounds that agree by chance must not look precise).
  // Returns which rounds were kept. `latest_level`: rounds before a clear step in time (a straggler or
  // a slow spell that began or ended among them) are left out, so that the baseline is the cluster as
  // it runs now, not a mean of two paces that it never ran at.
  std::vector<bool> estimate(const std::function<double(double)>& spread_floor, bool latest_level = false);
  int shifted() const { return shifted_; }  // rounds left out before a step in time
  // Those rounds forgotten: rounds added later are estimated with the level's, not with them.
  void forget_before_level();

  double time() const { return time_.value; }
  double energy() const { return energy_.value; }
  const Estimate& time_estimate() const { return time_; }
  const Estimate& energy_estimate() const { return energy_; }
  int rounds() const { return kept_; }        // rounds the estimate is from
  int rejected() const { return rejected_; }  // outlying rounds left out
  // One round's standard deviation: time, energy.
  const std::array<double, 2>& round_spread() const { return round_spread_; }

 private:
  std::vector<AllMaxRound> rounds_;
  Estimate time_, energy_;
  int kept_ = 0, rejected_ = 0, shifted_ = 0;
  std::array<double, 2> round_spread_{};
};

}  // namespace perseus::online
