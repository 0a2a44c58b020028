// The cluster's power budget as the server keeps it: the allocation across jobs, the closed loop on
// measured power, the power-limit backstop and its lifting, jobs coming and going. Jobs are fakes
// with a convex frontier (power falls with the cube of the speed); time is the caller's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <future>
#include <unistd.h>

#include "perseus/server/budget_routes.hpp"
#include "perseus/server/power_budget.hpp"
#include "server_fixture.hpp"

namespace perseus {
namespace {

using server::BudgetRequest;
using server::PowerBudget;
using Clock = PowerBudget::Clock;

// A job whose GPUs draw idle + dynamic x (unpaced time / time)^3 watts each at an iteration time,
// and whose real power is `actual` times what it predicts.
class FakeJob final : public server::Scheduler {
 public:
  FakeJob(double unpaced, int gpus, double idle = 80, double dynamic = 220)
      : unpaced_(unpaced), gpus_(gpus), idle_(idle), dynamic_(dynamic) {}
  std::vector<server::PowerStateSchedule> next_schedule() override { return {}; }
  void observe(const std::vector<server::ProfilingResult>&) override {}
  std::optional<server::JobPhase> phase() const override {
    return deployed ? server::JobPhase::deployed : server::JobPhase::warmup;
  }

  double per_gpu(double time) const { return idle_ + dynamic_ * std::pow(unpaced_ / time, 3); }
  std::vector<online::PaceOption> pace_options() const override {
    if (!deployed) return {};
    std::vector<online::PaceOption> out;
    for (int k = 0; k <= 40; ++k) {  // up to 1.4x slower in steps of 1%
      double t = unpaced_ * (1 + 0.01 * k);
      out.push_back({t, per_gpu(t) * gpus_ * t});
    }
    return out;
  }
  std::optional<online::PaceOption> under_power_limit(double watts) const override {
    if (!deployed) return std::nullopt;
    if (watts >= per_gpu(unpaced_)) return online::PaceOption{unpaced_, per_gpu(unpaced_) * gpus_ * unpaced_};
    // A power limit is a blunter tool than a plan: as slow as the plan of that power, and 5% more.
    double t = watts > idle_ ? unpaced_ / std::cbrt((watts - idle_) / dynamic_) * 1.05 : 10 * unpaced_;
    return online::PaceOption{t, watts * gpus_ * t};
  }
  void set_pace(std::optional<double> t, bool hold) override {
    pace = t;
    hold_probes = hold;
    ++told;
  }

  // What a round on the current pace measures (per iteration: time, energy of every GPU).
  server::RoundPower round(double actual = 1, std::optional<double> limit = std::nullopt) const {
    double t = pace.value_or(unpaced_);
    double p = deployed ? per_gpu(t) * actual : (idle_ + dynamic_) * actual;
    if (limit) p = std::min(p, *limit);
    return {t, p * gpus_ * t, deployed ? server::JobPhase::deployed : server::JobPhase::warmup, 1.0};
  }
  double all_max() const { return (idle_ + dynamic_) * gpus_; }
  int gpus() const { return gpus_; }
  double unpaced_power() const { return per_gpu(unpaced_) * gpus_; }

  bool deployed = true;
  std::optional<double> pace;
  bool hold_probes = false;
  int told = 0;

 private:
  double unpaced_;
  int gpus_;
  double idle_, dynamic_;
};

server::JobInfo job_info(int gpus, double weight = 1) {
  server::JobInfo info;
  info.world_size = info.pp_degree = gpus;
  info.weight = weight;
  return info;
}

std::vector<server::RankInfo> ranks(int gpus, double min_w = 100, double max_w = 400) {
  std::vector<server::RankInfo> out(static_cast<std::size_t>(gpus));
  for (auto& r : out) r.min_power_w = min_w, r.max_power_w = max_w;
  return out;
}

struct Cluster {
  Clock::time_point now = Clock::now();
  PowerBudget budget{std::nullopt, now};
  std::map<std::string, FakeJob*> jobs;

