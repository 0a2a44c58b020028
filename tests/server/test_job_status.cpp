// The job status's JSON (GET /jobs, GET /jobs/{id}, GET /power_budget) made from the typed status:
// every field under the key the HTTP API documents, and nothing else.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "perseus/server/job_status.hpp"

namespace perseus {
namespace {

using nlohmann::json;
using server::JobPhase;

std::set<std::string> keys(const json& j) {
  std::set<std::string> out;
  for (const auto& [key, value] : j.items()) out.insert(key);
  return out;
}

// A planning job, every field a value of its own.
server::JobStatus planning_job() {
  server::JobStatus s;
  s.job_id = "gpt3+1";
  s.scheduler = "Perseus";
  s.dialect = server::Dialect::zeus;
  s.phase = JobPhase::deployed;
  s.round = 41;
  s.world_size = 16;
  s.registered = 15;
  s.job = {{"job_id", "gpt3+1"}};
  s.waiting_at_barrier = 3;
  s.reported = 2;
  s.typical_round_s = 4.5;
  s.end_detail = "done";
  s.measured = server::RoundMeasuredStatus{40, 9.5, 900.0};
  s.pipelines = {{0, 9.5, 450.0, std::nullopt, std::nullopt}};
  auto& b = s.power_budget.emplace();
  b.weight = 2;
  b.gpus = 16;
  b.share = 3200;
  b.measured = 3100;
  b.counted_as = "plans";
  b.pace = 2.9;
  b.unpaced_time = 2.8;
  b.throughput = 0.97;
  b.correction = 1.01;
  b.probes_held = true;
  b.rounds_since_change = 6;
  auto& own = s.own.emplace();
  own.profiling = {{"rounds", 7}};
  own.plan = server::PlanStatus{12, "point 12", 2.9, 13000, 80, 1.5, 1e-3, {{"stage 0 forward", "exp"}}, 2, "why"};
  own.baseline = server::BaselineStatus{2.8, 14000, {2.79, 2.81}, {13900, 14100}, 5, 1, 3};
  own.saving = online::Estimate{0.12, 0.11, 0.13};
  own.slowdown = online::Estimate{0.02, 0.01, 0.03};
  own.straggler = server::StragglerStatus{1.2, server::StragglerSource::api, 1, 3.4};
  auto& o = own.online.emplace();
  o.measured = server::MeasuredStatus{2.86, 12300, 8};
  o.reference = server::ReferenceStatus{"all-max baseline", 2.8, 14000, 1};
  o.energy_saved = 5e5;
  o.pipelines = {{0, 2.86, 6100, "point 12", 2.85}, {1, 2.84, 6200, std::nullopt, std::nullopt}};
  o.details = {{"history", json::array()}, {"clocks", {{"changes", 4}}}};
  return s;
}

TEST(JobStatusJson, EveryTypedFieldIsShownUnderItsKey) {
  const json j = to_json(planning_job());
  EXPECT_EQ(keys(j), (std::set<std::string>{"job_id",
                                            "scheduler",
                                            "dialect",
                                            "phase",
                                            "round",
                                            "world_size",
                                            "registered",
                                            "saving",
                                            "slowdown",
                                            "job",
                                            "waiting_at_barrier",
                                            "reported",
                                            "typical_round_s",
                                            "end_detail",
                                            "measured",
                                            "pipelines",
                                            "power_budget",
                                            "profiling",
                                            "plan",
                                            "baseline",
                                            "straggler",
                                            "saving_ci",
                                            "slowdown_ci",
                                            "reference",
                                            "energy_saved",
                                            "history",
                                            "clocks"}));
  EXPECT_EQ(j["dialect"], "zeus");
  EXPECT_EQ(j["phase"], "deployed");
  EXPECT_EQ(j["round"], 41);
  EXPECT_EQ(j["registered"], 15);
  EXPECT_EQ(j["end_detail"], "done");
  EXPECT_EQ(j["saving"], 0.12);
  EXPECT_EQ(j["saving_ci"], json::array({0.11, 0.13}));
  EXPECT_EQ(j["slowdown_ci"], json::array({0.01, 0.03}));
  // The planning scheduler's measurement and pipelines are shown over the job's own.
  EXPECT_EQ(j["measured"], (json{{"iteration_time", 2.86}, {"energy", 12300.0}, {"rounds", 8}}));
  EXPECT_EQ(j["pipelines"][0], (json{{"dp_rank", 0},
                                     {"iteration_time", 2.86},
                                     {"energy", 6100.0},
                                     {"plan", "point 12"},
                                     {"predicted_time", 2.85}}));
  EXPECT_EQ(keys(j["pipelines"][1]), (std::set<std::string>{"dp_rank", "iteration_time", "energy"}));
  EXPECT_EQ(j["baseline"], (json{{"iteration_time", 2.8},
                                 {"energy", 14000.0},
                                 {"iteration_time_ci", {2.79, 2.81}},
                                 {"energy_ci", {13900.0, 14100.0}},
                                 {"rounds", 5},
                                 {"rejected", 1},
                                 {"probes", 3}}));
  EXPECT_EQ(j["plan"], (json{{"index", 12},
                             {"label", "point 12"},
                             {"predicted_time", 2.9},
                             {"predicted_energy", 13000.0},
                             {"frontier_points", 80},
                             {"planning_seconds", 1.5},
                             {"unit_time", 1e-3},
                             {"cost_models", {{"stage 0 forward", "exp"}}},
                             {"step_ups", 2},
                             {"reason", "why"}}));
  EXPECT_EQ(j["straggler"], (json{{"slowdown", 1.2}, {"source", "api"}, {"dp_rank", 1}, {"iteration_time", 3.4}}));
  EXPECT_EQ(j["reference"],
            (json{{"name", "all-max baseline"}, {"iteration_time", 2.8}, {"energy", 14000.0}, {"conditions", 1.0}}));
  EXPECT_EQ(j["energy_saved"], 5e5);
  EXPECT_EQ(j["clocks"], (json{{"changes", 4}}));
  EXPECT_EQ(j["power_budget"], (json{{"weight", 2.0},
                                     {"gpus", 16},
                                     {"share", 3200.0},
                                     {"measured", 3100.0},
                                     {"counted_as", "plans"},
                                     {"pace", 2.9},
                                     {"unpaced_time", 2.8},
                                     {"throughput", 0.97},
                                     {"correction", 1.01},
                                     {"power_limit", nullptr},
                                     {"probes_held", true},
                                     {"rounds_since_change", 6}}));
  // The summary GET /jobs lists.
  EXPECT_EQ(summary_json(planning_job()), (json{{"job_id", "gpt3+1"},
                                                {"scheduler", "Perseus"},
                                                {"dialect", "zeus"},
                                                {"phase", "deployed"},
                                                {"round", 41},
                                                {"world_size", 16},
                                                {"registered", 15},
                                                {"saving", 0.12},
                                                {"slowdown", 0.02}}));
}

TEST(JobStatusJson, AJobWithoutAPlanningSchedulerShowsItsOwnMeasurementAndNullsForTheRest) {
  server::JobStatus s = planning_job();
  s.own = server::SchedulerStatus{};
  s.power_budget.reset();
  s.end_detail.reset();
  const json j = to_json(s);
  EXPECT_EQ(j["measured"], (json{{"round", 40}, {"iteration_time", 9.5}, {"energy", 900.0}}));
  EXPECT_EQ(j["pipelines"], json::array({{{"dp_rank", 0}, {"iteration_time", 9.5}, {"energy", 450.0}}}));
  for (const char* key :
       {"profiling", "plan", "baseline", "saving", "slowdown", "straggler", "power_budget", "end_detail"})
    EXPECT_TRUE(j.at(key).is_null()) << key;
  for (const char* key : {"saving_ci", "slowdown_ci", "energy_saved", "reference"})
    EXPECT_FALSE(j.contains(key)) << key;
  ASSERT_TRUE(s.shown_measured());
  EXPECT_EQ(s.shown_measured()->energy, 900.0);
  // Before its scheduler exists, a job shows none of the scheduler's keys.
  s.own.reset();
  EXPECT_FALSE(to_json(s).contains("profiling"));
}

TEST(JobStatusJson, ThePowerBudgetListsItsJobsWithTheirPhase) {
  server::PowerBudgetStatus s;
  s.budget = 5000;
  s.source = "api";
  s.backstop.active = true;
  s.backstop.power_limit = 250;
  s.jobs.push_back({"a", JobPhase::profiling, {}});
  const json j = to_json(s);
  EXPECT_EQ(j["budget"], 5000.0);
  EXPECT_TRUE(j["measured"].is_null());
  EXPECT_EQ(j["backstop"]["active"], true);
  EXPECT_EQ(j["backstop"]["power_limit"], 250.0);
  EXPECT_TRUE(j["backstop"]["reason"].is_null());
  EXPECT_EQ(j["jobs"][0]["job_id"], "a");
  EXPECT_EQ(j["jobs"][0]["phase"], "profiling");
  EXPECT_EQ(j["jobs"][0]["counted_as"], "");
}

}  // namespace
}  // namespace perseus
