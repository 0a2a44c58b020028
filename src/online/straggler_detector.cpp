#include "perseus/online/straggler_detector.hpp"

#include <algorithm>
#include <cmath>

#include "perseus/online/statistics.hpp"

namespace perseus::online {

namespace {

// Each pipeline's ratio over the others' median, a followed straggler counted at the slowdown it is
// followed at: next to it (with one or two others, it is their median) a pipeline that slows would not
// look slow.
std::vector<double> relative_to_others(std::vector<double> ratios, const std::optional<Straggler>& followed) {
  if (followed) ratios[static_cast<std::size_t>(followed->pipeline)] /= followed->slowdown;
  std::vector<double> out(ratios.size());
  for (std::size_t d = 0; d < ratios.size(); ++d) out[d] = ratios[d] / median_of_others(ratios, d);
  return out;
}

}  // namespace

bool StragglerDetector::suspects() const {
  for (std::size_t d = 0; d < normal_rounds_.size(); ++d)
    if (suspected(d)) return true;
  return false;
}

bool StragglerDetector::suspected(std::size_t d) const {
  return d < normal_rounds_.size() && normal_rounds_[d] == 0 &&
         !(current_ && current_->pipeline == static_cast<int>(d)) && !settled(d);
}

// Between half the threshold and the threshold for four times the rounds a straggler takes: a pipeline
// that stays there is no straggler starting but how the cluster runs now (a straggler below the
// threshold, not followed): suspected for good, it would hold every verdict on the plans.
bool StragglerDetector::settled(std::size_t d) const {
  return d < between_rounds_.size() && slow_rounds_[d] == 0 && between_rounds_[d] >= 4 * std::max(options_.rounds, 1);
}

void StragglerDetector::reset() {
  slow_rounds_.clear();
  normal_rounds_.clear();
  between_rounds_.clear();
  relative_.clear();
  last_ratios_.clear();
  current_.reset();
}

bool StragglerDetector::observe(const std::vector<double>& ratios) {
  if (ratios.size() < 2) return false;  // a lone pipeline has nobody to slow down for
  if (slow_rounds_.size() != ratios.size()) {
    slow_rounds_.assign(ratios.size(), 0);
    normal_rounds_.assign(ratios.size(), 0);
    between_rounds_.assign(ratios.size(), 0);
    relative_.assign(ratios.size(), 1.0);
  }
  auto count = [&](std::size_t d, double relative) {
    relative_[d] = relative;
    slow_rounds_[d] = relative > 1 + options_.threshold ? slow_rounds_[d] + 1 : 0;
    normal_rounds_[d] = relative <= 1 + options_.threshold / 2 ? normal_rounds_[d] + 1 : 0;
    between_rounds_[d] = relative > 1 + options_.threshold / 2 ? between_rounds_[d] + 1 : 0;
  };
  // The followed straggler against the others as they ran: has it recovered, or changed?
  bool changed = false;
  const int followed = current_ ? current_->pipeline : -1;
  if (current_) {
    const auto d = static_cast<std::size_t>(followed);
    const double before = relative_[d];
    count(d, ratios[d] / median_of_others(ratios, d));
    // Changed when two rounds in a row agree on another slowdown: one round alone may be half the old
    // and half the new (the straggler's change, or another pipeline's, within it).
    const auto away = [&](double relative, double by) {
      return std::abs(relative - current_->slowdown) > by * current_->slowdown;
    };
    const bool agreeing = std::abs(relative_[d] - before) <= options_.threshold / 2 * relative_[d];
    // Nearer its old slowdown (by half the threshold, as the others are suspected), it is taken to have
    // moved only where no other pipeline looks slow by the threshold next to its old slowdown (with two
    // pipelines, the other slowing reads the same: that one is reported apart): counted at a slowdown it
    // no longer has, the others would look that much slower next to it for good, neither cleared nor
    // detected, and every verdict on the plans held (a straggler measured 1.07x that runs 1.03x).
    const auto others = relative_to_others(ratios, current_);
    bool others_within = true;
    for (std::size_t e = 0; e < others.size(); ++e)
      if (e != d && others[e] > 1 + options_.threshold) others_within = false;
    const double half = options_.threshold / 2;
    // Cleared where its own time fell by more than the others' rose since its last slow round: next to
    // others that slowed to its pace it looks recovered without having changed (two pipelines both slow
    // read as the straggler recovering, and the calibrations started anew on that verdict read the slow
    // pipeline's conditions 2-12% low). Those are reported apart (also_slow), the straggler still
    // followed.
    if (normal_rounds_[d] >= options_.clear_rounds && fell_itself(d, ratios)) {
      current_.reset();
      changed = true;
    } else if (agreeing &&
               ((slow_rounds_[d] >= options_.rounds && away(relative_[d], options_.threshold) &&
                 away(before, options_.threshold)) ||
                (others_within && relative_[d] > 1 + half && away(relative_[d], half) && away(before, half)))) {
      current_->slowdown = relative_[d];
      changed = true;
    }
  }
  // The ratios a recovery is measured from: the last round's, held while a followed straggler runs within
  // half the threshold (with clear_rounds above one, each of those rounds is compared with its last slow
  // round).
  if (!current_ || normal_rounds_[static_cast<std::size_t>(current_->pipeline)] == 0) last_ratios_ = ratios;
  // Every other pipeline against the others, the followed straggler at the slowdown it is now followed at.
  const auto others = relative_to_others(ratios, current_);
  for (std::size_t d = 0; d < ratios.size(); ++d)
    if (static_cast<int>(d) != followed) count(d, others[d]);
  if (changed) return true;
  if (current_) return false;
  std::optional<std::size_t> slowest;
  for (std::size_t d = 0; d < ratios.size(); ++d)
    if (slow_rounds_[d] >= options_.rounds && (!slowest || relative_[d] > relative_[*slowest])) slowest = d;
  if (!slowest) return false;
  current_ = Straggler{static_cast<int>(*slowest), relative_[*slowest]};
  return true;
}

// Its ratio's fall since its last slow round against the others' rise (their median's, of those whose ratio
// then is known and comparable), by more than a quarter of the threshold: a noisy round's draw does not
// clear a straggler the others slowed to.
bool StragglerDetector::fell_itself(std::size_t d, const std::vector<double>& ratios) const {
  if (last_ratios_.size() != ratios.size() || last_ratios_[d] <= 0) return true;
  std::vector<double> rose;
  for (std::size_t e = 0; e < ratios.size(); ++e)
    if (e != d && last_ratios_[e] > 0) rose.push_back(ratios[e] / last_ratios_[e] - 1);
  const double others = rose.empty() ? 0.0 : median(rose);
  return (1 - ratios[d] / last_ratios_[d]) - others > options_.threshold / 4;
}

std::vector<Straggler> StragglerDetector::also_slow() const {
  std::vector<Straggler> out;
  if (!current_) return out;
  for (std::size_t d = 0; d < slow_rounds_.size(); ++d)
    if (static_cast<int>(d) != current_->pipeline && slow_rounds_[d] >= options_.rounds)
      out.push_back({static_cast<int>(d), relative_[d]});
  return out;
}

void StragglerDetector::forget(int pipeline) {
  const auto d = static_cast<std::size_t>(pipeline);
  if (d >= slow_rounds_.size()) return;
  slow_rounds_[d] = normal_rounds_[d] = between_rounds_[d] = 0;
  if (d < last_ratios_.size()) last_ratios_[d] = 0;  // its ratio is taken at its new pace from now on
  relative_[d] = 1.0;
}

}  // namespace perseus::online