  void join(const std::string& id, FakeJob& job, double weight = 1, double min_w = 100) {
    jobs[id] = &job;
    budget.join(id, job, job_info(job.gpus(), weight), ranks(job.gpus(), min_w), now);
  }
  // One round of every job (the first round of a warm-up job measures its all-max power).
  void rounds(int n = 1, double actual = 1) {
    for (int i = 0; i < n; ++i)
      for (auto& [id, job] : jobs) {
        now += std::chrono::seconds(1);
        budget.round(id, job->round(actual, budget.power_limit(id)), now);
      }
  }
  double measured() { return budget.status(now).measured.value(); }
  double predicted() { return budget.status(now).predicted; }
  bool backstop() { return budget.status(now).backstop.active; }
  void set(std::optional<double> watts, double seconds = 1e6) { budget.set(BudgetRequest{watts, seconds}, now); }
};

// Two jobs measured in warm-up at all-max, then deployed.
struct TwoJobs : ::testing::Test {
  FakeJob a{2.0, 8}, b{1.0, 16};
  Cluster c;
  void SetUp() override {
    a.deployed = b.deployed = false;
    c.join("a", a);
    c.join("b", b);
    c.rounds(2);
    a.deployed = b.deployed = true;
    c.rounds(1);
  }
  double unpaced() { return a.unpaced_power() + b.unpaced_power(); }
};

TEST_F(TwoJobs, NoBudgetOrEnoughOfItPacesNobody) {
  EXPECT_FALSE(a.pace || b.pace);
  c.set(unpaced() * 1.01);
  c.rounds(3);
  EXPECT_FALSE(a.pace || b.pace);
  EXPECT_FALSE(c.backstop());
  EXPECT_LE(c.measured(), unpaced() * 1.0001);
}

TEST_F(TwoJobs, ATightBudgetIsMetWithinTwoRoundsAndBackAtFullBudgetEveryJobIsUnpaced) {
  const double budget = unpaced() * 0.85;
  c.set(budget);
  ASSERT_TRUE(a.pace && b.pace) << "a budget 15% under the unpaced power paces both jobs";
  c.rounds(2);
  EXPECT_LE(c.measured(), budget);
  EXPECT_GE(c.measured(), budget * 0.97) << "not much slack left: throughput lost for nothing";
  EXPECT_FALSE(c.backstop());
  EXPECT_TRUE(a.hold_probes && b.hold_probes) << "an all-max probe round would break the budget";
  auto status = server::to_json(c.budget.status(c.now));
  EXPECT_LE(status["since_set"]["complied_after_rounds"].get<int>(), 2);
  c.set(unpaced() * 1.2);
  EXPECT_FALSE(a.pace || b.pace) << "every job back to its unpaced plan";
  c.rounds(2);
  EXPECT_NEAR(c.measured(), unpaced(), 1e-6 * unpaced());
}

TEST_F(TwoJobs, TheClosedLoopCorrectsAPredictionThatIsOff) {
  const double budget = unpaced() * 0.85;
  c.set(budget);
  // The jobs draw 6% more than they predict: the budget is exceeded at first, then corrected.
  c.rounds(2, 1.06);
  EXPECT_GT(c.measured(), budget);
  c.rounds(12, 1.06);
  EXPECT_LE(c.measured(), budget * 1.001);
  EXPECT_GE(c.measured(), budget * 0.97);
  EXPECT_GT(c.budget.job_status("a")->correction, 1.03);
}

TEST_F(TwoJobs, AHigherWeightKeepsMoreOfItsThroughput) {
  FakeJob heavy{2.0, 8}, light{2.0, 8};
  Cluster w;
  w.join("heavy", heavy, 4.0);
  w.join("light", light, 1.0);
  w.rounds(1);
  w.set((heavy.unpaced_power() + light.unpaced_power()) * 0.88);
  ASSERT_TRUE(light.pace);
  EXPECT_LT(heavy.pace.value_or(2.0), *light.pace);
}

TEST_F(TwoJobs, NoJobIsPacedSlowerThanAUniformPowerLimitWouldMakeIt) {
  const double budget = unpaced() * 0.8;
  c.set(budget);
  const int gpus = 8 + 16;
  for (auto* job : {&a, &b}) {
    auto limited = job->under_power_limit(budget / gpus);
    ASSERT_TRUE(limited);
    EXPECT_LE(job->pace.value_or(0), limited->iteration_time * (1 + 1e-9));
  }
}

TEST_F(TwoJobs, OutOfReachOfThePlansGpuPowerLimitsHoldItAndLiftWhenNoLongerNeeded) {
  c.set(unpaced() * 0.5);  // below what the slowest paces draw
  EXPECT_TRUE(c.backstop());
  auto limit = c.budget.power_limit("a");
  ASSERT_TRUE(limit);
  EXPECT_GE(*limit, 100) << "never below the GPUs' minimum power limit";
  auto status = server::to_json(c.budget.status(c.now));
  EXPECT_FALSE(status["within_reach"].get<bool>());
  EXPECT_NE(status["backstop"]["reason"].get<std::string>().find("cannot reach"), std::string::npos);
  c.rounds(6);
  EXPECT_LE(c.measured(), unpaced() * 0.5 * 1.01) << "the limits, with their integral term, meet the budget";
  c.set(unpaced() * 0.9);
  EXPECT_FALSE(c.backstop());
  EXPECT_FALSE(c.budget.power_limit("a"));
}

TEST_F(TwoJobs, ADeadlineShorterThanTwoRoundsHoldsTheBudgetWithPowerLimitsUntilThePlansFollow) {
  c.set(unpaced() * 0.85, 0);  // at once: sooner than any round
  EXPECT_TRUE(c.backstop());
  EXPECT_NE(c.budget.status(c.now).backstop.reason.value().find("sooner"), std::string::npos);
  c.rounds(2);
  EXPECT_FALSE(c.backstop()) << "every job ran two rounds on its plans: the limits are lifted";
  c.rounds(2);
  EXPECT_LE(c.measured(), unpaced() * 0.85);
}

TEST_F(TwoJobs, AJobThatEndsLeavesNobodyPacedOrCappedForIt) {
  c.set(unpaced() * 0.5);
  ASSERT_TRUE(c.backstop());
  c.budget.leave("b", c.now);  // crashed, or done
  c.jobs.erase("b");
  EXPECT_FALSE(c.backstop()) << "a alone fits the budget through its plans";
  EXPECT_FALSE(c.budget.power_limit("a"));
  c.budget.leave("a", c.now);
  c.jobs.clear();
  EXPECT_FALSE(c.backstop());
  EXPECT_TRUE(c.budget.status(c.now).jobs.empty());
}

TEST_F(TwoJobs, AnArrivingJobCountsAtItsMeasuredPowerAndTheOthersMakeRoom) {
  c.set(unpaced() * 1.05);
  EXPECT_FALSE(a.pace || b.pace);
  FakeJob late{1.5, 8};
  late.deployed = false;
  c.join("late", late);  // not measured yet: its GPUs at the most a GPU of the cluster drew
  EXPECT_EQ(c.budget.job_status("late")->counted_as, "estimate");
  EXPECT_TRUE(a.pace || b.pace) << "room made for it before its first round";
  c.rounds(2);
  EXPECT_EQ(c.budget.job_status("late")->counted_as, "measured");
  EXPECT_LE(c.measured(), unpaced() * 1.05 * 1.01);
  late.deployed = true;
  c.rounds(3);
  EXPECT_LE(c.measured(), unpaced() * 1.05);
}

TEST(PowerBudgetRequest, ChecksItsFieldsByName) {
  using server::budget_request_from_json;
  auto detail = [](const nlohmann::json& body) {
    try {
      budget_request_from_json(body);
    } catch (const server::RequestError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(detail({{"seconds", 5}}).find("field 'watts'"), std::string::npos);
  EXPECT_NE(detail({{"watts", -5}, {"seconds", 5}}).find("field 'watts'"), std::string::npos);
  EXPECT_NE(detail({{"watts", "lots"}, {"seconds", 5}}).find("field 'watts'"), std::string::npos);
  EXPECT_NE(detail({{"watts", 500}}).find("field 'seconds'"), std::string::npos);
  EXPECT_NE(detail({{"watts", 500}, {"seconds", -1}}).find("field 'seconds'"), std::string::npos);
  EXPECT_NE(detail({{"watts", 500}, {"seconds", 1}, {"wats", 1}}).find("field 'wats'"), std::string::npos);
  EXPECT_NE(detail(nlohmann::json::array()).find("body"), std::string::npos);
  auto ok = budget_request_from_json({{"watts", 500}, {"seconds", 30}});
  EXPECT_EQ(ok.watts, 500);
  EXPECT_EQ(ok.comply_s, 30);
  EXPECT_FALSE(budget_request_from_json({{"watts", nullptr}}).watts);
}

struct PowerBudgetRoute : testing::ServerDirTest {};

TEST_F(PowerBudgetRoute, PutAndGetWithClearRefusalsAndAnAcknowledgedBudgetSurvivesARestart) {
  auto s = settings();
  s.power_budget_w = 5000;
  {
    testing::TestServer server(s);
    auto status = nlohmann::json::parse(server.call("GET", "/power_budget").body);
    EXPECT_EQ(status["budget"], 5000);
    EXPECT_EQ(status["source"], "flag");
    auto bad = server.call("PUT", "/power_budget", R"({"watts": -3, "seconds": 1})");
    EXPECT_EQ(bad.status, 400);
    EXPECT_NE(bad.body.find("field 'watts'"), std::string::npos) << bad.body;
    bad = server.call("PUT", "/power_budget", R"({"watts": 4000})");
    EXPECT_EQ(bad.status, 400);
    EXPECT_NE(bad.body.find("field 'seconds'"), std::string::npos) << bad.body;
    bad = server.call("PUT", "/power_budget", "{not json");
    EXPECT_EQ(bad.status, 400);
    EXPECT_NE(bad.body.find("field 'body'"), std::string::npos) << bad.body;
    EXPECT_EQ(server.call("PUT", "/power_budget", std::string(server::kMaxBudgetBodyBytes + 1, ' ')).status, 413);
    EXPECT_EQ(server.call("POST", "/power_budget", "{}").status, 405);
    auto ok = server.call("PUT", "/power_budget", R"({"watts": 4000, "seconds": 30})");
    ASSERT_EQ(ok.status, 200) << ok.body;
    EXPECT_EQ(nlohmann::json::parse(ok.body)["budget"], 4000);
    EXPECT_NE(server.call("GET", "/metrics").body.find("perseus_power_budget_watts 4000"), std::string::npos);
  }
  {
    testing::TestServer restarted(s);  // the same --power-budget: the acknowledged budget holds
    auto status = nlohmann::json::parse(restarted.call("GET", "/power_budget").body);
    EXPECT_EQ(status["budget"], 4000);
    EXPECT_EQ(status["source"], "api");
  }
  s.power_budget_w = 6000;
  testing::TestServer changed(s);  // the operator changed the flag: it wins
  EXPECT_EQ(nlohmann::json::parse(changed.call("GET", "/power_budget").body)["budget"], 6000);
}

TEST_F(PowerBudgetRoute, AChangeNeedsTheTokenOrThisMachine) {
  testing::TestServer server(settings());
  std::promise<server::HttpResponse> answer;
  server::Credentials remote;  // neither the administrator's token nor loopback
  server::route_power_budget(
      *server.jobs, "PUT", R"({"watts": 100, "seconds": 0})",
      [&](server::HttpResponse r) { answer.set_value(std::move(r)); }, remote);
  auto refused = answer.get_future().get();
  EXPECT_EQ(refused.status, 403);
  EXPECT_NE(refused.body.find("token"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::parse(server.call("GET", "/power_budget").body)["budget"].is_null());
}

TEST(PowerBudgetStore, AnAcknowledgedBudgetHoldsAfterARestartUnlessTheFlagChanged) {
  const auto file = std::filesystem::temp_directory_path() / ("perseus-budget-" + std::to_string(::getpid()) + ".json");
  std::filesystem::remove(file);
  EXPECT_FALSE(server::stored_budget(file, 1000));
  server::store_budget(file, 1000, {800, 60});
  auto back = server::stored_budget(file, 1000);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->watts, 800);
  EXPECT_EQ(back->comply_s, 60);
  EXPECT_FALSE(server::stored_budget(file, 1200)) << "the operator changed --power-budget: the flag wins";
  EXPECT_FALSE(server::stored_budget(file, std::nullopt));
  server::store_budget(file, std::nullopt, {std::nullopt, 0});
  back = server::stored_budget(file, std::nullopt);
  ASSERT_TRUE(back);
  EXPECT_FALSE(back->watts) << "cleared through the API: stays cleared";
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace perseus
