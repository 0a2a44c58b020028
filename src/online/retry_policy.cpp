#include "perseus/online/retry_policy.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

namespace perseus::online {

namespace {

// A change of the cluster's pace by more than this since the verdict makes it stale.
constexpr double kConditionsChanged = 0.01;

// Why the evidence a verdict rested on (`then`) no longer holds `now`, if it does not.
std::optional<std::string> stale_since(const Evidence& then, const Evidence& now) {
  if (now.baseline_corrections != then.baseline_corrections) return "the baseline was corrected since";
  if (now.straggler_changes != then.straggler_changes) return "a straggler came or went since";
  if (std::abs(now.conditions / then.conditions - 1) > kConditionsChanged)
    return fmt::format("the cluster's pace changed since (x{:.3f} then, x{:.3f} now)", then.conditions, now.conditions);
  return std::nullopt;
}

}  // namespace

RetryPolicy::RetryPolicy(int first, int most)
    : first_(std::max(first, 1)), most_(std::max(most, 0)), interval_(std::min(first_, std::max(most_, 1))) {}

void RetryPolicy::stepped_up(int round, const Evidence& evidence, bool same_plan_again) {
  stale_only_ = same_plan_again && condemned_before_ && !stale_since(at_step_, evidence);
  condemned_before_ = true;
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
  if (auto reason = stale_since(at_step_, now)) return say(std::move(*reason));
  if (stale) *stale = false;
  if (stale_only_) return false;
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
  stale_only_ = false;
  waiting_ = most_ > 0;
  stepped_round_ = round - interval_;  // due at once
  at_step_ = evidence;
}

}  // namespace perseus::online
