// Zero-bubble, V-shape and DualPipeV schedules: their orders, DAGs, profiles with split backwards,
// and the planner's frontier against an exhaustive enumeration of clock plans on small pipelines.
#include <gtest/gtest.h>

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <set>
#include <string>

#include "perseus/emulate/emulator.hpp"
#include "perseus/pipeline/dag.hpp"
#include "perseus/pipeline/makespan.hpp"
#include "perseus/profile/backward_split.hpp"
#include "perseus/solver/planning.hpp"
#include "perseus/util/error.hpp"

namespace perseus {
namespace {

const ScheduleKind kSplitSchedules[] = {ScheduleKind::zb_h1, ScheduleKind::zbv, ScheduleKind::dualpipev};

int min_microbatches(ScheduleKind kind, int stages) { return kind == ScheduleKind::dualpipev ? 2 * stages : 1; }

// Every (model stage, microbatch) runs its forward once and its backward once (whole, or both split
// parts; a pair counts for its two parts), every stage's instructions are on that stage, and the
// orders run without deadlock.
TEST(SplitSchedules, EveryMicrobatchRunsEachPartOnceWithoutDeadlock) {
  for (auto kind : kSplitSchedules)
    for (int S = 1; S <= 5; ++S)
      for (int M = min_microbatches(kind, S); M <= 12; ++M) {
        SCOPED_TRACE(fmt::format("{} S={} M={}", to_string(kind), S, M));
        const int K = S * schedule_virtual_stages(kind, 1);
        std::map<std::tuple<int, int, int>, int> runs;  // (model stage, microbatch, kind) -> count
        std::vector<std::vector<Instruction>> orders;
        for (int s = 0; s < S; ++s) {
          orders.push_back(stage_schedule(kind, s, S, M));
          for (const auto& inst : orders.back()) {
            ASSERT_EQ(inst.stage, s);
            if (inst.kind == InstructionKind::forward_backward) {
              ++runs[{model_stage(inst, S), inst.microbatch, 0}];
              ++runs[{model_stage_of(s, inst.pair_chunk, inst.v_placement, S), inst.pair_microbatch, 1}];
              ++runs[{model_stage_of(s, inst.pair_chunk, inst.v_placement, S), inst.pair_microbatch, 2}];
              continue;
            }
            const int k = model_stage(inst, S);
            if (inst.kind == InstructionKind::forward) ++runs[{k, inst.microbatch, 0}];
            if (inst.kind == InstructionKind::backward || inst.kind == InstructionKind::backward_input)
              ++runs[{k, inst.microbatch, 1}];
            if (inst.kind == InstructionKind::backward || inst.kind == InstructionKind::backward_weight)
              ++runs[{k, inst.microbatch, 2}];
          }
        }
        ASSERT_EQ(runs.size(), static_cast<std::size_t>(3 * K * M));
        for (const auto& [key, count] : runs) EXPECT_EQ(count, 1);
        std::vector<std::vector<double>> ones;
        for (const auto& order : orders) ones.emplace_back(order.size(), 1.0);
        EXPECT_NO_THROW(pipeline_makespan(orders, M, ones));
        EXPECT_NO_THROW(build_pipeline_dag(kind, S, M));
      }
}

// ZB-V and DualPipeV place model stage k on stage k for k < S and on stage 2S-1-k after: the
// forward of microbatch 0 walks down the stages and back up.
TEST(SplitSchedules, VPlacementMapsModelStagesDownAndBackUp) {
  for (auto kind : {ScheduleKind::zbv, ScheduleKind::dualpipev}) {
    const int S = 3;
    const auto dag = build_pipeline_dag(kind, S, 6);
    EXPECT_EQ(dag.num_model_stages(), 6);
    for (const auto& inst : dag.instructions) {
      const int k = model_stage(inst, S);
      EXPECT_EQ(inst.stage, k < S ? k : 2 * S - 1 - k) << short_name(inst, 2);
    }
    // F0 of model stage 3 (stage 2, chunk 1) follows F0 of model stage 2 (stage 2, chunk 0).
    auto node = [&](int k, InstructionKind ik, int m) {
      for (std::size_t i = 0; i < dag.instructions.size(); ++i) {
        const auto& inst = dag.instructions[i];
        if (inst.kind == ik && inst.microbatch == m && model_stage(inst, S) == k) return static_cast<int>(i);
      }
      return -1;
    };
    const int f2 = node(2, InstructionKind::forward, 0), f3 = node(3, InstructionKind::forward, 0);
    ASSERT_GE(f2, 0);
    ASSERT_GE(f3, 0);
    const auto order = dag.topological_order();
    EXPECT_LT(std::find(order.begin(), order.end(), f2) - order.begin(),
              std::find(order.begin(), order.end(), f3) - order.begin());
  }
}

// ZB-H1's stage r holds back r weight-gradient parts: it never has more than S microbatches whose
// forward ran and whose W did not, like 1F1B's S - r warm-up forwards at most S.
TEST(SplitSchedules, ZbH1KeepsOneFOneBsPeakActivations) {
  for (int S = 2; S <= 6; ++S)
    for (int M = 1; M <= 10; ++M)
      for (int r = 0; r < S; ++r) {
        int alive = 0, peak = 0;
        for (const auto& inst : stage_schedule(ScheduleKind::zb_h1, r, S, M)) {
          if (inst.kind == InstructionKind::forward) peak = std::max(peak, ++alive);
          if (inst.kind == InstructionKind::backward_weight) --alive;
        }
        EXPECT_LE(peak, S) << "S=" << S << " M=" << M << " r=" << r;
      }
}

TEST(SplitSchedules, NamesParseAndDualPipeVNeedsTwoMicrobatchesPerStage) {
  for (auto kind : kSplitSchedules) EXPECT_EQ(parse_schedule_kind(to_string(kind)), kind);
  EXPECT_THROW(check_schedule_shape(ScheduleKind::dualpipev, 4, 7, 1), Error);
  EXPECT_NO_THROW(check_schedule_shape(ScheduleKind::dualpipev, 4, 8, 2));
  EXPECT_THROW(check_schedule_shape(ScheduleKind::zbv, 4, 8, 3), Error);
  EXPECT_THROW(check_schedule_shape(ScheduleKind::zb_h1, 4, 8, 2), Error);
}

// ----- profiles -----

std::string split_profile_csv(int model_stages) {
  // Three clocks per kind, times one unit apart (plus 0.2 units, so that flooring is exact): every
  // integer duration the planner picks is a real clock.
  std::string csv = "stage,instruction,frequency,time,energy\n";
  for (int k = 0; k < model_stages; ++k) {
    const double f = 10 + k % 3, i = 9 + (k * 2) % 3, w = 7 + k % 2;  // ms at the top clock
    const int clocks[] = {1400, 1200, 1000};
    const double forward_energy[] = {3.0, 2.5, 2.3}, input_energy[] = {2.8, 2.4, 2.2},
                 weight_energy[] = {2.0, 1.7, 1.6};
    for (int c = 0; c < 3; ++c) {
      const double scale = 1 + 0.1 * k;
      csv += fmt::format("{},forward,{},{},{}\n", k, clocks[c], (f + c + 0.2) / 1000, forward_energy[c] * scale);
      csv += fmt::format("{},backward_input,{},{},{}\n", k, clocks[c], (i + c + 0.2) / 1000, input_energy[c] * scale);
      csv += fmt::format("{},backward_weight,{},{},{}\n", k, clocks[c], (w + c + 0.2) / 1000, weight_energy[c] * scale);
    }
  }
  return csv;
}

TEST(SplitProfiles, ValidationNamesLineAndField) {
  auto message = [](const std::string& csv) {
    try {
      parse_profile(csv, "p.csv");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string header = "stage,instruction,frequency,time,energy\n";
  EXPECT_NE(message(header + "0,forward,1000,1,1\n0,backward_input,1000,1,1\n").find("p.csv:3"), std::string::npos);
  EXPECT_NE(message(header + "0,forward,1000,1,1\n0,backward_input,1000,1,1\n").find("backward_weight"),
            std::string::npos);
  const auto mixed = message(header + "0,backward,1000,1,1\n0,backward_input,1000,1,1\n0,backward_weight,1000,1,1\n");
  EXPECT_NE(mixed.find("p.csv:3"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("instruction"), std::string::npos) << mixed;
  EXPECT_NE(message(header + "0,backwards,1000,1,1\n").find("instruction"), std::string::npos);
}

TEST(SplitProfiles, ZeroBubbleSchedulesRequireSplitRowsAndSayHow) {
  const Profile whole = parse_profile(
      "stage,instruction,frequency,time,energy\n0,forward,1000,0.01,1\n0,backward,1000,0.02,2\n"
      "1,forward,1000,0.01,1\n1,backward,1000,0.02,2\n",
      "whole.csv");
  EmulatorConfig config;
  config.num_stages = 2;
  config.num_microbatches = 2;
  config.schedule = ScheduleKind::zb_h1;
  try {
    Emulator emulator(whole, config);
    FAIL() << "zb-h1 took a profile without split backwards";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("with split_backward 0.5"), std::string::npos) << e.what();
    EXPECT_EQ(e.settings(), std::vector<std::string>{"split_backward"}) << e.what();
  }
  // Split 50/50, it runs; and 1F1B on the split profile runs each backward as I + W at one clock.
  const Profile split = split_backward(whole, 0.5);
  EXPECT_NO_THROW(Emulator(split, config));
  config.schedule = ScheduleKind::one_f_one_b;
  const Emulator on_split(split, config), on_whole(whole, config);
  EXPECT_DOUBLE_EQ(on_split.cost(0, InstructionKind::backward, 1000)->time, 0.02);
  const std::vector<std::vector<int>> plan = {{1000, 1000, 1000, 1000}, {1000, 1000, 1000, 1000}};
  EXPECT_DOUBLE_EQ(on_split.time_and_energy(plan).time, on_whole.time_and_energy(plan).time);
  EXPECT_DOUBLE_EQ(on_split.time_and_energy(plan).energy, on_whole.time_and_energy(plan).energy);
}

TEST(SplitProfiles, DualPipeVPairsSumTheirPartsUnlessProfiled) {
  Profile profile = parse_profile(split_profile_csv(4), "split.csv");
  EmulatorConfig config;
  config.num_stages = 2;
  config.num_microbatches = 4;
  config.schedule = ScheduleKind::dualpipev;
  const Emulator summed(profile, config);
  // Model stage 0's pair: its forward and model stage 3's whole backward (I + W).
  const double want =
      summed.cost(0, InstructionKind::forward, 1400)->time + summed.cost(3, InstructionKind::backward, 1400)->time;
  EXPECT_NEAR(summed.cost(0, InstructionKind::forward_backward, 1400)->time, want, 1e-12);
  profile.rows.push_back({0, InstructionKind::forward_backward, 1400, 0.015, 4.0});
  const Emulator measured(profile, config);
  EXPECT_DOUBLE_EQ(measured.cost(0, InstructionKind::forward_backward, 1400)->time, 0.015);
}

// The pipeline walk (the simulator's and the measured rounds') and the emulator's DAG agree on every
// split schedule: the same per-instruction times give the same iteration time.
TEST(SplitSchedules, PipelineWalkAndEmulatorAgree) {
  for (auto kind : kSplitSchedules) {
    const Profile profile = parse_profile(split_profile_csv(3 * schedule_virtual_stages(kind, 1)), "walk.csv");
    EmulatorConfig config;
    config.num_stages = 3;
    config.num_microbatches = 7;
    config.schedule = kind;
    const Emulator emulator(profile, config);
    std::vector<std::vector<int>> plan;
    std::vector<std::vector<double>> durations;
    int turn = 0;
    for (const auto& stage : emulator.layout()) {
      plan.emplace_back();
      durations.emplace_back();
      for (const auto& inst : stage) {
        const int clock = emulator.clocks(inst)[static_cast<std::size_t>(turn++ % 3)];
        plan.back().push_back(clock);
        durations.back().push_back(emulator.cost(inst, clock)->time);
      }
    }
    EXPECT_NEAR(pipeline_makespan(emulator.layout(), config.num_microbatches, durations),
                emulator.time_and_energy(plan).time, 1e-12)
        << to_string(kind);
  }
}

// ----- the planner against an exhaustive enumeration -----

struct ExactCase {
  ScheduleKind schedule;
  int stages, microbatches;
  bool per_instruction;  // every instruction its own clock; else one clock per (stage, kind)
};

std::string case_name(const testing::TestParamInfo<ExactCase>& info) {
  std::string name = to_string(info.param.schedule);
  std::replace(name.begin(), name.end(), '-', '_');
  return fmt::format("{}_S{}_M{}_{}", name, info.param.stages, info.param.microbatches,
                     info.param.per_instruction ? "PerInstruction" : "PerStageKind");
}

class ExactFront : public testing::TestWithParam<ExactCase> {};

// The Pareto front of (time, energy) over the enumerated clock plans, judged by the emulator in the
// planner's time units; perseus's frontier (its start plan and every point), each point's clocks
// emulated the same way, reaches every point of it: as fast (up to the quantization) at no more
// energy.
TEST_P(ExactFront, PerseusFrontierReachesTheEnumeratedParetoFront) {
  const auto c = GetParam();
  const int K = c.stages * schedule_virtual_stages(c.schedule, 1);
  const double unit = 0.001, p_block = 70;
  const Profile profile = parse_profile(split_profile_csv(K), "exact.csv");
  EmulatorConfig emulator_config;
  emulator_config.num_stages = c.stages;
  emulator_config.num_microbatches = c.microbatches;
  emulator_config.schedule = c.schedule;
  emulator_config.p_block = p_block;
  emulator_config.quantum = unit;
  const Emulator emulator(profile, emulator_config);
  const auto& layout = emulator.layout();

  // Groups of instructions sharing a clock.
  std::vector<std::vector<int>> group(layout.size());
  std::map<std::pair<int, int>, int> group_of;
  int groups = 0;
  for (std::size_t s = 0; s < layout.size(); ++s)
    for (const auto& inst : layout[s]) {
      if (c.per_instruction) {
        group[s].push_back(groups++);
        continue;
      }
      auto [it, added] = group_of.try_emplace({static_cast<int>(s), static_cast<int>(inst.kind)}, groups);
      if (added) ++groups;
      group[s].push_back(it->second);
    }
  ASSERT_LE(groups, 13) << "too many to enumerate";
  const int clocks[] = {1400, 1200, 1000};
  std::vector<std::pair<double, double>> all;
  std::vector<int> choice(static_cast<std::size_t>(groups), 0);
  auto plan = layout.empty() ? std::vector<std::vector<int>>{} : std::vector<std::vector<int>>(layout.size());
  for (;;) {
    for (std::size_t s = 0; s < layout.size(); ++s) {
      plan[s].resize(layout[s].size());
      for (std::size_t k = 0; k < layout[s].size(); ++k)
        plan[s][k] = clocks[choice[static_cast<std::size_t>(group[s][k])]];
    }
    const auto point = emulator.time_and_energy(plan);
    all.emplace_back(point.time, point.energy);
    std::size_t g = 0;
    while (g < choice.size() && ++choice[g] == 3) choice[g++] = 0;
    if (g == choice.size()) break;
  }
  std::sort(all.begin(), all.end());
  std::vector<std::pair<double, double>> front;
  for (const auto& point : all)
    if (front.empty() || point.second < front.back().second - 1e-9) front.push_back(point);

  PlanningConfig config;
  config.num_stages = c.stages;
  config.num_microbatches = c.microbatches;
  config.unit_time = unit;
  config.p_block = p_block;
  config.schedule = c.schedule;
  config.cost_model = CostModelKind::piecewise_linear;
  const auto problem = make_planning_problem(profile, config);
  const auto frontier = solve_frontier(problem);
  std::vector<std::pair<double, double>> perseus;
  for (std::size_t p = static_cast<std::size_t>(-1); p + 1 <= frontier.points.size(); ++p) {  // the start plan first
    const auto durations = frontier.durations_at(p);
    std::vector<std::vector<int>> knobs(layout.size());
    for (std::size_t s = 0; s < layout.size(); ++s)
      for (int node : problem.dag.stage_nodes[s])
        knobs[s].push_back(problem.spec_of(node).options.knob_for(durations[static_cast<std::size_t>(node)]));
    const auto point = emulator.time_and_energy(knobs);
    perseus.emplace_back(point.time, point.energy);
  }
  ASSERT_FALSE(perseus.empty());
  // Zero-bubble schedules run only split parts here, whose clocks are one time unit apart: every
  // planned duration is a clock, and the frontier is exact. A whole backward (I + W) or a pair has
  // clocks two or more units apart; a planned duration between two runs at the faster one, so the
  // frontier may need one unit more time for the same energy: the quantization.
  const bool exact = c.schedule == ScheduleKind::zb_h1 || c.schedule == ScheduleKind::zbv;
  const double slack = exact ? 0 : unit;
  for (const auto& [time, energy] : front) {
    const bool reached = std::any_of(perseus.begin(), perseus.end(), [&](const auto& q) {
      return q.first <= time + slack + 1e-9 && q.second <= energy + 1e-6;
    });
    std::string points;
    for (const auto& q : perseus) points += fmt::format(" ({:.4f}, {:.4f})", q.first, q.second);
    EXPECT_TRUE(reached) << fmt::format("no perseus point reaches ({:.4f} s, {:.4f} J); perseus:{}", time, energy,
                                        points);
  }
  // The fastest point is the all-max plan's time.
  EXPECT_NEAR(std::min_element(perseus.begin(), perseus.end())->first, front.front().first, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(
    SmallPipelines, ExactFront,
    testing::Values(ExactCase{ScheduleKind::one_f_one_b, 2, 2, true}, ExactCase{ScheduleKind::one_f_one_b, 3, 2, true},
                    ExactCase{ScheduleKind::zb_h1, 2, 2, true}, ExactCase{ScheduleKind::zb_h1, 3, 3, false},
                    ExactCase{ScheduleKind::zbv, 2, 2, false}, ExactCase{ScheduleKind::zbv, 3, 4, false},
                    ExactCase{ScheduleKind::dualpipev, 2, 4, false}),
    case_name);

// The shipped GPT-3 profile with every backward split 50/50.
Profile gpt3_split() {
  return split_backward(read_profile(std::string(PERSEUS_SOURCE_DIR) + "/examples/gpt3-175b-a100.csv"), 0.5);
}

std::vector<std::vector<int>> all_max(const Emulator& emulator) {
  std::vector<std::vector<int>> plan;
  for (const auto& stage : emulator.layout()) {
    plan.emplace_back();
    for (const auto& inst : stage) plan.back().push_back(emulator.clocks(inst).front());
  }
  return plan;
}

TEST(SplitSchedulesGpt3, ZbH1IsFasterThanOneFOneBAtTheTopClocks) {
  const Profile profile = gpt3_split();
  EmulatorConfig config;
  config.num_stages = 8;
  config.num_microbatches = 16;
  config.p_block = 83.64;
  const Emulator one_f_one_b(profile, config);
  config.schedule = ScheduleKind::zb_h1;
  const Emulator zb_h1(profile, config);
  EXPECT_LT(zb_h1.time_and_energy(all_max(zb_h1)).time, one_f_one_b.time_and_energy(all_max(one_f_one_b)).time);
}

class Gpt3Fastest : public testing::TestWithParam<ScheduleKind> {};

// The frontier's fastest point is the all-max plan's emulated time (in the planner's time units).
TEST_P(Gpt3Fastest, FrontierFastestPointIsTheAllMaxTime) {
  const Profile profile = gpt3_split();
  const double unit = 0.005;
  PlanningConfig config;
  config.num_stages = 4;  // the profile's first four stages: a short pipeline keeps the test cheap
  config.num_microbatches = 8;
  config.unit_time = unit;
  config.p_block = 83.64;
  config.schedule = GetParam();
  const int K = config.num_stages * schedule_virtual_stages(config.schedule, 1);
  Profile part = profile;
  part.rows.erase(std::remove_if(part.rows.begin(), part.rows.end(), [&](const ProfileRow& r) { return r.stage >= K; }),
                  part.rows.end());
  const auto frontier = solve_frontier(make_planning_problem(part, config));
  ASSERT_FALSE(frontier.points.empty());
  EmulatorConfig emulator_config;
  emulator_config.num_stages = config.num_stages;
  emulator_config.num_microbatches = config.num_microbatches;
  emulator_config.schedule = config.schedule;
  emulator_config.p_block = config.p_block;
  emulator_config.quantum = unit;
  const Emulator emulator(part, emulator_config);
  EXPECT_NEAR(frontier.points.back().quant_time * unit, emulator.time_and_energy(all_max(emulator)).time, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Schedules, Gpt3Fastest,
                         testing::Values(ScheduleKind::one_f_one_b, ScheduleKind::zb_h1, ScheduleKind::zbv,
                                         ScheduleKind::dualpipev),
                         [](const testing::TestParamInfo<ScheduleKind>& info) {
                           std::string name = to_string(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace perseus
