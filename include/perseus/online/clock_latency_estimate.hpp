#pragma once
// The clock latency from changed slots: an instruction right after a change of clock takes longer
// (shorter, after a change to a slower clock) than the same instruction at the same clock unchanged,
// by the latency times its share, 1 - (its time at its clock over its time at the clock before). The
// least-squares latency through the origin over the samples kept, with a standard error that holds
// for how the samples are related: a round's samples share its conditions and references (errors
// clustered by round), and a reference taken from the baseline carries the baseline's own error into
// every round (an error that does not average out over rounds).
#include <cstddef>
#include <optional>
#include <vector>

namespace perseus::online {

struct ClockLatencySample {
  double share = 0;   // 1 - its time at its clock over its time at the clock before
  double excess = 0;  // seconds longer than the reference
  // Where the reference is the baseline's: which one (the same key, the same error in every round),
  // and that error (seconds, a standard error). 0: a reference from the same round.
  int baseline_reference = 0;
  double reference_error = 0;
};

struct ClockLatencyFit {
  double latency = 0;         // seconds
  double standard_error = 0;  // seconds
  std::size_t samples = 0, rounds = 0;
  // Whether it is clearly above none, and at least `smallest` seconds: the loop looks again every round
  // as samples accumulate, and a fixed number of standard errors crossed at any of a hundred looks is
  // crossed by chance far more often than at one (3 standard errors: in a few runs in a hundred). The
  // boundary holds however many times it is looked at: a normal mixture's, that the estimate crosses
  // with a probability of at most `chance` over all its rounds, from 4.5 standard errors at 8 rounds
  // to 3.6 at 150.
  bool clear(double smallest, double chance = 0.01) const;
  // Whether it is at least `z` standard errors and `smallest` seconds (one look: keeping one taken).
  bool above(double z, double smallest) const;
};

class ClockLatencyEstimate {
 public:
  explicit ClockLatencyEstimate(std::size_t kept = 4000) : kept_(kept) {}
  void add(const ClockLatencySample& sample);
  // The round's samples are all in: the next ones are another round's.
  void end_round();
  std::size_t size() const { return samples_.size(); }
  // None with fewer than `fewest_samples` samples or `fewest_rounds` rounds.
  std::optional<ClockLatencyFit> fit(std::size_t fewest_samples, std::size_t fewest_rounds) const;

 private:
  struct Kept {
    ClockLatencySample sample;
    long long round = 0;
  };
  std::size_t kept_;
  std::vector<Kept> samples_;
  long long round_ = 0;
};

}  // namespace perseus::online
