#include "perseus/online/retry_policy.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace perseus::online {

namespace {

// A change of the cluster's pace by more than this since the verdict makes it stale.
constexpr double kConditionsChanged = 0.01;

}  // namespace

RetryPolicy::RetryPolicy(int first, int most)
    : first_(std::max(first, 1)), most_(std::max(most, 0)), interval_(std::min(first_, std::max(most_, 1))) {}

void RetryPolicy::stepped_up(int round, const Evidence& evidence) {
  if (trying_) interval_ = std::min(interval_ * 2, std::max(most_, 1));  // condemned again: wait longer
  trying_ = false;
  waiting_ = most_ > 0;
  stepped_round_ = round;
  at_step_ = evidence;
}

bool RetryPolicy::due(int round, const Evidence& now, std::string* why, bool* stale) const {
  if (!waiting_) return false;
  if (stale) *stale = true;
  auto say = [&](std::string text) {
    if (why) *why = std::move(text);
    return true;
  };
  if (now.baseline_corrections != at_step_.baseline_corrections) return say("the baseline was corrected since");
  if (now.straggler_changes != at_step_.straggler_changes) return say("a straggler came or went since");
  if (std::abs(now.conditions / at_step_.conditions - 1) > kConditionsChanged)
    return say(fmt::format("the cluster's pace changed since (x{:.3f} then, x{:.3f} now)", at_step_.conditions,
                           now.conditions));
  if (stale) *stale = false;
  if (round - stepped_round_ >= interval_) return say(fmt::format("{} rounds passed since", round - stepped_round_));
  return false;
}

void RetryPolicy::retried(int) {
  waiting_ = false;
  trying_ = true;
}

bool RetryPolicy::held(int rounds) {
  constexpr int kHeld = 10;  // rounds without a verdict against it that make a retry a success
  if (!trying_ || rounds < std::min(interval_, kHeld)) return false;
  trying_ = false;
  interval_ = std::min(first_, std::max(most_, 1));
  return true;
}

void RetryPolicy::wait(int round, const Evidence& evidence) {
  waiting_ = most_ > 0;
  stepped_round_ = round - interval_;  // due at once
  at_step_ = evidence;
}

}  // namespace perseus::online
