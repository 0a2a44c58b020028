#pragma once
// Straggler detection: every round the server knows each data-parallel pipeline's own
// compute-bound iteration time (its schedule run with its measured instruction durations) and what
// the plan it runs predicts. A pipeline whose measured/predicted ratio is above the median of the
// others' by more than `threshold` for `rounds` rounds in a row is a straggler; it is cleared after
// `clear_rounds` rounds in a row within half the threshold, having come back by its own time falling
// (others that slowed to its pace are no recovery). One straggler at a time: the slowest;
// another that slows while it is followed is reported apart (also_slow).
// Clearing takes fewer rounds than detecting because a late verdict costs more there: while a
// straggler that has recovered is still followed, the others run paced to it and training runs slower
// than at all-max; one cleared too early only costs the others' saving until it is seen again (it
// sets the iteration time either way).
#include <optional>
#include <vector>

namespace perseus::online {

struct DetectorOptions {
  double threshold = 0.05;
  int rounds = 2;
  int clear_rounds = 1;
};

struct Straggler {
  int pipeline = 0;
  double slowdown = 1;  // its ratio over the others' median, when last confirmed
};

class StragglerDetector {
 public:
  explicit StragglerDetector(DetectorOptions options = {}) : options_(options) {}

  // One round: ratio[d] = measured compute-bound time / predicted, per pipeline. Returns true when
  // the verdict changed (detected, cleared, or a straggler's slowdown moved, two rounds in a row
  // agreeing on it: by more than the threshold, or by more than half of it where no other pipeline
  // then looks slow by the threshold).
  bool observe(const std::vector<double>& ratios);
  const std::optional<Straggler>& current() const { return current_; }
  // Some pipeline was above half the threshold in the last round but is not a confirmed straggler
  // (a straggler that started mid-round shows up like this first), nor has it been there, below the
  // threshold, for four times the rounds a straggler takes (then it is how the cluster runs).
  bool suspects() const;
  bool suspected(std::size_t pipeline) const;  // that pipeline is one suspects() is about
  // Pipelines other than the followed straggler above the threshold for `rounds` rounds in a row
  // (one that slows while another is followed), each with its ratio over the others' median.
  std::vector<Straggler> also_slow() const;
  void forget(int pipeline);  // its counts, once its slowdown is taken in elsewhere
  void reset();               // forget counts and the verdict (a new plan, or the API took over)

 private:
  bool settled(std::size_t d) const;
  bool fell_itself(std::size_t d, const std::vector<double>& ratios) const;
  DetectorOptions options_;
  std::vector<int> slow_rounds_, normal_rounds_;
  std::vector<int> between_rounds_;  // in a row above half the threshold
  std::vector<double> relative_;     // per pipeline, its ratio over the others' median in the last round
  std::optional<Straggler> current_;
  // The ratios of the last round with no straggler followed or the followed one slow (0: a pipeline's not
  // comparable with this round's).
  std::vector<double> last_ratios_;
};

}  // namespace perseus::online
