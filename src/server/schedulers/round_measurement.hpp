#pragma once
// A round's results in the turnkey controller's terms (online::RoundMeasurement), over each rank's
// counted iterations (protocol/round_mean.hpp: its warm-up after the clock change left out).
#include <nlohmann/json.hpp>
#include <vector>

#include "perseus/online/round_measurement.hpp"
#include "perseus/pipeline/schedule.hpp"
#include "perseus/server/wire.hpp"

namespace perseus::server {

// `ranks` sorted by rank; `orders` per stage, the schedule every rank runs (its forwards and
// backwards). `occurrences`: also fill in every occurrence's duration. Throws std::runtime_error
// naming the rank when a result lacks what is needed.
online::RoundMeasurement analyze_round(const std::vector<ProfilingResult>& results, const std::vector<RankInfo>& ranks,
                                       int dp_degree, const std::vector<std::vector<Instruction>>& orders,
                                       int num_microbatches, bool occurrences = false);

// A round's stored record for the turnkey scheduler: the whole measurement, doubles exact, so that a
// restarted server replays the same decisions. Its size grows with stages, microbatches and
// pipelines, never with tensor-parallel ranks: per pipeline one duration per slot of each stage's
// schedule, and in warm-up and profiling rounds each occurrence's duration on one GPU per stage and pipeline.
nlohmann::json to_json(const online::RoundMeasurement& m);
online::RoundMeasurement round_measurement_from_json(const nlohmann::json& j);  // throws on a malformed record

}  // namespace perseus::server
