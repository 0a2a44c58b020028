#pragma once
// Runs one pipeline's iteration instruction by instruction: each stage runs its instructions in
// schedule order, each starting when its stage is free and its input is there (the previous
// model stage's forward of the microbatch; the next model stage's backward, or on the last model
// stage its own forward; model stages are the stages unless instructions name chunks, as
// interleaved schedules do). The caller says how long each one takes, so that the same walk serves a simulated
// cluster (which runs the instruction on its GPUs) and measured durations (a pipeline's
// compute-bound iteration time).
#include <cstddef>
#include <functional>
#include <vector>

#include "perseus/pipeline/schedule.hpp"

namespace perseus {

// `orders`: per stage, its instructions in order (stage_schedule). `run(stage, slot, start)` runs
// orders[stage][slot] from `start` and returns its end. Returns when the last instruction ends
// (`start` when there is none). Throws std::invalid_argument when the orders deadlock.
double run_pipeline(const std::vector<std::vector<Instruction>>& orders, int num_microbatches, double start,
                    const std::function<double(int stage, std::size_t slot, double start)>& run);

// The same with fixed durations per stage and slot.
double pipeline_makespan(const std::vector<std::vector<Instruction>>& orders, int num_microbatches,
                         const std::vector<std::vector<double>>& durations);

}  // namespace perseus
