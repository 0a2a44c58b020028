// Which pipeline is a straggler: slower than the others by the threshold for enough rounds.
#include <gtest/gtest.h>

#include "perseus/online/straggler_detector.hpp"

namespace perseus {
namespace {

TEST(StragglerDetector, NeedsTheThresholdForTheGivenRoundsAndClearsAfterRecovery) {
  online::StragglerDetector detector({0.05, 2, 2});
  EXPECT_FALSE(detector.observe({1.0, 1.04, 1.0}));  // below the threshold: never
  EXPECT_FALSE(detector.observe({1.0, 1.04, 1.0}));
  EXPECT_FALSE(detector.observe({1.0, 1.2, 1.0}));  // one round is not enough
  EXPECT_TRUE(detector.observe({1.0, 1.2, 1.0}));
  ASSERT_TRUE(detector.current());
  EXPECT_EQ(detector.current()->pipeline, 1);
  EXPECT_NEAR(detector.current()->slowdown, 1.2, 1e-12);
  EXPECT_FALSE(detector.observe({1.0, 1.21, 1.0}));  // the same straggler, about as slow
  EXPECT_FALSE(detector.observe({1.0, 1.01, 1.0}));
  EXPECT_TRUE(detector.observe({1.0, 1.01, 1.0}));  // recovered for 2 rounds
  EXPECT_FALSE(detector.current());
}

TEST(StragglerDetector, ComparesWithTheOthersNotWithOne) {
  online::StragglerDetector detector({0.05, 1});
  EXPECT_FALSE(detector.observe({1.1, 1.1, 1.1}));  // everybody slower: nobody to slow down for
  EXPECT_FALSE(detector.observe({1.3}));            // a lone pipeline
  EXPECT_TRUE(detector.observe({1.0, 1.0, 1.5, 1.1}));
  EXPECT_EQ(detector.current()->pipeline, 2);
}

// Following a straggler that has recovered slows training (the others run paced to it), so by default
// one round back within half the threshold clears it, while detecting takes two.
TEST(StragglerDetector, ClearsARecoveredStragglerAfterOneRoundByDefault) {
  online::StragglerDetector detector;
  EXPECT_FALSE(detector.observe({1.0, 1.2}));
  EXPECT_TRUE(detector.observe({1.0, 1.2}));
  EXPECT_FALSE(detector.observe({1.0, 1.17}));  // ended mid-round: still slower than the threshold
  EXPECT_FALSE(detector.observe({1.0, 1.04}));  // within the threshold but not half of it
  EXPECT_TRUE(detector.current());
  EXPECT_TRUE(detector.observe({1.0, 1.01}));
  EXPECT_FALSE(detector.current());
  EXPECT_FALSE(detector.observe({1.0, 1.2}));  // and detecting it again takes two rounds
  EXPECT_TRUE(detector.observe({1.0, 1.2}));
}

// A round within which the straggler's slowdown (or another pipeline's speed) changed is half the
// old and half the new: a slowdown changes once two rounds in a row agree on it.
TEST(StragglerDetector, AStragglersSlowdownChangesWhenTwoRoundsAgreeOnIt) {
  online::StragglerDetector detector;
  EXPECT_FALSE(detector.observe({1.0, 1.3}));
  EXPECT_TRUE(detector.observe({1.0, 1.3}));
  EXPECT_FALSE(detector.observe({1.0, 1.2}));  // one round alone
  EXPECT_FALSE(detector.observe({1.0, 1.3}));  // and back
  EXPECT_NEAR(detector.current()->slowdown, 1.3, 1e-12);
  EXPECT_FALSE(detector.observe({1.0, 1.5}));  // half a round of a change to 1.6
  EXPECT_FALSE(detector.observe({1.0, 1.6}));  // the two rounds disagree
  EXPECT_TRUE(detector.observe({1.0, 1.6}));
  EXPECT_NEAR(detector.current()->slowdown, 1.6, 1e-12);
}

// A pipeline that slows while another is followed: next to the straggler (the others' median with
// one or two others) it does not look slow, and the straggler does not look changed by enough to be
// followed at another slowdown. Compared with the straggler counted at the slowdown it is followed
// at, it is reported apart, the straggler still followed.
TEST(StragglerDetector, APipelineThatSlowsWhileAnotherIsFollowedIsReportedApart) {
  const std::vector<std::vector<double>> before = {{1.0, 1.15}, {1.0, 1.2, 1.0}};
  const std::vector<std::vector<double>> slowed = {{1.1, 1.15}, {1.1, 1.2, 1.0}};
  for (std::size_t k = 0; k < before.size(); ++k) {
    online::StragglerDetector detector;
    EXPECT_FALSE(detector.observe(before[k]));
    EXPECT_TRUE(detector.observe(before[k]));
    EXPECT_TRUE(detector.also_slow().empty());
    EXPECT_FALSE(detector.observe(slowed[k]));
    EXPECT_TRUE(detector.also_slow().empty()) << k;  // one round is not enough
    EXPECT_FALSE(detector.observe(slowed[k]));
    ASSERT_EQ(detector.also_slow().size(), 1u) << k;
    EXPECT_EQ(detector.also_slow()[0].pipeline, 0);
    EXPECT_NEAR(detector.also_slow()[0].slowdown, 1.1, 1e-12);
    ASSERT_TRUE(detector.current());
    EXPECT_EQ(detector.current()->pipeline, 1);
    EXPECT_NEAR(detector.current()->slowdown, before[k][1], 1e-12);
    detector.forget(0);  // its new speed taken in: its plan predicts it
    EXPECT_TRUE(detector.also_slow().empty());
    EXPECT_FALSE(detector.observe(before[k]));
    EXPECT_TRUE(detector.also_slow().empty());
    EXPECT_EQ(detector.current()->pipeline, 1);
  }
}

// Two pipelines: the other slowing past the followed straggler's pace reads, against each other, as
// the straggler back within the threshold. It is no recovery while the straggler's own time did not
// fall: the straggler stays followed and the other is reported apart. A straggler whose own time
// falls is cleared as before.
TEST(StragglerDetector, OthersSlowingToAStragglersPaceIsNotItsRecovery) {
  online::StragglerDetector detector;
  EXPECT_FALSE(detector.observe({1.0, 1.16}));
  EXPECT_TRUE(detector.observe({1.0, 1.16}));
  EXPECT_FALSE(detector.observe({1.15, 1.16}));  // within half the threshold of the other, not faster itself
  ASSERT_TRUE(detector.current());
  EXPECT_EQ(detector.current()->pipeline, 1);
  EXPECT_FALSE(detector.observe({1.3, 1.16}));
  ASSERT_EQ(detector.also_slow().size(), 1u);
  EXPECT_EQ(detector.also_slow()[0].pipeline, 0);
  EXPECT_NEAR(detector.also_slow()[0].slowdown, 1.3, 1e-12);
  detector.forget(0);
  EXPECT_TRUE(detector.observe({1.0, 1.0}));  // its own time fell: recovered
  EXPECT_FALSE(detector.current());
}

// A followed straggler that runs less slow, though still above half the threshold, is followed at its
// new slowdown once two rounds agree on it: counted at the old one, the other pipeline would look slow
// next to it (1.07 / 1.03 = 1.039x: neither a straggler nor cleared) and stay suspected for good.
TEST(StragglerDetector, AStragglerLessSlowThanDetectedIsFollowedAtItsNewSlowdown) {
  online::StragglerDetector detector;
  detector.observe({1.0, 1.07});
  ASSERT_TRUE(detector.observe({1.0, 1.07}));
  EXPECT_FALSE(detector.observe({1.0, 1.03}));  // one round is not enough
  EXPECT_TRUE(detector.observe({1.0, 1.03}));
  ASSERT_TRUE(detector.current());
  EXPECT_EQ(detector.current()->pipeline, 1);
  EXPECT_NEAR(detector.current()->slowdown, 1.03, 1e-12);
  for (int round = 0; round < 5; ++round) EXPECT_FALSE(detector.observe({1.0, 1.03}));
  EXPECT_FALSE(detector.suspects());
  // Within half the threshold of its slowdown: kept as it is (noise).
  EXPECT_FALSE(detector.observe({1.0, 1.05}));
  EXPECT_FALSE(detector.observe({1.0, 1.05}));
  EXPECT_NEAR(detector.current()->slowdown, 1.03, 1e-12);
}

// A pipeline between half the threshold and the threshold is suspected (maybe a straggler starting
// mid-round) but not for good: after four times the rounds a straggler takes it is how the cluster runs,
// not followed, and no longer holds the verdicts; once slower by the threshold, a straggler as ever.
TEST(StragglerDetector, APipelineStayingBelowTheThresholdIsSuspectedOnlyForAWhile) {
  online::StragglerDetector detector;  // threshold 5%, 2 rounds
  for (int round = 0; round < 7; ++round) {
    EXPECT_FALSE(detector.observe({1.0, 1.035}));
    EXPECT_TRUE(detector.suspects()) << round;
    EXPECT_TRUE(detector.suspected(1)) << round;
    EXPECT_FALSE(detector.suspected(0)) << round;
  }
  EXPECT_FALSE(detector.observe({1.0, 1.035}));
  EXPECT_FALSE(detector.suspects());
  EXPECT_FALSE(detector.suspected(1));
  EXPECT_FALSE(detector.current());
  EXPECT_FALSE(detector.observe({1.0, 1.08}));
  EXPECT_TRUE(detector.suspects());
  EXPECT_TRUE(detector.observe({1.0, 1.08}));
  ASSERT_TRUE(detector.current());
  EXPECT_EQ(detector.current()->pipeline, 1);
  EXPECT_FALSE(detector.suspected(1));  // followed, no longer suspected
  EXPECT_FALSE(detector.suspected(2));  // no such pipeline
  detector.reset();
  EXPECT_FALSE(detector.observe({1.0, 1.035}));
  EXPECT_TRUE(detector.suspects());  // counted anew
}

}  // namespace
}  // namespace perseus
