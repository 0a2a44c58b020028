// Plan choices run off the round path: while one job's choice runs, the thread that answers
// rounds keeps answering every other job's, and this job's with the plans it has.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "perseus/online/turnkey_controller.hpp"
#include "perseus/profile/synthetic.hpp"
#include "synthetic_rounds.hpp"

namespace perseus {
namespace {

using online::ControllerConfig;
using online::ControllerPhase;
using online::TurnkeyController;
using testing::small_synthetic_cluster;
using testing::SyntheticCluster;

ControllerConfig config(bool wait) {
  ControllerConfig c;
  c.wait_for_plan = wait;
  c.unit_time = 1e-3;
  return c;
}

// Holds the plan choices from the `first`-th on (counting from 1) until released; releases on
// destruction, so that a failing test does not leave a choice blocked for ever.
struct HeldChoices {
  explicit HeldChoices(int first) : first_(first) {}
  ~HeldChoices() { release(); }
  std::function<void()> hook() {
    return [this] {
      if (++seen_ < first_) return;
      if (seen_ == first_) entered_.count_down();
      released_.wait();
    };
  }
  void wait_until_held() { entered_.wait(); }
  void release() {
    if (!done_.exchange(true)) released_.count_down();
  }
  int seen() const { return seen_.load(); }

