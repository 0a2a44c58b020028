#pragma once
// What one round measured, in the terms the turnkey scheduler decides with (DESIGN §5): the job's
// iteration time and energy, each (stage, kind)'s instruction time and energy, the blocking power,
// and each data-parallel pipeline's compute-bound iteration time (its schedule run with its own
// measured instruction durations). The first iteration of each rank's round is dropped when there
// are more: it may straddle the clock change.
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "perseus/pipeline/schedule.hpp"
#include "perseus/server/models.hpp"

namespace perseus::server {

struct RoundMeasurement {
  double iteration_time = 0;  // the slowest rank's, per iteration
  double energy = 0;          // every rank's, per iteration
  // Per (stage, kind): mean time and energy of one instruction over the stage's ranks.
  std::map<std::pair<int, InstructionKind>, std::pair<double, double>> instructions;
  std::optional<double> blocking_power;  // watts outside forwards and backwards; none when never idle
  std::vector<double> pipeline_time;     // per dp rank: compute-bound iteration time
  std::vector<double> pipeline_energy;   // per dp rank: its ranks' energy per iteration
};

// `ranks` sorted by rank; `orders` per stage, the schedule every rank runs (its forwards and
// backwards). Throws std::runtime_error naming the rank when a result lacks what is needed.
RoundMeasurement analyze_round(const std::vector<ProfilingResult>& results, const std::vector<RankInfo>& ranks,
                               int dp_degree, const std::vector<std::vector<Instruction>>& orders, int num_microbatches);

// A round's stored record for the turnkey scheduler: everything above, doubles exact, so that a
// restarted server replays the same decisions. Its size grows with stages and pipelines, not ranks:
// about 60 bytes per (stage, kind) and 50 per data-parallel pipeline.
nlohmann::json to_json(const RoundMeasurement& m);
RoundMeasurement round_measurement_from_json(const nlohmann::json& j);  // throws on a malformed record

}  // namespace perseus::server
