#include <gtest/gtest.h>

#include <set>

#include "perseus/pipeline/dag.hpp"
#include "perseus/util/error.hpp"

using namespace perseus;

namespace {
std::string order(ScheduleKind kind, int stage, int S, int M, int extra = 0) {
  std::string text;
  for (const auto& inst : stage_schedule(kind, stage, S, M, extra)) {
    text.push_back(inst.kind == InstructionKind::forward ? 'F' : 'B');
    text.append(std::to_string(inst.microbatch));
    text.push_back(' ');
  }
  return text;
}
}  // namespace

TEST(Schedule, OneFOneBOrderForFourStages) {
  EXPECT_EQ(order(ScheduleKind::one_f_one_b, 0, 4, 6), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 ");
  EXPECT_EQ(order(ScheduleKind::one_f_one_b, 1, 4, 6), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5 ");
  EXPECT_EQ(order(ScheduleKind::one_f_one_b, 2, 4, 6), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5 ");
  EXPECT_EQ(order(ScheduleKind::one_f_one_b, 3, 4, 6), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 ");
}

TEST(Schedule, FewerMicrobatchesThanStages) {
  EXPECT_EQ(order(ScheduleKind::one_f_one_b, 0, 4, 2), "F0 F1 B0 B1 ");
  EXPECT_EQ(order(ScheduleKind::one_f_one_b, 3, 4, 2), "F0 B0 F1 B1 ");
  EXPECT_EQ(order(ScheduleKind::one_f_one_b, 0, 8, 1), "F0 B0 ");
}

TEST(Schedule, EveryStageRunsEachInstructionOnceForManyShapes) {
  for (int S = 1; S <= 9; ++S) {
    for (int M = 1; M <= 12; ++M) {
      for (int s = 0; s < S; ++s) {
        const auto insts = stage_schedule(ScheduleKind::one_f_one_b, s, S, M);
        ASSERT_EQ(insts.size(), static_cast<std::size_t>(2 * M)) << S << " " << M << " " << s;
        std::set<std::pair<int, int>> seen;
        int forwards = 0;
        for (const auto& inst : insts) {
          EXPECT_TRUE(seen.insert({static_cast<int>(inst.kind), inst.microbatch}).second);
          if (inst.kind == InstructionKind::forward) {
            EXPECT_EQ(inst.microbatch, forwards++);  // forwards in microbatch order
          } else {
            EXPECT_LT(inst.microbatch, forwards);   // a backward follows its forward
          }
        }
        // The warm-up: min(S - s, M) forwards before the first backward.
        int warmup = 0;
        while (insts[warmup].kind == InstructionKind::forward) ++warmup;
        EXPECT_EQ(warmup, std::min(S - s, M));
      }
      const auto dag = build_pipeline_dag(ScheduleKind::one_f_one_b, S, M);  // throws on a cycle
      EXPECT_EQ(dag.instructions.size(), static_cast<std::size_t>(2 * S * M));
    }
  }
}

TEST(Schedule, GPipeRunsAllForwardsFirst) {
  EXPECT_EQ(order(ScheduleKind::gpipe, 1, 3, 3), "F0 F1 F2 B0 B1 B2 ");
}

TEST(PipelineDag, EdgesFollowDataDependencies) {
  const auto dag = build_pipeline_dag(ScheduleKind::one_f_one_b, 2, 2);
  std::set<std::pair<std::string, std::string>> edges;
  auto name = [&](int node) -> std::string {
    if (node == dag.source) return "src";
    if (node == dag.sink) return "snk";
    const auto& i = dag.instructions[node];
    std::string text = std::to_string(i.stage);
    text.push_back(i.kind == InstructionKind::forward ? 'F' : 'B');
    text.append(std::to_string(i.microbatch));
    return text;
  };
  for (const auto& [u, v] : dag.edges) edges.insert({name(u), name(v)});
  const std::set<std::pair<std::string, std::string>> expected = {
      {"0F0", "0F1"}, {"0F1", "0B0"}, {"0B0", "0B1"},  // stage 0: F0 F1 B0 B1
      {"1F0", "1B0"}, {"1B0", "1F1"}, {"1F1", "1B1"},  // stage 1: F0 B0 F1 B1
      {"0F0", "1F0"}, {"0F1", "1F1"}, {"1B0", "0B0"}, {"1B1", "0B1"},
      {"src", "0F0"}, {"0B1", "snk"}};
  EXPECT_EQ(edges, expected);
}

TEST(Schedule, EnvPipeExtraForwardsPullForwardsAhead) {
  EXPECT_EQ(order(ScheduleKind::one_f_one_b, 0, 4, 6, 2), "F0 F1 F2 F3 F4 F5 B0 B1 B2 B3 B4 B5 ");
  EXPECT_EQ(order(ScheduleKind::one_f_one_b, 2, 4, 6, 1), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5 ");
  const auto dag = build_pipeline_dag(ScheduleKind::one_f_one_b, 4, 6, {2, 1, 1, 0});  // throws on a cycle
  EXPECT_EQ(dag.extra_forwards, (std::vector<int>{2, 1, 1, 0}));
}

TEST(Schedule, ExtraForwardsAreChecked) {
  EXPECT_THROW(check_extra_forwards(ScheduleKind::gpipe, {1, 0}, 2, 4), perseus::Error);
  EXPECT_THROW(check_extra_forwards(ScheduleKind::one_f_one_b, {1, 0, 0}, 2, 4), perseus::Error);  // size
  EXPECT_THROW(check_extra_forwards(ScheduleKind::one_f_one_b, {0, 1}, 2, 4), perseus::Error);     // last stage
  EXPECT_THROW(check_extra_forwards(ScheduleKind::one_f_one_b, {1, 2, 0}, 3, 8), perseus::Error);  // increases
  EXPECT_THROW(check_extra_forwards(ScheduleKind::one_f_one_b, {3, 0}, 2, 4), perseus::Error);     // > M - (S - s)
  EXPECT_NO_THROW(check_extra_forwards(ScheduleKind::one_f_one_b, {2, 0}, 2, 4));
  EXPECT_NO_THROW(check_extra_forwards(ScheduleKind::gpipe, {}, 2, 4));
}
