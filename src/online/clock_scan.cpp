#include "perseus/online/clock_scan.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <stdexcept>

namespace perseus::online {

ClockScan::ClockScan(std::vector<int> clocks, ScanOptions options) : clocks_(std::move(clocks)), options_(options) {
  std::sort(clocks_.begin(), clocks_.end(), std::greater<>());
  clocks_.erase(std::unique(clocks_.begin(), clocks_.end()), clocks_.end());
  if (clocks_.empty()) throw std::invalid_argument("a clock scan needs at least one clock");
  options_.coarse_step = std::max(1, options_.coarse_step);
  next_ = clocks_.front();
}

namespace {

// Two measurements of one clock as one: each weighed by the inverse of its variance (equally where
// either's error is not known), the error the combination's.
ClockMeasurement combined(const ClockMeasurement& a, const ClockMeasurement& b) {
  const double va = std::pow(a.time_error * a.time, 2), vb = std::pow(b.time_error * b.time, 2);
  if (va <= 0 || vb <= 0) return {(a.time + b.time) / 2, (a.energy + b.energy) / 2, 0};
  const double wa = vb / (va + vb), wb = va / (va + vb);
  const double time = wa * a.time + wb * b.time;
  return {time, wa * a.energy + wb * b.energy, time > 0 ? std::sqrt(va * vb / (va + vb)) / time : 0};
}

}  // namespace

std::size_t ClockScan::planned() const {
  if (!coarse_) return measured_.size() + std::max<std::size_t>(requested_.size(), next_ ? 1 : 0);
  std::size_t step = static_cast<std::size_t>(options_.coarse_step);
  return measured_.size() + (clocks_.size() - coarse_index_ + step - 1) / step;
}

void ClockScan::record(int clock, ClockMeasurement measurement) {
  auto known = measured_.find(clock);
  if (known != measured_.end() && redo_.count(clock) == 0 && confirm_.erase(clock) != 0) {
    known->second = combined(known->second, measurement);
    return advance();
  }
  measured_[clock] = measurement;
  if (redo_.erase(clock) != 0) {
    recount_coarse();
    return advance();
  }
  if (coarse_ && next_ && clock == *next_) {
    note_coarse_energy(measurement);
    coarse_index_ += static_cast<std::size_t>(options_.coarse_step);
  }
  advance();
}

namespace {

// Twice the standard error of the difference of two measurements' `value` (time, or energy: as precise).
double twice_error(const ClockMeasurement& a, const ClockMeasurement& b, double ClockMeasurement::*value) {
  return 2 * std::hypot(a.time_error * (a.*value), b.time_error * (b.*value));
}

double energy_noise(const ClockMeasurement& a, const ClockMeasurement& b) {
  return twice_error(a, b, &ClockMeasurement::energy);
}

// Whether `slower_clock`'s measurement runs shorter than `faster_clock`'s by more than twice the
// standard error of the difference.
bool clearly_shorter(const ClockMeasurement& slower_clock, const ClockMeasurement& faster_clock) {
  return slower_clock.time < faster_clock.time - twice_error(slower_clock, faster_clock, &ClockMeasurement::time);
}

}  // namespace

// One coarse clock's energy, in the order the pass measures them: a new minimum, one more rise, or,
// within the noise of the minimum, neither (a flat stretch measured under noise rises and falls by
// chance; one point up is no evidence that no slower clock saves energy).
void ClockScan::note_coarse_energy(const ClockMeasurement& measurement) {
  if (!top_) top_ = measurement;
  if (!best_ || measurement.energy < best_->energy) {
    best_ = measurement;
    rises_ = 0;
  } else if (measurement.energy > best_->energy + energy_noise(measurement, *best_)) {
    ++rises_;
  }
}

// The coarse pass's early stop from the clocks measured now: a clock measured again replaces what a
// slow spell made of it, and a pass it stopped too early goes on.
void ClockScan::recount_coarse() {
  top_.reset();
  best_.reset();
  rises_ = 0;
  const auto step = static_cast<std::size_t>(options_.coarse_step);
  for (std::size_t i = 0; i < coarse_index_ && i < clocks_.size(); i += step) {
    auto it = measured_.find(clocks_[i]);
    if (it != measured_.end()) note_coarse_energy(it->second);
  }
  if (!coarse_ && coarse_index_ < clocks_.size()) coarse_ = true;  // advance() judges the stop anew
}

bool ClockScan::request(int clock) {
  if (measured_.count(clock) != 0 || std::find(clocks_.begin(), clocks_.end(), clock) == clocks_.end()) return false;
  requested_.insert(clock);
  if (!next_) next_ = *requested_.rbegin();
  return true;
}

bool ClockScan::confirm(int clock) {
  if (measured_.count(clock) == 0 || !confirm_.insert(clock).second) return false;
  if (!next_) next_ = *confirm_.rbegin();
  return true;
}

bool ClockScan::redo(int clock) {
  if (measured_.count(clock) == 0) return false;
  redo_.insert(clock);
  next_ = *redo_.rbegin();
  return true;
}

void ClockScan::advance() {
  if (!redo_.empty()) {
    next_ = *redo_.rbegin();
    return;
  }
  if (coarse_) {
    int needed = (options_.stop_after + options_.coarse_step - 1) / options_.coarse_step;
    bool fell = best_ && top_ && best_->energy < top_->energy * (1 - options_.descent) - energy_noise(*best_, *top_);
    bool stop = fell && rises_ >= std::max(needed, 1);
    while (!stop && coarse_index_ < clocks_.size() && measured_.count(clocks_[coarse_index_]) != 0)
      coarse_index_ += static_cast<std::size_t>(options_.coarse_step);
    if (!stop && coarse_index_ < clocks_.size()) {
      next_ = clocks_[coarse_index_];
      return;
    }
    coarse_ = false;
  }
  next_ = next_fill();
  for (auto it = requested_.begin(); it != requested_.end();)
    it = measured_.count(*it) != 0 ? requested_.erase(it) : std::next(it);
  if (!next_ && !requested_.empty()) next_ = *requested_.rbegin();
  if (!next_ && !confirm_.empty()) next_ = *confirm_.rbegin();
}

std::map<int, ClockMeasurement> ClockScan::settled() const {
  std::map<int, ClockMeasurement> out = measured_;
  const ClockMeasurement* shortest = nullptr;  // of the clocks above, the one that runs shortest
  for (auto it = out.rbegin(); it != out.rend(); ++it) {
    ClockMeasurement& m = it->second;
    if (shortest && m.time < shortest->time && !clearly_shorter(m, *shortest)) m.time = shortest->time;
    if (!shortest || m.time < shortest->time) shortest = &m;
  }
  return out;
}

std::map<int, ClockMeasurement> ClockScan::interpolated() const {
  const std::map<int, ClockMeasurement> settled_clocks = settled();
  std::map<int, ClockMeasurement> out = settled_clocks;
  for (auto hi = settled_clocks.begin(); hi != settled_clocks.end(); ++hi) {
    auto lo = hi;
    if (++hi == settled_clocks.end()) break;
    // lo and hi are neighbours among the measured clocks (ascending).
    const auto& [c0, m0] = *lo;
    const auto& [c1, m1] = *hi;
    for (int c : clocks_) {
      if (c <= c0 || c >= c1) continue;
      double w = double(c - c0) / double(c1 - c0);
      out[c] = {m0.time + w * (m1.time - m0.time), m0.energy + w * (m1.energy - m0.energy), 0};
    }
    hi = lo;
  }
  return out;
}

std::optional<double> ClockScan::predicted_time(int clock) const {
  std::vector<std::pair<int, double>> below, above;  // nearest first
  for (auto it = measured_.rbegin(); it != measured_.rend(); ++it)
    if (it->first < clock) below.emplace_back(it->first, it->second.time);
  for (const auto& [c, m] : measured_)
    if (c > clock) above.emplace_back(c, m.time);
  std::pair<int, double> a, b;
  if (!below.empty() && !above.empty()) {
    a = below.front(), b = above.front();
  } else if (below.size() >= 2) {
    a = below[0], b = below[1];
  } else if (above.size() >= 2) {
    a = above[0], b = above[1];
  } else {
    return std::nullopt;
  }
  const double xa = 1.0 / a.first, xb = 1.0 / b.first, x = 1.0 / clock;
  return a.second + (b.second - a.second) * (x - xa) / (xb - xa);
}

std::optional<int> ClockScan::next_fill() const {
  // Measured clocks high to low; the faster clock of a gap must be on the measured Pareto front
  // (lower energy than every faster clock), else nothing between can be Pareto-optimal either.
  std::vector<int> order;
  for (auto it = measured_.rbegin(); it != measured_.rend(); ++it) order.push_back(it->first);
  double best = 0;
  for (std::size_t i = 0; i + 1 < order.size(); ++i) {
    double ea = measured_.at(order[i]).energy, eb = measured_.at(order[i + 1]).energy;
    bool pareto = i == 0 || ea < best;
    if (i == 0 || ea < best) best = ea;
    if (!pareto || ea - eb <= options_.fill_gap * ea) continue;
    if (auto middle = between(order[i], order[i + 1])) return middle;
  }
  // Where a slower clock runs no longer than a faster one, time is not monotone in the clock there
  // (measured profiles near the top clock): the clocks between cannot be interpolated, and one of
  // them may be both faster and cheaper than either end. Bisected until the ends are neighbours,
  // above the clock of least energy (below it no plan runs).
  std::size_t cheapest = 0;
  for (std::size_t i = 1; i < order.size(); ++i)
    if (measured_.at(order[i]).energy < measured_.at(order[cheapest]).energy) cheapest = i;
  for (std::size_t i = 0; i < cheapest; ++i)
    if (measured_.at(order[i + 1]).time <= measured_.at(order[i]).time)
      if (auto middle = between(order[i], order[i + 1])) return middle;
  return fastest_neighbour(order, cheapest);
}

// A dip right next to the fastest measured clock (as A100s run one step below the top faster than
// at the top) leaves no slower clock running no longer for the rule above to see: the fastest
// measured clock's neighbours are measured too, and theirs in turn while a new one is clearly
// faster, above the clock of least energy. The plans for no slowdown live at the fastest clock,
// where every tenth of a percent is time a plan may spend saving energy.
std::optional<int> ClockScan::fastest_neighbour(const std::vector<int>& order, std::size_t cheapest) const {
  std::size_t fastest = 0;  // order: measured clocks high to low
  for (std::size_t i = 1; i <= cheapest && i < order.size(); ++i)
    if (clearly_shorter(measured_.at(order[i]), measured_.at(order[fastest]))) fastest = i;
  const auto at = static_cast<std::size_t>(std::find(clocks_.begin(), clocks_.end(), order[fastest]) - clocks_.begin());
  const int floor = order[cheapest];
  for (std::size_t neighbour : {at - 1, at + 1})  // at - 1 wraps past the end for the top clock
    if (neighbour < clocks_.size() && clocks_[neighbour] >= floor && measured_.count(clocks_[neighbour]) == 0)
      return clocks_[neighbour];
  return std::nullopt;
}

std::optional<int> ClockScan::between(int faster, int slower) const {
  auto hi = std::find(clocks_.begin(), clocks_.end(), faster) - clocks_.begin();
  auto lo = std::find(clocks_.begin(), clocks_.end(), slower) - clocks_.begin();
  if (lo - hi < 2) return std::nullopt;
  return clocks_[static_cast<std::size_t>((hi + lo) / 2)];
}

}  // namespace perseus::online
