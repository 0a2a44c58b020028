#pragma once
// Each data-parallel pipeline as the all-max baseline measured it. The GPUs of one cluster are not
// equally fast, so pipelines differ at all-max (and a pipeline slow from the first iteration on is
// just as much part of the cluster): what the baseline measured per pipeline is the reference for
// that pipeline, and only a change relative to it is a straggler. Kept per pipeline: its
// compute-bound iteration time (its pace), its energy per iteration, and per (model stage, kind)
// its top-clock instruction time, so that a later round's top-clock instructions say how much
// slower or faster each pipeline runs now than it did then (its conditions), whatever its GPUs'
// own speed.
#include <cstddef>
#include <map>
#include <optional>
#include <vector>

#include "perseus/online/round_measurement.hpp"
#include "perseus/pipeline/schedule.hpp"

namespace perseus::online {

class PipelineBaseline {
 public:
  // One all-max round. At most `capacity` rounds are kept (the oldest go).
  void add(const RoundMeasurement& m, std::size_t capacity);
  void clear() { samples_.clear(), estimated_ = false; }
  // The per-pipeline statistics from the rounds kept[i] says to use (each pipeline's outlying
  // rounds left out on top); nothing when no round is kept.
  void estimate(const std::vector<bool>& kept);
  std::size_t rounds() const { return samples_.size(); }

  bool known() const { return estimated_; }
  std::size_t pipelines() const { return compute_time_.size(); }
  // Pipeline d's compute-bound all-max time over the median pipeline's.
  double pace(std::size_t d) const;
  double compute_time(std::size_t d) const;  // seconds, compute-bound, at all-max
  double energy(std::size_t d) const;        // joules per iteration, its GPUs, blocking included
  // Pipeline d's top-clock time of `key` over the median pipeline's (1 when unknown): its GPUs' speed.
  double speed(std::size_t d, const StageKind& key) const;
  // Pipeline d's mean top-clock time of `key` in the baseline's rounds (none when not measured).
  std::optional<double> top_time(std::size_t d, const StageKind& key) const;
  // The standard error of that mean (0 when not measured or from one round).
  double top_time_error(std::size_t d, const StageKind& key) const;
  // Pipeline d's mean top-clock energy of `key` over the rounds its top time is from.
  std::optional<double> top_energy(std::size_t d, const StageKind& key) const;

  // How much slower pipeline d runs now than in the baseline: the median, over the slots of `m`
  // that ran at the top clock after a slot at the top clock (`clocks`: per stage and slot, the
  // clocks pipeline d ran, the iteration before's last slot before the first; null: all at the top
  // clock), of measured time over its baseline time; with fewer than `fewest` such slots, over every
  // slot at the top clock. `late` (per stage and slot): the seconds a slot right after a change lost to
  // the clock latency, taken off its time so that it counts like the others. None with fewer than
  // `fewest` slots. `steady_only`: whether the slots after a slot at the top clock were enough.
  // `error`: the standard error of that median (relative; 0 with fewer than 2 slots).
  std::optional<double> conditions(const RoundMeasurement& m, std::size_t d,
                                   const std::vector<std::vector<Instruction>>& orders, int num_stages,
                                   const std::vector<std::vector<int>>* clocks, int top,
                                   const std::vector<std::vector<double>>* late = nullptr, bool* steady_only = nullptr,
                                   double* error = nullptr, std::size_t fewest = 3) const;

 private:
  struct Sample {
    std::vector<double> compute_time, energy;
    std::vector<std::map<StageKind, TimeEnergy>> top;  // per pipeline: its top-clock instructions
  };
  std::vector<Sample> samples_;
  bool estimated_ = false;
  std::vector<double> compute_time_, energy_, pace_;
  std::vector<std::map<StageKind, double>> top_time_, top_time_error_, top_energy_, speed_;
};

}  // namespace perseus::online
