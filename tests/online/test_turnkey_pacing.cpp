// The turnkey loop under a cluster's power budget: the paces a deployed job offers, the pace it is
// told to keep (every pipeline slowed, no step-up, no probe while held) and what a GPU power limit
// would make of it. Synthetic rounds, no server.
#include <gtest/gtest.h>

#include <thread>

#include "perseus/online/turnkey_controller.hpp"
#include "perseus/profile/synthetic.hpp"
#include "synthetic_rounds.hpp"

namespace perseus {
namespace {

using online::TurnkeyController;

struct Deployed : ::testing::Test {
  testing::SyntheticCluster cluster;
  std::unique_ptr<TurnkeyController> controller;
  void SetUp() override {
    SyntheticGpu gpu;
    gpu.num_stages = 4;
    cluster.profile = parse_profile(synthetic_profile_csv(gpu), "synthetic");
    cluster.p_block = gpu.idle_power;
    online::ControllerConfig config;
    config.wait_for_plan = true;
    config.unit_time = 1e-3;
    config.probe_every = 5;
    controller = std::make_unique<TurnkeyController>(config, cluster.shape());
    testing::run_rounds(*controller, cluster, 40);
    ASSERT_EQ(controller->phase(), online::ControllerPhase::deployed);
  }
  // A pace's plans are chosen off the round path: in place once the controller is ready again.
  void settle() {
    while (!controller->ready()) std::this_thread::yield();
  }
  // The job's measured power on its plans over a few rounds.
  double power(int rounds = 3) {
    double sum = 0;
    int n = 0;
    for (const auto& m : testing::run_rounds(*controller, cluster, rounds)) sum += m.energy / m.iteration_time, ++n;
    return sum / n;
  }
};

TEST_F(Deployed, OffersItsFrontierFromTheUnpacedPlansOnWithPredictionsThatHold) {
  controller->set_pace(std::nullopt, true);  // no probe round in what is measured here
  auto options = controller->pace_options(64);
  ASSERT_GE(options.size(), 10u);
  EXPECT_LE(options.size(), 64u);
  // The unpaced plans first, at the target's time (in measured terms).
  EXPECT_NEAR(options.front().iteration_time, controller->target_plan()->time * controller->scale(), 1e-9);
  for (std::size_t k = 1; k < options.size(); ++k) {
    EXPECT_GT(options[k].iteration_time, options[k - 1].iteration_time);
    EXPECT_LT(options[k].energy / options[k].iteration_time, options[k - 1].energy / options[k - 1].iteration_time)
        << "each slower pace draws less";
  }
  const double unpaced = power();
  EXPECT_NEAR(options.front().energy / options.front().iteration_time, unpaced, 0.02 * unpaced);
  // Paced halfway along: the measured power is the prediction's, the iteration no slower than the pace.
  const auto& half = options[options.size() / 2];
  controller->set_pace(half.iteration_time, true);
  const double paced = power();
  EXPECT_NEAR(paced, half.energy / half.iteration_time, 0.03 * paced);
  EXPECT_LT(paced, unpaced * 0.97);
}

TEST_F(Deployed, APaceSlowsEveryPipelineHoldsProbesAndStepUpsAndLiftingItRestoresThePlan) {
  const auto target = controller->target_plan()->frequencies;
  auto options = controller->pace_options(16);
  controller->set_pace(options.back().iteration_time, true);
  settle();
  for (std::size_t d = 0; d < 2; ++d) EXPECT_NE(controller->plan_of(d)->frequencies, target);
  const int step_ups = controller->step_ups(), probes = controller->probes();
  for (const auto& m : testing::run_rounds(*controller, cluster, 12)) (void)m;
  EXPECT_EQ(controller->step_ups(), step_ups) << "slower on purpose: not a plan that misses its target";
  EXPECT_EQ(controller->probes(), probes) << "an all-max probe round would break the budget";
  controller->set_pace(std::nullopt, false);
  settle();
  for (std::size_t d = 0; d < 2; ++d) EXPECT_EQ(controller->plan_of(d)->frequencies, target);
  for (const auto& m : testing::run_rounds(*controller, cluster, 6)) (void)m;
  EXPECT_GT(controller->probes(), probes) << "probes again once the budget allows";
  // A pace faster than the plans runs changes nothing.
  controller->set_pace(options.front().iteration_time * 0.9, false);
  settle();
  EXPECT_EQ(controller->plan_of(0)->frequencies, target);
}

TEST_F(Deployed, APowerLimitSlowsTheUnpacedJobMoreThanThePaceOfTheSamePower) {
  auto options = controller->pace_options(64);
  const auto& unpaced = options.front();
  const int gpus = 4 * 2;
  auto generous = controller->under_power_limit(1000);
  ASSERT_TRUE(generous);
  EXPECT_NEAR(generous->iteration_time, unpaced.iteration_time, 1e-9) << "a limit above every power changes nothing";
  // A limit at the per-GPU power of a slower pace: the limit's run is no faster than that pace.
  const auto& slower = options[options.size() / 2];
  auto limited = controller->under_power_limit(slower.energy / slower.iteration_time / gpus * 1.3);
  ASSERT_TRUE(limited);
  EXPECT_GT(limited->iteration_time, unpaced.iteration_time);
}

TEST(TurnkeyPacing, NothingToOfferBeforeDeployment) {
  testing::SyntheticCluster cluster;
  SyntheticGpu gpu;
  cluster.profile = parse_profile(synthetic_profile_csv(gpu), "synthetic");
  TurnkeyController controller({}, cluster.shape());
  EXPECT_TRUE(controller.pace_options(16).empty());
  EXPECT_FALSE(controller.under_power_limit(200));
  controller.set_pace(1.0, true);  // remembered, harmless
  EXPECT_EQ(controller.pace(), 1.0);
}

}  // namespace
}  // namespace perseus
