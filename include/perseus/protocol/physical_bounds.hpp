#pragma once
// A rank's result is a measurement only when it could have happened: every iteration took time and
// drew energy, no faster than the GPU's maximum power limit allows, and its instructions fit in it.
// One that could not (a broken energy counter, a client's bug) is rejected for that rank with a
// warning, and the round is not used: it never reaches a profile or a decision.
#include <optional>
#include <string>
#include <vector>

#include "perseus/protocol/models.hpp"

namespace perseus::protocol {

// Used when a rank does not say its GPU's maximum power limit (the artifact's and Zeus's clients):
// no GPU draws more.
inline constexpr double kMaxPlausibleGpuPowerW = 2000;
// Rounds in a row run again because a result was rejected before the job ends saying why.
inline constexpr int kMaxRejectedRounds = 3;
// Slack on the power bound: power capping lets short excursions through, and energy counters are coarse.
inline constexpr double kPowerSlack = 1.25;
// What no measurement can be, whatever the GPU: a time (an iteration's or an instruction's) that
// is negative or longer than a day, an energy that is negative or above what the most powerful GPU
// (kMaxPlausibleGpuPowerW, with kPowerSlack) draws in a day. POST /result refuses such a value
// with 422 naming it, so that sums and means of results stay finite.
inline constexpr double kMaxMeasuredSeconds = 86400;
inline constexpr double kMaxMeasuredJoules = kMaxMeasuredSeconds * kMaxPlausibleGpuPowerW * kPowerSlack;

// Why `result` cannot be a measurement of a GPU whose maximum power limit is `max_power_w`;
// "" when it can. It must hold an iteration, and every iteration: time and energy finite and positive, average power at
// most max_power_w (with kPowerSlack), its instructions' times and energies finite, not negative,
// and together within the iteration's (a coarse energy counter may read 0 J for a short one).
std::string implausible_result(const ProfilingResult& result, double max_power_w);

// Instructions an iteration may measure beyond the rank's registered pipe_schedule (an optimizer
// step, a data load the client times), and instruction names a breakdown may hold beyond it.
inline constexpr std::size_t kMaxUnscheduledInstructions = 16;
// Instruction names one breakdown may hold at all, checked while a result is decoded.
inline constexpr std::size_t kMaxResultInstructions = 64;

// Why `result` holds more than `rank`'s registered schedule justifies, naming the field ("" when it
// does not): a breakdown naming more instructions than the schedule's distinct ones plus
// kMaxUnscheduledInstructions, or an iteration holding more timings (or energies) than the
// schedule's length plus kMaxUnscheduledInstructions. POST /result refuses it (413) before it is held.
std::string oversized_result(const ProfilingResult& result, const RankInfo& rank);

// The power bound for a rank: the maximum power limit its client sent, else kMaxPlausibleGpuPowerW.
double max_power_w(const RankInfo& rank);

// A blocking power (W outside forwards and backwards) derived from `ranks`' results, when a GPU can
// draw it: finite, not negative, within the lowest maximum power limit of those ranks (with
// kPowerSlack). A few milliseconds of idle time on a coarse energy counter can make it absurd.
std::optional<double> plausible_blocking_power(double watts, const std::vector<RankInfo>& ranks);

}  // namespace perseus::protocol