 private:
  int first_;
  std::atomic<int> seen_{0};
  std::atomic<bool> done_{false};
  std::latch entered_{1}, released_{1};
};

// Releases a held choice when it goes out of scope (declared after the controller, so before the
// controller's destructor waits for the choice's thread).
struct ReleasedOnExit {
  HeldChoices& held;
  ~ReleasedOnExit() { held.release(); }
};

// One round of a job if it can run one now, as the server's strand does.
bool run_round(TurnkeyController& c, SyntheticCluster& cluster, int& round) {
  if (!c.ready()) return false;
  auto clocks = c.next_round();
  c.observe(cluster.run(clocks, round++));
  return true;
}

// Rounds until pipeline 0 runs other clocks than `before`: a released choice ends on its own thread,
// and rounds go on meanwhile (as many as a busy machine makes it take: the bound only stops a choice
// that never ends).
void run_until_the_plans_change(TurnkeyController& c, SyntheticCluster& cluster, int& round,
                                const std::vector<std::vector<int>>& before) {
  for (int after = 0; c.plan_of(0)->frequencies == before; ++after) {
    std::this_thread::yield();
    ASSERT_TRUE(run_round(c, cluster, round));
    ASSERT_LT(after, 100000);
  }
}

TEST(TurnkeyChoice, ASecondJobsRoundsAreAnsweredWhileTheFirstJobsChoiceRuns) {
  auto a_cluster = small_synthetic_cluster(), b_cluster = small_synthetic_cluster();
  HeldChoices held(1);  // the first job's deployment choice
  online::ControllerHooks hooks;
  hooks.choosing = held.hook();
  TurnkeyController a(config(true), a_cluster.shape(), std::nullopt, hooks), b(config(true), b_cluster.shape());
  ReleasedOnExit release_on_exit{held};
  int a_round = 0, b_round = 0;
  // One thread answers both jobs' rounds until the first job's choice is running.
  while (held.seen() == 0) {
    ASSERT_LT(a_round, 200);
    run_round(a, a_cluster, a_round);
    run_round(b, b_cluster, b_round);
  }
  held.wait_until_held();
  const int a_held_at = a_round, b_before = b_round;
  for (int i = 0; i < 60; ++i) {
    EXPECT_FALSE(run_round(a, a_cluster, a_round));  // held at its barrier (wait_for_plan)
    // Answered meanwhile (once its own planning and choices, which nothing holds, are done).
    while (!run_round(b, b_cluster, b_round)) std::this_thread::yield();
  }
  EXPECT_EQ(a_round, a_held_at);
  EXPECT_EQ(b_round, b_before + 60);
  EXPECT_EQ(b.phase(), ControllerPhase::deployed);  // the second job planned, chose and runs its plan
  EXPECT_EQ(a.phase(), ControllerPhase::planning);
  held.release();
  while (!a.ready()) std::this_thread::yield();
  EXPECT_EQ(a.phase(), ControllerPhase::deployed);
  ASSERT_NE(a.target_plan(), nullptr);
  EXPECT_TRUE(a.target_plan()->point.has_value());
}

TEST(TurnkeyChoice, WithoutWaitingTheRoundsRunTheCurrentPlansUntilTheChoiceIsTaken) {
  auto cluster = small_synthetic_cluster();
  // Pipeline 1 straggles from round 60: the choice that follows it is held.
  cluster.factor = [](int d, int r, int) { return d == 1 && r >= 60 ? 1.2 : 1.0; };
  HeldChoices held(2);  // the choice after the deployment's
  online::ControllerHooks hooks;
  hooks.choosing = held.hook();
  TurnkeyController c(config(false), cluster.shape(), std::nullopt, hooks);
  ReleasedOnExit release_on_exit{held};  // a failed assertion must not leave the choice held while c joins it
  int round = 0, deployed_rounds = 0;
  while (held.seen() < 2) {
    // Planning runs on its own thread while rounds go on: on a busy machine that takes any number of
    // rounds, so only the rounds after the deployment are counted.
    if (c.phase() == ControllerPhase::deployed) {
      ASSERT_LT(++deployed_rounds, 300);
    } else {
      std::this_thread::yield();
    }
    ASSERT_TRUE(run_round(c, cluster, round));
  }
  held.wait_until_held();
  ASSERT_EQ(c.phase(), ControllerPhase::deployed);
  const auto deployed = c.plan_of(0)->frequencies;
  const auto events = c.decisions().size();
  int on_plans = 0;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(c.ready());  // not held
    auto clocks = c.next_round();
    if (clocks) {  // the deployed plans, or an all-max probe
      EXPECT_EQ((*clocks)[0], deployed);
      ++on_plans;
    }
    c.observe(cluster.run(clocks, round++));
  }
  EXPECT_GE(on_plans, 15);
  EXPECT_EQ(c.decisions().size(), events);
  held.release();
  run_until_the_plans_change(c, cluster, round, deployed);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_TRUE(c.straggler().has_value());
  EXPECT_EQ(c.straggler()->pipeline, 1);
  EXPECT_EQ(to_string(c.decisions().back().event), "slowed to the straggler");
}

// Plans paced to a straggler that has recovered run slower than all-max: while the choice that takes
// the pipelines back to the target plan runs, the rounds run at all-max instead, unless a power budget
// holds probes (`hold_probes`: all-max may draw more than it allows), where they keep the plans.
void rounds_while_the_choice_after_a_recovery_runs(bool hold_probes) {
  auto cluster = small_synthetic_cluster();
  bool straggling = false;
  cluster.factor = [&straggling](int d, int, int) { return d == 1 && straggling ? 1.2 : 1.0; };
  std::atomic<bool> hold_next{false};
  HeldChoices held(1);
  online::ControllerHooks hooks;
  hooks.choosing = [&hold_next, inner = held.hook()] {
    if (hold_next.exchange(false)) inner();
  };
  TurnkeyController c(config(false), cluster.shape(), std::nullopt, hooks);
  ReleasedOnExit release_on_exit{held};
  int round = 0, paced_rounds = 0;
  // Deployed, then pipeline 1 straggles until the others have run ten rounds paced to it.
  while (paced_rounds < 10) {
    ASSERT_LT(round, 100000);
    if (c.phase() != ControllerPhase::deployed) std::this_thread::yield();
    straggling = c.phase() == ControllerPhase::deployed && round >= 60;
    if (c.straggler() && c.plan_of(0) && c.plan_of(0)->time > c.plan_of(1)->time) ++paced_rounds;
    run_round(c, cluster, round);
  }
  if (hold_probes) c.set_pace(std::nullopt, true);  // no pace, probes held
  straggling = false;
  hold_next = true;  // the next choice: back to the target plan, once the recovery is seen
  while (held.seen() == 0) {
    ASSERT_LT(round, 100000);
    run_round(c, cluster, round);
  }
  held.wait_until_held();
  const auto paced = c.plan_of(0)->frequencies;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(c.ready());
    const auto clocks = c.next_round();
    if (hold_probes) {
      ASSERT_TRUE(clocks.has_value()) << "round " << i << " of the held choice ran all-max under the budget";
      EXPECT_EQ((*clocks)[0], paced);
    } else {
      EXPECT_FALSE(clocks.has_value()) << "round " << i << " of the held choice ran the paced plans";
    }
    c.observe(cluster.run(clocks, round++));
  }
  held.release();
  run_until_the_plans_change(c, cluster, round, paced);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_FALSE(c.straggler().has_value());
  EXPECT_EQ(to_string(c.decisions().back().event), "back to the target plan");
}

TEST(TurnkeyChoice, WhileTheChoiceAfterARecoveryRunsTheRoundsRunAtAllMax) {
  rounds_while_the_choice_after_a_recovery_runs(false);
}

TEST(TurnkeyChoice, WhileAPowerBudgetHoldsProbesTheRoundsKeepThePlansDuringThatChoice) {
  rounds_while_the_choice_after_a_recovery_runs(true);
}

}  // namespace
}  // namespace perseus
