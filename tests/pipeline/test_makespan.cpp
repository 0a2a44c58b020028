// The critical path through a pipeline's per-device instruction orders, checked by hand.
#include <gtest/gtest.h>

#include <vector>

#include "perseus/pipeline/makespan.hpp"
#include "perseus/pipeline/schedule.hpp"

namespace perseus {
namespace {

TEST(PipelineMakespan, OneFOneBCriticalPathByHand) {
  // 2 stages, 2 microbatches, forward 1, backward 2: F0 F1 on stage 0 ... the 1F1B critical path is
  // F0(s0) F0(s1) B0(s1) B0(s0)... computed by hand: 9.
  std::vector<std::vector<Instruction>> orders;
  for (int s = 0; s < 2; ++s) orders.push_back(stage_schedule(ScheduleKind::one_f_one_b, s, 2, 2));
  std::vector<std::vector<double>> durations;
  for (const auto& order : orders) {
    durations.emplace_back();
    for (const auto& i : order) durations.back().push_back(i.kind == InstructionKind::forward ? 1.0 : 2.0);
  }
  // s0: F0[0,1] F1[1,2]; s1: F0[1,2] B0[2,4] F1[4,5] B1[5,7]; s0: B0[4,6] B1[7,9].
  EXPECT_DOUBLE_EQ(pipeline_makespan(orders, 2, durations), 9.0);
}

TEST(PipelineMakespan, InterleavedCriticalPathByHand) {
  // Megatron's interleaved 1F1B, 2 stages x 2 chunks, 2 microbatches, forward 1, backward 2: the
  // same walk as the emulator's hand-computed case (Emulator.InterleavedHandComputedCriticalPath).
  std::vector<std::vector<Instruction>> orders;
  for (int s = 0; s < 2; ++s) orders.push_back(stage_schedule(ScheduleKind::interleaved, s, 2, 2, 0, 2));
  std::vector<std::vector<double>> durations;
  for (const auto& order : orders) {
    durations.emplace_back();
    for (const auto& i : order) durations.back().push_back(i.kind == InstructionKind::forward ? 1.0 : 2.0);
  }
  EXPECT_DOUBLE_EQ(pipeline_makespan(orders, 2, durations), 15.0);
}

}  // namespace
}  // namespace perseus
