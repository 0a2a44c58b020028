#pragma once
// Online profiling of one (stage, forward|backward): which clock to measure next.
// Coarse to fine: first every `coarse_step`-th clock from the top down, stopping once energy has
// risen over `stop_after` consecutive clocks (the Perseus docs' rule; the coarse points cover that
// many clocks) after it first fell below the top clock's energy by `descent` (GPUs whose energy is
// flat or noisy near the top would otherwise stop before the part that saves energy); under noise,
// only a fall and rises beyond twice the error of the difference count. Then only
// where the Pareto front needs it: between two measured clocks whose faster one is Pareto-optimal
// whose slower one uses `fill_gap` less energy, the clock in the middle, until no such gap is
// left; and between two measured clocks above the one of least energy where the slower clock runs no
// longer than the faster one (time not monotone in the clock), until the two are neighbours; and the
// neighbours of the fastest clock measured, until it has both measured (a dip right below the top
// clock, which no coarse point shows). Clocks below the early stop cannot be Pareto-optimal and are
// never run.
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace perseus::online {

struct ScanOptions {
  int coarse_step = 5;
  int stop_after = 5;      // clocks of rising energy
  double descent = 0.01;   // energy must first have fallen this far below the top clock's
  double fill_gap = 0.05;  // relative energy drop between measured Pareto neighbours that is filled in
};

struct ClockMeasurement {
  double time = 0, energy = 0;  // one instruction, seconds and joules
  // The standard error of `time`, relative to it (0: not known). A clock counts as faster than a
  // faster-clocked one only by more than twice the error of the difference. Energy is taken to be
  // as precise: an instruction's energy is its time times a power far steadier than the time.
  double time_error = 0;
};

class ClockScan {
 public:
  // `clocks`: the clocks to choose from, any order (scanned high to low). Throws when empty.
  ClockScan(std::vector<int> clocks, ScanOptions options = {});

  // The clock to measure next; nullopt when the scan is done. Stable until record() is called.
  std::optional<int> next() const { return next_; }
  bool done() const { return !next_; }
  void record(int clock, ClockMeasurement measurement);
  // Asks for `clock` to be measured too (a plan wants to run it), after the scan's own clocks.
  // Returns false when it is measured already or not one of the scan's clocks.
  bool request(int clock);
  // Asks for `clock` to be measured again (it was measured under conditions that changed since),
  // before the scan's own clocks; its measurement is kept until then. False when it is not one of
  // the scan's measured clocks.
  bool redo(int clock);
  // Asks for `clock` to be measured once more (a plan runs it, and one round under noise knows its time
  // too roughly: a plan chosen on the luckiest of noisy clocks runs slower than predicted), after the
  // scan's own and requested clocks; the two measurements are then weighed by their errors. False when
  // it is not measured yet or already asked for.
  bool confirm(int clock);

  const std::map<int, ClockMeasurement>& measured() const { return measured_; }
  const std::vector<int>& clocks() const { return clocks_; }  // descending
  // The measured clocks as a profile gives them to the planner: a clock that runs shorter than a
  // higher one by no more than the noise of the two measurements allows takes the higher one's time
  // (under noise, the fastest of several clocks measured near the top reads faster than it runs, and
  // a plan counting on that runs slower than predicted); a dip larger than that stays.
  std::map<int, ClockMeasurement> settled() const;
  // The settled clocks and, between each two measured ones, every clock the scan skipped with
  // time and energy interpolated linearly in the clock: a plan may then use any clock in the
  // measured range (time and energy change smoothly with the clock between Pareto points).
  std::map<int, ClockMeasurement> interpolated() const;
  // The time `clock` should take by the other measured clocks: linear in 1/clock (a part that runs
  // with the clock and a part that does not) through its measured neighbours, or extrapolated from
  // the two nearest on one side. None with fewer than two other measured clocks.
  std::optional<double> predicted_time(int clock) const;
  // Clocks measured or still to measure, an upper bound while the coarse pass runs.
  std::size_t planned() const;

 private:
  void advance();
  void note_coarse_energy(const ClockMeasurement& measurement);
  void recount_coarse();
  std::optional<int> next_fill() const;
  std::optional<int> between(int faster, int slower) const;  // the clock halfway, if any
  std::optional<int> fastest_neighbour(const std::vector<int>& order, std::size_t cheapest) const;
  std::set<int> requested_, redo_, confirm_;

  std::vector<int> clocks_;  // descending
  ScanOptions options_;
  std::map<int, ClockMeasurement> measured_;
  std::optional<int> next_;
  bool coarse_ = true;
  std::size_t coarse_index_ = 0;
  int rises_ = 0;  // coarse points since the last new minimum whose energy clearly rose above it
  std::optional<ClockMeasurement> best_, top_;  // the coarse points of least energy and of the top clock
};

}  // namespace perseus::online
