// The turnkey controller on its own: synthetic rounds in, clocks and decisions out,
// no server and no processes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "perseus/online/statistics.hpp"
#include "perseus/online/turnkey_controller.hpp"
#include "perseus/profile/synthetic.hpp"
#include "synthetic_rounds.hpp"

namespace perseus {
namespace {

using online::ControllerConfig;
using online::TurnkeyController;
using testing::small_synthetic_cluster;
using testing::SyntheticCluster;

ControllerConfig config() {
  ControllerConfig c;
  c.wait_for_plan = true;  // deterministic: no rounds pass while planning
  c.unit_time = 1e-3;
  return c;
}

std::vector<std::string> events(const TurnkeyController& c) {
  std::vector<std::string> out;
  for (const auto& d : c.decisions()) out.emplace_back(to_string(d.event));
  return out;
}

bool has(const std::vector<std::string>& list, const std::string& event) {
  return std::find(list.begin(), list.end(), event) != list.end();
}

TEST(TurnkeyController, ProfilesPlansAndDeploysAPlanThatSavesEnergyAtNoSlowdown) {
  auto cluster = small_synthetic_cluster();
  TurnkeyController controller(config(), cluster.shape());
  testing::run_rounds(controller, cluster, 40);
  EXPECT_EQ(controller.phase(), online::ControllerPhase::deployed);
  EXPECT_EQ(events(controller),
            (std::vector<std::string>{"baseline", "profiling", "profiled", "planning", "planned", "deployed"}));
  ASSERT_TRUE(controller.saving() && controller.slowdown());
  EXPECT_GT(controller.saving()->value, 0.02);
  EXPECT_LE(controller.slowdown()->value, 0.005);
  EXPECT_LE(controller.profiling_rounds() * 2, static_cast<int>(cluster.shape().clocks.size()));
  EXPECT_NEAR(*controller.p_block(), cluster.p_block, 1e-6);
}

TEST(TurnkeyController, ReplayingTheSameRoundsRestoresTheSameState) {
  auto cluster = small_synthetic_cluster();
  cluster.noise = 0.01;
  TurnkeyController first(config(), cluster.shape());
  auto rounds = testing::run_rounds(first, cluster, 40);
  TurnkeyController second(config(), cluster.shape());
  for (const auto& m : rounds) {
    while (!second.ready()) std::this_thread::yield();
    (void)second.next_round();
    second.observe(m);
  }
  EXPECT_EQ(events(second), events(first));
  EXPECT_EQ(second.baseline_time(), first.baseline_time());
  EXPECT_EQ(second.profiling_rounds(), first.profiling_rounds());
  ASSERT_TRUE(first.target_plan() && second.target_plan());
  EXPECT_EQ(second.target_plan()->frequencies, first.target_plan()->frequencies);
}

TEST(TurnkeyController, DetectsAStragglerSlowsTheOthersDownAndReturnsWhenItRecovers) {
  auto cluster = small_synthetic_cluster();
  cluster.factor = [](int d, int r, int) { return d == 1 && r >= 30 && r < 40 ? 1.2 : 1.0; };
  TurnkeyController controller(config(), cluster.shape());
  testing::run_rounds(controller, cluster, 35);
  ASSERT_TRUE(controller.straggler().has_value());
  EXPECT_EQ(controller.straggler()->pipeline, 1);
  EXPECT_NEAR(controller.straggler()->slowdown, 1.2, 0.02);
  EXPECT_GT(controller.plan_of(0)->time, controller.plan_of(1)->time);  // pipeline 0 slowed down
  testing::run_rounds(controller, cluster, 10);                         // rounds 0.. again: no straggler in them
  EXPECT_FALSE(controller.straggler().has_value());
  EXPECT_TRUE(has(events(controller), "straggler detected"));
  EXPECT_TRUE(has(events(controller), "straggler recovered"));
}

// Runs rounds from 30 on with `slow` set until the first all-max probe that comes once a straggler is
// followed; `slow` is set to `during_probe` for that probe's round. Returns whether it came.
bool run_until_a_probe_of_the_straggler(TurnkeyController& controller, SyntheticCluster& cluster, bool& slow,
                                        bool during_probe) {
  for (int r = 0; r < 90; ++r) {
    while (!controller.ready()) std::this_thread::yield();
    slow = r >= 30;
    const bool followed = controller.detected_straggler().has_value();
    const auto clocks = controller.next_round();
    if (followed && !clocks) slow = during_probe;
    controller.observe(cluster.run(clocks, r));
    if (followed && !clocks) {
      while (!controller.ready()) std::this_thread::yield();
      return true;
    }
  }
  return false;
}

ControllerConfig probing_every_5_rounds() {
  auto c = config();
  c.probe_every = 5;
  return c;
}

// A straggler that ends just before an all-max probe is seen there: the round after the probe runs
// the plans without it, not the others' plans paced to it (those run slower than all-max).
TEST(TurnkeyController, AProbeThatMeasuresTheStragglerBackClearsItBeforeAnotherPacedRound) {
  auto cluster = small_synthetic_cluster();
  bool straggling = false;
  cluster.factor = [&straggling](int d, int, int) { return d == 1 && straggling ? 1.2 : 1.0; };
  TurnkeyController controller(probing_every_5_rounds(), cluster.shape());
  ASSERT_TRUE(run_until_a_probe_of_the_straggler(controller, cluster, straggling, false))
      << ::testing::PrintToString(events(controller));
  EXPECT_FALSE(controller.detected_straggler().has_value());
  EXPECT_TRUE(has(events(controller), "straggler recovered"));
  ASSERT_TRUE(controller.plan_of(0) && controller.plan_of(1) && controller.target_plan());
  EXPECT_EQ(controller.plan_of(0)->frequencies, controller.target_plan()->frequencies);
  EXPECT_EQ(controller.plan_of(1)->frequencies, controller.target_plan()->frequencies);
}

// One slow GPU makes its pipeline a straggler while most of the pipeline's instructions run as they
// did: a probe in which it is still slow keeps it followed.
TEST(TurnkeyController, AProbeKeepsAStragglerWhoseOneGpuStillRunsSlow) {
  auto cluster = small_synthetic_cluster();
  bool straggling = false;
  cluster.speed = [&straggling](int d, int s) { return d == 1 && s == 2 && straggling ? 1.6 : 1.0; };
  TurnkeyController controller(probing_every_5_rounds(), cluster.shape());
  ASSERT_TRUE(run_until_a_probe_of_the_straggler(controller, cluster, straggling, true))
      << ::testing::PrintToString(events(controller));
  ASSERT_TRUE(controller.detected_straggler().has_value()) << ::testing::PrintToString(events(controller));
  EXPECT_EQ(controller.detected_straggler()->pipeline, 1);
  EXPECT_FALSE(has(events(controller), "straggler recovered"));
}

TEST(TurnkeyController, StepsToAFasterPlanWhenTheDeployedOneIsMeasurablySlower) {
  auto cluster = small_synthetic_cluster(1);
  const int top = cluster.shape().clocks.front();
  cluster.clock_error = [top](int clock) { return clock < top ? 1.03 : 1.0; };  // the profile is optimistic
  // Plan from the optimistic profile (as a reused profile file would be).
  TurnkeyController controller(config(), cluster.shape(), cluster.profile);
  testing::run_rounds(controller, cluster, 40);
  EXPECT_GE(controller.step_ups(), 1);
  EXPECT_TRUE(has(events(controller), "stepped up"));
  ASSERT_TRUE(controller.slowdown());
  EXPECT_LE(controller.slowdown()->value, 0.005);
}

// --- A baseline that can be trusted, attribution, true numbers ----------------------------------

TEST(RobustMean, LeavesOutlyingRoundsOutAndGivesAnInterval) {
  std::vector<bool> kept;
  auto e = online::robust_mean({1.00, 1.01, 0.99, 1.00, 1.30}, &kept);
  EXPECT_EQ(kept, (std::vector<bool>{true, true, true, true, false}));
  EXPECT_NEAR(e.value, 1.0, 1e-12);
  EXPECT_LT(e.low, 1.0);
  EXPECT_GT(e.high, 1.0);
  EXPECT_LT(e.high - e.low, 0.05);
}

// Each set one GPU's durations at its own level (GPUs of different speeds): only the spread within
// the sets counts, and the error falls with the square root of the count.
TEST(RelativeStandardError, PoolsTheSpreadWithinSetsAndFallsWithTheirSize) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> noise(0.0, 0.02);
  auto sets = [&](int per_set) {
    std::vector<std::vector<double>> out(2);
    for (int i = 0; i < per_set; ++i) out[0].push_back(0.05 * noise(rng)), out[1].push_back(0.07 * noise(rng));
    return out;
  };
  EXPECT_NEAR(online::relative_standard_error(sets(200)), 0.02 / std::sqrt(400.0), 0.0002);
  EXPECT_NEAR(online::relative_standard_error(sets(2000)), 0.02 / std::sqrt(4000.0), 0.00005);
  EXPECT_EQ(online::relative_standard_error({{0.05}, {0.07}}), 0);  // no set of two
  EXPECT_EQ(online::relative_standard_error({{0.05, 0.05, 0.05}}), 0);
}

double clean_baseline() {
  auto cluster = small_synthetic_cluster();
  TurnkeyController controller(config(), cluster.shape());
  testing::run_rounds(controller, cluster, 6);
  return controller.baseline_time();
}

TEST(TurnkeyController, ASlowRoundOfTheWholeClusterIsLeftOutOfTheBaseline) {
  auto cluster = small_synthetic_cluster();
  cluster.factor = [](int, int r, int k) { return r == 2 && k == 1 ? 1.3 : 1.0; };  // one slow iteration
  TurnkeyController controller(config(), cluster.shape());
  testing::run_rounds(controller, cluster, 7);
  ASSERT_TRUE(controller.has_baseline());
  EXPECT_EQ(controller.baseline_rejected(), 1);
  EXPECT_NEAR(controller.baseline_time(), clean_baseline(), 1e-9);
}

TEST(TurnkeyController, ARoundWithOneSlowPipelineIsLeftOutOfTheBaseline) {
  auto cluster = small_synthetic_cluster();
  cluster.factor = [](int d, int r, int) { return d == 1 && r == 1 ? 1.3 : 1.0; };
  TurnkeyController controller(config(), cluster.shape());
  testing::run_rounds(controller, cluster, 7);
  EXPECT_NEAR(controller.baseline_time(), clean_baseline(), 1e-9);
  EXPECT_EQ(controller.baseline_rounds(), 4);  // the warm-up went on for one more round
  EXPECT_EQ(controller.baseline_rejected(), 1);
}

TEST(TurnkeyController, AStragglerWhileProfilingIsDetectedAndKeptOutOfTheProfile) {
  Profile clean, disturbed;
  auto run = [](Profile& out, bool straggler) {
    auto cluster = small_synthetic_cluster();
    if (straggler) cluster.factor = [](int d, int r, int) { return d == 1 && r >= 5 && r < 12 ? 1.3 : 1.0; };
    auto hooks = online::ControllerHooks{};
    hooks.profiled = [&out](const Profile& p) { out = p; };
    TurnkeyController controller(config(), cluster.shape(), std::nullopt, hooks);
    testing::run_rounds(controller, cluster, 20);
    return events(controller);
  };
  (void)run(clean, false);
  auto seen = run(disturbed, true);
  EXPECT_TRUE(has(seen, "straggler detected"));
  ASSERT_EQ(disturbed.rows.size(), clean.rows.size());
  for (std::size_t i = 0; i < clean.rows.size(); ++i) {
    EXPECT_EQ(disturbed.rows[i].frequency, clean.rows[i].frequency);
    EXPECT_NEAR(disturbed.rows[i].time, clean.rows[i].time, 1e-12);
  }
}

// Under noise the top clock is known from every round of the baseline, not from the last one alone:
// the profile's top-clock rows are the warm-up's rounds' mean (each round's over both pipelines).
TEST(TurnkeyController, TheTopClockIsMeasuredByEveryRoundOfTheBaseline) {
  Profile profile;
  auto cluster = small_synthetic_cluster();
  cluster.noise = 0.02;
  auto hooks = online::ControllerHooks{};
  hooks.profiled = [&profile](const Profile& p) { profile = p; };
  auto c = config();
  c.baseline_precision = 0.05;  // the warm-up's five rounds are enough
  TurnkeyController controller(c, cluster.shape(), std::nullopt, hooks);
  const auto rounds = testing::run_rounds(controller, cluster, 60);
  ASSERT_FALSE(profile.rows.empty());
  const auto& baseline = controller.decisions().front();
  ASSERT_EQ(baseline.event, online::DecisionEvent::baseline);
  ASSERT_EQ(baseline.detail.find("outlying"), std::string::npos) << baseline.detail;
  const int warmup = c.warmup_rounds;  // rounds 1 .. warmup - 1 are the baseline's (round 0 starts up)
  ASSERT_EQ(controller.baseline_rounds(), warmup - 1);
  const int top = cluster.shape().clocks.front();
  int compared = 0;
  for (const auto& row : profile.rows) {
    if (row.frequency != top) continue;
    const online::StageKind key{row.stage, row.kind};
    double mean = 0, last = 0;
    for (std::size_t d = 0; d < 2; ++d) {
      std::vector<double> times;
      for (int r = 1; r < warmup; ++r) times.push_back(rounds[std::size_t(r)].pipeline_instructions[d].at(key).time);
      mean += online::robust_mean(times).value / 2;
      last += times.back() / 2;
    }
    EXPECT_NEAR(row.time, mean, 1e-12 * mean);
    EXPECT_GT(std::abs(row.time - last), 1e-9 * mean);  // not the last round's
    ++compared;
  }
  EXPECT_EQ(compared, 2 * cluster.shape().num_stages);
}

// Energy and time of all-max in round r of `cluster`: the twin the numbers are measured against.
TimeEnergy twin(SyntheticCluster cluster, int r) {
  auto m = cluster.run(std::nullopt, r);
  return {m.iteration_time, m.energy};
}

TEST(TurnkeyController, AWholeClusterSlowdownScalesTheReferenceAndDoesNotCondemnThePlan) {
  auto cluster = small_synthetic_cluster();
  cluster.noise = 0.005;
  cluster.factor = [](int, int r, int) { return r >= 30 && r < 60 ? 1.1 : 1.0; };
  auto c = config();
  c.probe_every = 0;
  TurnkeyController controller(c, cluster.shape());
  std::vector<online::RoundMeasurement> rounds;
  for (int r = 0; r < 50; ++r) {
    while (!controller.ready()) std::this_thread::yield();
    rounds.push_back(cluster.run(controller.next_round(), r));
    controller.observe(rounds.back());
  }
  EXPECT_EQ(controller.step_ups(), 0) << ::testing::PrintToString(events(controller));
  EXPECT_NE(controller.reference().name.find("current conditions"), std::string::npos) << controller.reference().name;
  auto saving = controller.saving();
  ASSERT_TRUE(saving);
  double truth = 0;
  for (int r = 40; r < 50; ++r) truth += 1 - rounds[static_cast<std::size_t>(r)].energy / twin(cluster, r).energy;
  truth /= 10;
  EXPECT_NEAR(saving->value, truth, 0.005);
  EXPECT_LE(saving->low, truth);
  EXPECT_GE(saving->high, truth);
}

TEST(TurnkeyController, ABaselineMeasuredInASlowSpellIsStretchedToWhatAllMaxTakesNow) {
  auto cluster = small_synthetic_cluster();
  cluster.factor = [](int, int r, int) { return r < 6 ? 1.04 : 1.0; };  // the whole warm-up ran slow
  auto c = config();
  c.probe_every = 5;
  TurnkeyController controller(c, cluster.shape());
  testing::run_rounds(controller, cluster, 45);
  // The instructions ran faster than in the baseline ever since: all-max takes the clean time now,
  // and the plan is judged against that (no step-up), probes agreeing.
  EXPECT_NEAR(controller.reference().iteration_time, clean_baseline(), 1e-6 * clean_baseline());
  EXPECT_GT(controller.probes(), 0);
  EXPECT_EQ(controller.step_ups(), 0) << ::testing::PrintToString(events(controller));
  EXPECT_FALSE(has(events(controller), "baseline corrected"));
}

TEST(TurnkeyController, ProbesCorrectABaselineThatTheInstructionsDoNotExplain) {
  auto cluster = small_synthetic_cluster();
  const double clean = clean_baseline();
  // The warm-up's iterations were longer by what no instruction shows (a slow synchronisation).
  cluster.overhead = [clean](int r) { return r < 6 ? 0.04 * clean : 0.0; };
  auto c = config();
  c.probe_every = 5;
  TurnkeyController controller(c, cluster.shape());
  testing::run_rounds(controller, cluster, 45);
  EXPECT_TRUE(has(events(controller), "baseline corrected")) << ::testing::PrintToString(events(controller));
  EXPECT_NEAR(controller.baseline_time(), clean, 1e-6 * clean);
  EXPECT_NEAR(controller.reference().iteration_time, clean, 1e-6 * clean);
}

TEST(TurnkeyController, AStepUpGoesToTheNextPlanAndTheSavingPlanIsTriedAgainLater) {
  auto cluster = small_synthetic_cluster(1);
  const int top = cluster.shape().clocks.front();
  cluster.clock_error = [top](int clock) { return clock < top ? 1.03 : 1.0; };
  cluster.factor = [](int, int r, int) { return r >= 30 ? 1.04 : 1.0; };  // then the cluster slows down
  auto c = config();
  c.retry_after = 10;
  c.slowdown = 1.05;  // plans between the target's and all-max's time exist to step to
  TurnkeyController controller(c, cluster.shape(), cluster.profile);
  testing::run_rounds(controller, cluster, 60);
  ASSERT_TRUE(has(events(controller), "stepped up")) << ::testing::PrintToString(events(controller));
  EXPECT_TRUE(has(events(controller), "retrying")) << ::testing::PrintToString(events(controller));
  const auto& log = controller.decisions();
  auto first_step =
      std::find_if(log.begin(), log.end(), [](const auto& d) { return to_string(d.event) == "stepped up"; });
  EXPECT_EQ(first_step->detail.find("to all-max"), std::string::npos) << first_step->detail;
  ASSERT_TRUE(controller.slowdown());
}

// --- Judged with the noise's uncertainty ------------------------------------------------------

TEST(TurnkeyController, ANoisyBaselineIsMeasuredUntilItsIntervalIsWithinThePrecision) {
  auto quiet = small_synthetic_cluster(2);
  auto noisy = small_synthetic_cluster(2);
  noisy.noise = 0.03;
  noisy.iterations = 6;  // short rounds: each round's mean varies by a fraction of a percent
  TurnkeyController a(config(), quiet.shape(), quiet.profile), b(config(), noisy.shape(), noisy.profile);
  testing::run_rounds(a, quiet, 12);
  testing::run_rounds(b, noisy, 100);
  EXPECT_EQ(a.baseline_rounds(), config().warmup_rounds - 1);  // noise-free: exact at once
  ASSERT_TRUE(b.has_baseline());
  EXPECT_GT(b.baseline_rounds(), config().warmup_rounds - 1);
  const auto& e = b.baseline_time_estimate();
  EXPECT_LE((e.high - e.low) / 2, config().baseline_precision * e.value * (1 + 1e-9));
  // Probes agree with it within its rounds' spread: noise alone does not replace it.
  EXPECT_GE(b.probes(), 1);
  EXPECT_FALSE(has(events(b), "baseline corrected")) << ::testing::PrintToString(events(b));
}

TEST(TurnkeyController, NoisyRoundsOfAPlanWithinTheToleranceDoNotStepItUp) {
  // The plan meets the target (the profile is the truth); only its rounds are noisy. Judged on the
  // median of a few rounds against a point baseline, such a plan was condemned by chance.
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    auto cluster = small_synthetic_cluster(2);
    cluster.noise = 0.03;
    cluster.iterations = 1;
    cluster.seed = seed;
    TurnkeyController controller(config(), cluster.shape(), cluster.profile);
    testing::run_rounds(controller, cluster, 120);
    ASSERT_EQ(controller.phase(), online::ControllerPhase::deployed);
    EXPECT_EQ(controller.step_ups(), 0) << "seed " << seed << ": " << ::testing::PrintToString(events(controller));
  }
}

TEST(TurnkeyController, UnderNoiseAPlanMeasurablyTooSlowIsStillSteppedUp) {
  auto cluster = small_synthetic_cluster(2);
  const int top = cluster.shape().clocks.front();
  cluster.clock_error = [top](int clock) { return clock < top ? 1.03 : 1.0; };
  cluster.noise = 0.03;
  cluster.iterations = 1;
  TurnkeyController controller(config(), cluster.shape(), cluster.profile);
  testing::run_rounds(controller, cluster, 120);
  EXPECT_GE(controller.step_ups(), 1) << ::testing::PrintToString(events(controller));
}

}  // namespace
}  // namespace perseus
