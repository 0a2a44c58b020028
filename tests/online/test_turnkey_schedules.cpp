// The turnkey loop on every pipeline schedule: `perseus serve --scheduler Perseus` with simulated
// ranks running interleaved, zero-bubble and V-shape orders profiles each (model stage, kind) the
// ranks report (the split backward parts and overlapped pairs included), plans their schedule and
// deploys a plan whose measured saving is `perseus whatif`'s for that schedule, within a point.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "perseus/baselines/registry.hpp"
#include "perseus/client/client.hpp"
#include "perseus/emulate/deadline_fit.hpp"
#include "perseus/emulate/emulator.hpp"
#include "perseus/emulate/judge.hpp"
#include "perseus/emulate/straggler.hpp"
#include "perseus/plan/frontier_record.hpp"
#include "perseus/profile/backward_split.hpp"
#include "perseus/profile/blocking_power.hpp"
#include "perseus/server/scheduler.hpp"
#include "perseus/solver/planning.hpp"
#include "server_fixture.hpp"
#include "simulate_fixtures.hpp"

namespace perseus {
namespace {

using nlohmann::json;

struct ScheduleCase {
  const char* name;
  ScheduleKind schedule;
  int virtual_stages;
  bool split;  // the profile's backwards split 50/50 (the zero-bubble and V schedules need it)
};

std::string case_name(const ::testing::TestParamInfo<ScheduleCase>& info) {
  std::string out;
  for (const char* c = info.param.name; *c; ++c) out += (*c == '-' ? '_' : *c);
  return out;
}

constexpr int kStages = 4, kMicrobatches = 8;

// GPT-3 175B on A100 (the shipped profile): its first four stages for one chunk per stage, all
// eight as the model stages of two chunks per stage.
Profile case_profile(const ScheduleCase& c) {
  Profile profile = read_profile(testing::shared_profile_path("gpt3-175b+a100_sxm_bf16.csv"));
  const int model_stages = kStages * schedule_virtual_stages(c.schedule, c.virtual_stages);
  std::erase_if(profile.rows, [&](const ProfileRow& row) { return row.stage >= model_stages; });
  return c.split ? split_backward(profile, 0.5) : profile;
}

PipelineShape case_shape(const ScheduleCase& c) {
  PipelineShape shape;
  shape.num_stages = kStages;
  shape.num_microbatches = kMicrobatches;
  shape.schedule = c.schedule;
  shape.virtual_stages = c.virtual_stages;
  return shape;
}

// What `perseus whatif --schedule ...` reports for perseus at T'/T = 1 (its saving over the
// pipelines that run the plan) with the loop's time quantum: the planner's pick for all-max's time,
// fitted to it, against all-max.
double whatif_saving(const Profile& profile, const PipelineShape& shape, double p_block, double unit_time) {
  PlanningConfig planning;
  planning.shape() = shape;
  planning.p_block = p_block;
  planning.unit_time = unit_time;
  const auto problem = make_planning_problem(profile, planning);
  const auto record = make_frontier_record(problem, solve_frontier(problem), {profile.source, "auto"});
  EmulatorConfig config;
  config.shape() = shape;
  config.p_block = p_block;
  const Emulator emulator(profile, config);
  const auto all_max = run_baseline("all-max", profile, emulator);
  std::vector<PlanCost> frontier;
  for (const auto& p : judge_frontier(record, emulator)) frontier.push_back({p.emulated_time, p.emulated_energy});
  std::vector<std::vector<PlanCost>> fitted(1);
  const auto pick = cheapest_within(record, all_max.plan.time).value_or(record.points.size() - 1);
  if (const auto fit = fit_to_deadline(emulator, plan_at(record, pick).frequencies, all_max.plan.time))
    fitted[0].push_back({fit->time, fit->energy});
  StragglerConfig straggler{shape.num_stages, p_block, 2, {1.0}};
  const auto rows = straggler_whatif({all_max.plan.time, all_max.plan.energy}, {}, frontier, straggler, fitted);
  EXPECT_EQ(rows.back().method, "perseus");
  return rows.back().saving_non_straggler;
}

struct TurnkeySchedules : testing::ServerDirTest, ::testing::WithParamInterface<ScheduleCase> {};

TEST_P(TurnkeySchedules, DeploysWithTheSavingWhatIfPredicts) {
  const ScheduleCase& c = GetParam();
  testing::TestServer server(settings("Perseus", {{"wait_for_plan", true}}));
  simulate::SimulationConfig config;
  config.shape() = case_shape(c);
  config.profile = case_profile(c);
  config.p2p_power = kA100BlockingPowerW;
  config.server_url = server.url;
  config.iterations = 400;
  config.report_every = 100;
  config.model_name = std::string("gpt3-") + c.name;
  const auto summary = simulate::simulate_cluster(config);
  EXPECT_EQ(summary.disabled_ranks, 0);
  auto reply = server.call("GET", "/jobs/" + client::encode_path_segment(summary.job_id));
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json s = json::parse(reply.body);
  // The loop worked out the schedule the ranks run from their orders alone.
  EXPECT_EQ(s["schedule"]["kind"], to_string(c.schedule)) << s.dump();
  EXPECT_EQ(s["schedule"]["microbatches"], config.num_microbatches) << s.dump();
  EXPECT_EQ(s["schedule"]["virtual_stages"], c.virtual_stages) << s.dump();
  // Every (model stage, kind) the ranks ran was profiled: the split parts where they ran them.
  const Profile measured = read_profile(dir / summary.job_id / "profile.csv");
  for (int k = 0; k < config.num_model_stages(); ++k) {
    EXPECT_FALSE(measured.rows_for(k, InstructionKind::forward).empty()) << "model stage " << k;
    EXPECT_EQ(has_split_backward(measured, k), c.split) << "model stage " << k;
  }
  if (overlaps_pairs(c.schedule)) {
    EXPECT_FALSE(measured.rows_for(0, InstructionKind::forward_backward).empty()) << "no overlapped pair profiled";
  }
  std::vector<std::string> events;
  for (const auto& d : json::parse(std::ifstream(dir / summary.job_id / "decisions.json")))
    events.push_back(d["event"]);
  ASSERT_NE(std::find(events.begin(), events.end(), "deployed"), events.end()) << s.dump();
  ASSERT_TRUE(s["saving"].is_number()) << s.dump();
  EXPECT_LE(s["slowdown"].get<double>(), 0.005) << s.dump();
  const double predicted =
      whatif_saving(config.profile, config.shape(), kA100BlockingPowerW, s["plan"]["unit_time"].get<double>());
  EXPECT_GT(predicted, 0.02);
  EXPECT_NEAR(s["saving"].get<double>(), predicted, 0.01) << s.dump();
}

INSTANTIATE_TEST_SUITE_P(EverySchedule, TurnkeySchedules,
                         ::testing::Values(ScheduleCase{"1f1b", ScheduleKind::one_f_one_b, 1, false},
                                           ScheduleCase{"interleaved", ScheduleKind::interleaved, 2, false},
                                           ScheduleCase{"zb-h1", ScheduleKind::zb_h1, 1, true},
                                           ScheduleCase{"zbv", ScheduleKind::zbv, 2, true},
                                           ScheduleCase{"dualpipev", ScheduleKind::dualpipev, 2, true}),
                         case_name);

// The scheduler takes the schedule from the ranks' orders: every registry schedule is accepted (its
// first round runs every rank at the top clock, one clock per instruction), an order no schedule
// runs is refused naming the ones planned.
server::SchedulerContext job_running(ScheduleKind kind, int virtual_stages,
                                     const std::function<std::vector<std::string>(int stage)>& order = {}) {
  server::SchedulerContext context;
  context.job.pp_degree = 2;
  context.job.dp_degree = 1;
  context.job.tp_degree = 1;
  context.job.world_size = 2;
  context.job.num_microbatches = 4;
  context.settings.mode = protocol::PowerMode::frequency;
  context.job_dir = std::filesystem::temp_directory_path() / "perseus-turnkey-schedule-of";
  for (int s = 0; s < 2; ++s) {
    protocol::RankInfo r;
    r.rank = r.pp_rank = s;
    r.pipe_schedule = order ? order(s) : client::default_pipe_schedule(s, 2, 4, kind, virtual_stages);
    r.pipe_schedule.insert(r.pipe_schedule.begin(), "load");  // other instructions are not the schedule's
    r.power_state_range = {1410, 1200, 1000};
    context.ranks.push_back(r);
  }
  return context;
}

TEST(TurnkeyScheduleOf, EveryScheduleIsAcceptedAndAnUnknownOrderRefused) {
  const json args = {{"wait_for_plan", true}};
  for (const auto& [kind, chunks] : {std::pair{ScheduleKind::one_f_one_b, 1}, std::pair{ScheduleKind::gpipe, 1},
                                     std::pair{ScheduleKind::interleaved, 2}, std::pair{ScheduleKind::zb_h1, 1},
                                     std::pair{ScheduleKind::zbv, 2}, std::pair{ScheduleKind::dualpipev, 2}}) {
    const auto context = job_running(kind, chunks);
    auto scheduler = server::configure_scheduler("Perseus", args)(context);
    const auto round = scheduler->next_schedule();
    ASSERT_EQ(round.size(), 2u) << to_string(kind);
    for (const auto& one : round)
      EXPECT_EQ(one.power_states,
                std::vector<int>(context.ranks[static_cast<std::size_t>(one.rank)].pipe_schedule.size(), 1410))
          << to_string(kind);
  }
  const auto stray = job_running(ScheduleKind::one_f_one_b, 1, [](int) {
    return std::vector<std::string>{"forward", "forward", "backward", "forward", "backward"};
  });
  try {
    (void)server::configure_scheduler("Perseus", args)(stray);
    ADD_FAILURE() << "an order no schedule runs was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("zb-h1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace perseus
