#pragma once
// The order functions the schedule registry (schedule.cpp) dispatches to, one file each.
#include <vector>

#include "perseus/pipeline/schedule.hpp"

namespace perseus::schedules {

std::vector<Instruction> one_f_one_b(int stage, const ScheduleShape& shape, int extra_forwards);
std::vector<Instruction> gpipe(int stage, const ScheduleShape& shape, int extra_forwards);
std::vector<Instruction> interleaved(int stage, const ScheduleShape& shape, int extra_forwards);
std::vector<Instruction> zb_h1(int stage, const ScheduleShape& shape, int extra_forwards);
std::vector<Instruction> zbv(int stage, const ScheduleShape& shape, int extra_forwards);
std::vector<Instruction> dualpipev(int stage, const ScheduleShape& shape, int extra_forwards);

}  // namespace perseus::schedules
