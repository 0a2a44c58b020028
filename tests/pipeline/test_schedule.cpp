#include <gtest/gtest.h>

#include <set>
#include <tuple>

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
            EXPECT_LT(inst.microbatch, forwards);  // a backward follows its forward
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

TEST(Schedule, GPipeRunsAllForwardsFirst) { EXPECT_EQ(order(ScheduleKind::gpipe, 1, 3, 3), "F0 F1 F2 B0 B1 B2 "); }

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
      {"0F0", "1F0"}, {"0F1", "1F1"}, {"1B0", "0B0"}, {"1B1", "0B1"}, {"src", "0F0"}, {"0B1", "snk"}};
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

namespace {
std::string interleaved(int stage, int S, int M, int V) {
  std::string text;
  for (const auto& inst : stage_schedule(ScheduleKind::interleaved, stage, S, M, 0, V)) {
    if (!text.empty()) text.push_back(' ');
    text += short_name(inst, V);
  }
  return text;
}
}  // namespace

// Megatron-LM's interleaved 1F1B, written out by hand from its rules: stage r runs
// (S - r - 1) * 2 + (V - 1) * S warm-up forwards (at most M * V), then a forward and a backward in
// turn; forwards take S microbatches through chunk 0, then the same S through chunk 1, ...;
// backwards visit the chunks last first.
TEST(Schedule, InterleavedOrderIsMegatronsForSeveralShapes) {
  EXPECT_EQ(interleaved(0, 2, 2, 2), "F0c0 F1c0 F0c1 F1c1 B0c1 B1c1 B0c0 B1c0");
  EXPECT_EQ(interleaved(1, 2, 2, 2), "F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 B0c0 B1c0");
  EXPECT_EQ(interleaved(0, 4, 8, 2),
            "F0c0 F1c0 F2c0 F3c0 F0c1 F1c1 F2c1 F3c1 F4c0 F5c0 F6c0 B0c1 F7c0 B1c1 F4c1 B2c1 F5c1 B3c1 F6c1 B0c0 "
            "F7c1 B1c0 B2c0 B3c0 B4c1 B5c1 B6c1 B7c1 B4c0 B5c0 B6c0 B7c0");
  EXPECT_EQ(interleaved(3, 4, 8, 2),
            "F0c0 F1c0 F2c0 F3c0 F0c1 B0c1 F1c1 B1c1 F2c1 B2c1 F3c1 B3c1 F4c0 B0c0 F5c0 B1c0 F6c0 B2c0 F7c0 B3c0 "
            "F4c1 B4c1 F5c1 B5c1 F6c1 B6c1 F7c1 B7c1 B4c0 B5c0 B6c0 B7c0");
  EXPECT_EQ(interleaved(0, 2, 4, 3),
            "F0c0 F1c0 F0c1 F1c1 F0c2 F1c2 F2c0 B0c2 F3c0 B1c2 F2c1 B0c1 F3c1 B1c1 F2c2 B0c0 F3c2 B1c0 B2c2 B3c2 "
            "B2c1 B3c1 B2c0 B3c0");
  EXPECT_EQ(interleaved(1, 2, 4, 3),
            "F0c0 F1c0 F0c1 F1c1 F0c2 B0c2 F1c2 B1c2 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 F2c2 B2c2 F3c2 B3c2 "
            "B2c1 B3c1 B2c0 B3c0");
  EXPECT_EQ(interleaved(1, 3, 6, 2),
            "F0c0 F1c0 F2c0 F0c1 F1c1 F2c1 B0c1 F3c0 B1c1 F4c0 B2c1 F5c0 B0c0 F3c1 B1c0 F4c1 B2c0 F5c1 B3c1 B4c1 "
            "B5c1 B3c0 B4c0 B5c0");
}

TEST(Schedule, InterleavedRunsEveryChunkOfEveryMicrobatchOnceAndBuildsAnAcyclicDag) {
  for (int S = 1; S <= 5; ++S) {
    for (int V = 2; V <= 4; ++V) {
      for (int M = S; M <= 4 * S; M += S) {
        for (int r = 0; r < S; ++r) {
          const auto insts = stage_schedule(ScheduleKind::interleaved, r, S, M, 0, V);
          ASSERT_EQ(insts.size(), static_cast<std::size_t>(2 * M * V));
          std::set<std::tuple<int, int, int>> seen;
          for (const auto& inst : insts) {
            EXPECT_EQ(inst.stage, r);
            EXPECT_TRUE(seen.insert({static_cast<int>(inst.kind), inst.microbatch, inst.chunk}).second);
          }
        }
        const auto dag = build_pipeline_dag(ScheduleKind::interleaved, S, M, {}, V);  // throws on a cycle
        EXPECT_EQ(dag.instructions.size(), static_cast<std::size_t>(2 * S * M * V));
        EXPECT_EQ(dag.num_model_stages(), S * V);
      }
    }
  }
}

TEST(Schedule, InterleavedShapeErrorsSayWhatMegatronNeeds) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::bad_setting);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { stage_schedule(ScheduleKind::interleaved, 0, 4, 6, 0, 2); }).find("multiple of the stages"),
            std::string::npos);
  EXPECT_NE(message([] { stage_schedule(ScheduleKind::interleaved, 0, 4, 8, 0, 1); }).find("at least 2"),
            std::string::npos);
  EXPECT_NE(
      message([] { stage_schedule(ScheduleKind::one_f_one_b, 0, 4, 8, 0, 2); }).find("needs schedule interleaved"),
      std::string::npos);
  EXPECT_EQ(parse_schedule_kind("interleaved"), ScheduleKind::interleaved);
  EXPECT_EQ(schedule_names(), "1f1b, gpipe, interleaved, zb-h1, zbv, dualpipev");
}
