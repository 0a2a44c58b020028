#pragma once
// Random noisy stage profiles, as measurements of real GPUs look: for property tests of the planner
// on inputs nobody tuned it for. Each case draws a pipeline shape (2-8 stages, 2-16 microbatches,
// 1F1B or ZB-H1 with the backward split in two; or any schedule asked for, 2-4 stages of several
// chunks for interleaved and the V schedules), a GPU (a set of clocks, how its time and power
// follow the clock), per-stage work, a noise level of 0-15% on every time and energy, and the
// defects of measured files: clocks missing from some (stage, kind), rows measured equal, rows in
// any order, and (in a few cases) a row given twice, which the profile reader must reject.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "perseus/pipeline/schedule.hpp"

namespace perseus::fixtures {

struct RandomProfileCase {
  std::uint64_t seed = 0;
  std::string csv;
  int stages = 2, microbatches = 2;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int virtual_stages = 1;  // model chunks per stage: the profile has stages x this many stages
  double unit_time = 0.001, p_block = 0, noise = 0;
  bool duplicate_row = false;      // a (stage, kind, clock) appears twice: the reader must reject it
  bool top_clock_fastest = false;  // every (stage, kind) runs fastest at its highest clock

  std::string describe() const {
    return fmt::format("seed {}: {} stages{}, {} microbatches, {}, unit time {:.3g} s, P_block {:.1f} W, noise {:.0f}%",
                       seed, stages, virtual_stages > 1 ? fmt::format(" x {} chunks", virtual_stages) : "",
                       microbatches, to_string(schedule), unit_time, p_block, 100 * noise);
  }
};

struct RandomProfileRequest {
  std::optional<ScheduleKind> schedule;  // none: 1F1B or ZB-H1, at random
  bool top_clock_fastest = false;        // no row runs faster than its (stage, kind)'s top clock
  bool duplicate_rows = true;            // a few cases give a row twice
};

inline RandomProfileCase random_profile_case(std::uint64_t seed, const RandomProfileRequest& request = {}) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto integer = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return uniform(0, 1) < p; };
  RandomProfileCase c;
  c.seed = seed;
  c.stages = integer(2, 8);
  c.microbatches = integer(2, 16);
  c.schedule = chance(0.5) ? ScheduleKind::one_f_one_b : ScheduleKind::zb_h1;
  if (request.schedule) c.schedule = *request.schedule;
  c.virtual_stages = schedule_virtual_stages(c.schedule, c.schedule == ScheduleKind::interleaved ? integer(2, 3) : 1);
  if (c.virtual_stages > 1) {  // several chunks per stage: fewer stages, and microbatches the schedule takes
    c.stages = integer(2, 4);
    c.microbatches = c.stages * integer(1, 4);
    for (;; ++c.microbatches) {
      try {
        check_schedule_shape(c.schedule, c.stages, c.microbatches, c.virtual_stages);
        break;
      } catch (const std::exception&) {}
    }
  }
  const int model_stages = c.stages * c.virtual_stages;
  c.noise = chance(0.15) ? 0.0 : uniform(0, 0.15);
  c.p_block = chance(0.1) ? 0.0 : uniform(20, 150);

  // The GPU: its clocks (a top clock and a step, a handful to dozens of them) and how time and
  // power follow the clock (time: a compute-bound share slows with it; power: idle plus a dynamic
  // part growing with clock and voltage squared).
  const int top = integer(1000, 2100);
  const int step = std::vector<int>{15, 30, 45, 60, 90, 135}[integer(0, 5)];
  const int count = std::min(integer(1, 40), (top - 200) / step + 1);
  std::vector<int> clocks;
  for (int k = 0; k < count; ++k) clocks.push_back(top - k * step);
  const double idle_power = uniform(40, 100), dynamic_power = uniform(100, 400), low_voltage = uniform(0.6, 0.95);
  const double missing = chance(0.5) ? uniform(0, 0.4) : 0.0;
  const double equal_rows = chance(0.3) ? uniform(0, 0.3) : 0.0;

  struct Row {
    int stage;
    std::string kind;
    int clock;
    double time, energy;
  };
  std::vector<Row> rows;
  std::normal_distribution<double> gauss(0.0, 1.0);
  auto noisy = [&](double value) { return value * std::max(0.3, 1 + c.noise * gauss(rng)); };
  const double base_time = uniform(0.005, 0.2);
  std::vector<std::string> kinds = {"forward", "backward"};
  if (splits_backward(c.schedule)) kinds = {"forward", "backward_input", "backward_weight"};
  const double input_share = uniform(0.3, 0.7);
  double shortest = 1e9;
  for (int s = 0; s < model_stages; ++s) {
    const double work = uniform(0.7, 1.5);
    for (const auto& kind : kinds) {
      double top_time = base_time * work;
      if (kind != "forward") top_time *= uniform(1.5, 2.5);
      if (kind == "backward_input") top_time *= input_share;
      if (kind == "backward_weight") top_time *= 1 - input_share;
      shortest = std::min(shortest, top_time);
      const double compute_share = uniform(0.3, 1.0);
      std::vector<Row> kept;
      for (std::size_t k = 0; k < clocks.size(); ++k) {
        if (k > 0 && chance(missing)) continue;  // the top clock stays: a (stage, kind) never lacks every clock
        const double ratio = static_cast<double>(clocks[k]) / top;
        const double span = clocks.size() > 1 ? 1 - static_cast<double>(k) / static_cast<double>(clocks.size() - 1) : 1;
        const double voltage = low_voltage + (1 - low_voltage) * span;
        const double time = top_time * (compute_share / ratio + 1 - compute_share);
        const double power = idle_power + dynamic_power * ratio * voltage * voltage;
        Row row{s, kind, clocks[k], noisy(time), noisy(power * time)};
        if (!kept.empty() && chance(equal_rows)) {  // measured the same as the clock above
          row.time = kept.back().time;
          row.energy = kept.back().energy;
        }
        if (request.top_clock_fastest && !kept.empty()) row.time = std::max(row.time, kept.front().time);
        kept.push_back(row);
      }
      rows.insert(rows.end(), kept.begin(), kept.end());
    }
  }
  // Whether the top clock is each (stage, kind)'s fastest row (noise can make a lower one faster).
  c.top_clock_fastest = true;
  for (const auto& a : rows)
    for (const auto& b : rows)
      if (a.stage == b.stage && a.kind == b.kind && a.clock == top && b.time < a.time) c.top_clock_fastest = false;
  // A unit time from a third to a two-hundredth of the shortest instruction (log-uniform), two
  // significant digits.
  const double unit = shortest / std::exp(uniform(std::log(3.0), std::log(200.0)));
  const double power10 = std::pow(10.0, std::floor(std::log10(unit)) - 1);
  c.unit_time = std::floor(unit / power10) * power10;
  c.duplicate_row = request.duplicate_rows && chance(0.05);
  if (c.duplicate_row) rows.push_back(rows[static_cast<std::size_t>(integer(0, static_cast<int>(rows.size()) - 1))]);
  std::shuffle(rows.begin(), rows.end(), rng);
  c.csv = "stage,instruction,frequency,time,energy\n";
  for (const auto& r : rows) c.csv += fmt::format("{},{},{},{},{}\n", r.stage, r.kind, r.clock, r.time, r.energy);
  return c;
}

// How many random cases a property test runs: `default_count`, or the PERSEUS_RANDOM_CASES
// environment variable (thousands, locally).
inline int random_case_count(int default_count) {
  const char* text = std::getenv("PERSEUS_RANDOM_CASES");
  if (!text) return default_count;
  const int count = std::atoi(text);
  return count > 0 ? count : default_count;
}

}  // namespace perseus::fixtures
