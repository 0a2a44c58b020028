#pragma once
// A round's results in the turnkey controller's terms (online::RoundMeasurement): the first
// iteration of each rank's round is dropped when there are more (it may straddle the clock change).
#include <vector>

#include "perseus/online/round_measurement.hpp"
#include "perseus/pipeline/schedule.hpp"
#include "perseus/server/models.hpp"

namespace perseus::server {

// `ranks` sorted by rank; `orders` per stage, the schedule every rank runs (its forwards and
// backwards). `occurrences`: also fill in every occurrence's duration. Throws std::runtime_error
// naming the rank when a result lacks what is needed.
online::RoundMeasurement analyze_round(const std::vector<ProfilingResult>& results, const std::vector<RankInfo>& ranks,
                                       int dp_degree, const std::vector<std::vector<Instruction>>& orders,
                                       int num_microbatches, bool occurrences = false);

}  // namespace perseus::server
