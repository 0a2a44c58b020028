// The turnkey loop's parts of their own: when a step-up is tried again, what the slowest of
// several pipelines takes, and each pipeline's baseline.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "perseus/online/deployed_rounds.hpp"
#include "perseus/online/pipeline_baseline.hpp"
#include "perseus/online/reference_model.hpp"
#include "perseus/online/retry_policy.hpp"

namespace perseus::online {
namespace {

TEST(RetryPolicy, RetriesAtOnceWhenTheEvidenceIsStaleAndOtherwiseAfterDoublingRoundsUpToTheBound) {
  RetryPolicy p(20, 40);
  Evidence e;
  EXPECT_FALSE(p.due(0, e));
  p.stepped_up(10, e);
  std::string why;
  bool stale = true;
  EXPECT_FALSE(p.due(29, e));
  EXPECT_TRUE(p.due(30, e, &why, &stale));
  EXPECT_FALSE(stale);
  EXPECT_NE(why.find("20 rounds"), std::string::npos) << why;
  p.retried(30);
  EXPECT_FALSE(p.due(31, e));
  p.stepped_up(33, e);  // the retry failed: twice as long
  EXPECT_EQ(p.interval(), 40);
  EXPECT_FALSE(p.due(72, e));
  EXPECT_TRUE(p.due(73, e));
  p.retried(73);
  p.stepped_up(75, e);
  EXPECT_EQ(p.interval(), 40);  // bounded
  // Stale evidence: at once, whatever the rounds.
  for (Evidence stale_evidence : {Evidence{1, 0, 1}, Evidence{0, 1, 1}, Evidence{0, 0, 1.02}}) {
    EXPECT_TRUE(p.due(76, stale_evidence, &why, &stale)) << why;
    EXPECT_TRUE(stale);
  }
  EXPECT_FALSE(p.due(76, Evidence{0, 0, 1.005}));  // a pace within a percent is the same
  // A retry that holds ten rounds is a success: the next step-up waits the first interval again.
  p.retried(115);
  EXPECT_FALSE(p.held(9));
  EXPECT_TRUE(p.held(10));
  EXPECT_FALSE(p.held(11));  // once
  p.stepped_up(200, e);
  EXPECT_EQ(p.interval(), 20);
  RetryPolicy never(20, 0);
  never.stepped_up(0, e);
  EXPECT_FALSE(never.due(1000, Evidence{5, 5, 2}));
}

TEST(RetryPolicy, APlanCondemnedAgainOnTheSameEvidenceWaitsForItToBeStale) {
  RetryPolicy p(20, 40);
  const Evidence e;
  p.stepped_up(10, e, /*same_plan_again=*/true);  // the first verdict: nothing to be the same as
  EXPECT_FALSE(p.stale_only());
  EXPECT_TRUE(p.due(30, e));
  p.retried(30);
  EXPECT_TRUE(p.held(10));  // held a while, then condemned again on the same evidence
  p.stepped_up(45, e, true);
  EXPECT_TRUE(p.waiting());
  EXPECT_TRUE(p.stale_only());
  EXPECT_FALSE(p.due(10'000, e));  // rounds alone never
  std::string why;
  bool stale = false;
  EXPECT_TRUE(p.due(46, Evidence{1, 0, 1}, &why, &stale)) << why;  // a baseline correction: at once
  EXPECT_TRUE(stale);
  EXPECT_TRUE(p.due(46, Evidence{0, 0, 1.02}, &why, &stale)) << why;  // the cluster's pace moved
  // Condemned again on evidence that changed between the verdicts (a straggler came and went): rounds count.
  p.retried(46);
  p.stepped_up(60, Evidence{0, 2, 1}, true);
  EXPECT_FALSE(p.stale_only());
  EXPECT_TRUE(p.due(60 + p.interval(), Evidence{0, 2, 1}));
  // Another plan condemned: rounds count.
  p.retried(100);
  p.stepped_up(110, Evidence{0, 2, 1}, false);
  EXPECT_FALSE(p.stale_only());
}

TEST(PaceModel, TheSlowestOfNoisyPipelinesIsLaterThanAnyAndAStragglerDecides) {
  PaceModel quiet(0), noisy(0.01);
  EXPECT_DOUBLE_EQ(quiet.expected_slowest({1.0, 1.0}), 1.0);
  EXPECT_DOUBLE_EQ(quiet.expected_slowest({1.0, 1.2}), 1.2);
  // Two equal pipelines with 1% noise: the expected maximum of two normals, 0.564 sigma above.
  EXPECT_NEAR(noisy.expected_slowest({1.0, 1.0}), 1.00564, 0.001);
  EXPECT_NEAR(noisy.expected_slowest({1.0}), 1.0, 1e-12);
  // One pipeline 10% slower: the iteration stretches by its change less the noise's share that is gone.
  const double stretch = noisy.stretch({1.0, 1.0}, {1.0, 1.1});
  EXPECT_LT(stretch, 1.1);
  EXPECT_NEAR(stretch, 1.1 / 1.00564, 0.002);
  EXPECT_NEAR(noisy.stretch({1.0, 1.0}, {1.03, 1.03}), 1.03, 1e-9);  // the whole cluster: exactly its change
  EXPECT_NEAR(quiet.stretch({1.0, 1.1}, {1.05, 1.0}), 1.0, 1e-12);   // the faster one slowing a little: nothing
}

RoundMeasurement all_max_round(double t0, double t1) {
  RoundMeasurement m;
  m.pipeline_time = {t0 * 10, t1 * 10};
  m.pipeline_energy = {100 * t0, 100 * t1};
  m.pipeline_instructions.resize(2);
  m.slot_time.resize(2);
  for (int d = 0; d < 2; ++d) {
    const double t = d == 0 ? t0 : t1;
    m.pipeline_instructions[std::size_t(d)][{0, InstructionKind::forward}] = {t, 10 * t};
    m.pipeline_instructions[std::size_t(d)][{0, InstructionKind::backward}] = {2 * t, 20 * t};
    m.slot_time[std::size_t(d)] = {{t, t, t, 2 * t, 2 * t, 2 * t}};
  }
  return m;
}

// Over a window the saving is its energy over its references' (a round whose all-max costs more
// weighs more); rounds measured against a reference later known wrong are restated, the energy
// saved with them.
TEST(DeployedRounds, TheSavingIsSumsOverSumsAndRestatedRoundsCountAgainstTheirNewReference) {
  DeployedRounds rounds(4);
  rounds.add(0.9, 90, 5, Reference{"all-max", 1.0, 100});   // 10% saved
  rounds.add(1.2, 150, 5, Reference{"all-max", 1.2, 200});  // 25% saved
  EXPECT_NEAR(rounds.saving(0)->value, 1 - 240.0 / 300.0, 1e-12);
  EXPECT_NEAR(rounds.slowdown(0)->value, 2.1 / 2.2 - 1, 1e-12);
  EXPECT_NEAR(rounds.energy_saved(), 5 * 10 + 5 * 50, 1e-9);
  // The second round's reference was 5% too high.
  rounds.restate(1, Reference{"all-max", 1.2 / 1.05, 200 / 1.05});
  EXPECT_NEAR(rounds.saving(0)->value, 1 - 240.0 / (100 + 200 / 1.05), 1e-12);
  EXPECT_NEAR(rounds.energy_saved(), 5 * 10 + 5 * (200 / 1.05 - 150), 1e-9);
  EXPECT_NEAR(rounds.last().reference.energy, 200 / 1.05, 1e-12);
}

// A change that came within the oldest restated round counts there for the share of it the change ran.
TEST(DeployedRounds, TheOldestRestatedRoundTakesTheNewReferenceForItsShare) {
  DeployedRounds rounds(4);
  rounds.add(1.0, 100, 5, Reference{"all-max", 1.0, 100});
  rounds.add(1.0, 100, 5, Reference{"all-max", 1.0, 100});
  rounds.add(0.8, 80, 5, Reference{"all-max", 0.8, 80});
  rounds.restate(2, Reference{"all-max", 0.8, 80}, 0.25);
  // The second round: a quarter of the way from 1.0 s and 100 J to 0.8 s and 80 J.
  EXPECT_NEAR(rounds.slowdown(0)->value, 2.8 / (1.0 + 0.95 + 0.8) - 1, 1e-12);
  EXPECT_NEAR(rounds.energy_saved(), 5 * (95 - 100), 1e-9);
  // A share past one is the whole reference; below none, none of it.
  rounds.restate(1, Reference{"all-max", 0.7, 70}, 2);
  EXPECT_NEAR(rounds.last().reference.energy, 70, 1e-12);
  rounds.restate(2, Reference{"all-max", 0.5, 50}, -1);
  EXPECT_NEAR(rounds.saving(0)->value, 1 - 280.0 / (100 + 95 + 50), 1e-12);
}

// Restated rounds may each take their own reference, the oldest of them for its share.
TEST(DeployedRounds, RestatedRoundsTakeEachTheirOwnReference) {
  DeployedRounds rounds(4);
  for (int i = 0; i < 3; ++i) rounds.add(1.0, 100, 5, Reference{"all-max", 1.0, 100});
  rounds.restate({Reference{"all-max", 0.8, 80}, Reference{"all-max", 0.9, 90}}, 0.5);
  // The second round half-way to 0.8 s and 80 J, the third at 0.9 s and 90 J; the first as it was.
  EXPECT_NEAR(rounds.slowdown(0)->value, 3.0 / (1.0 + 0.9 + 0.9) - 1, 1e-12);
  EXPECT_NEAR(rounds.energy_saved(), 5 * (90 - 100) + 5 * (90 - 100), 1e-9);
  EXPECT_NEAR(rounds.last().reference.iteration_time, 0.9, 1e-12);
  // More references than rounds kept: the newest ones, one a round.
  rounds.restate({Reference{"all-max", 2, 200}, Reference{"all-max", 1.1, 110}, Reference{"all-max", 1.2, 120},
                  Reference{"all-max", 1.3, 130}, Reference{"all-max", 1.4, 140}});
  EXPECT_NEAR(rounds.slowdown(0)->value, 3.0 / (1.2 + 1.3 + 1.4) - 1, 1e-12);
}

// A top-clock time's standard error: the spread of its rounds over the root of their number.
TEST(PipelineBaseline, TopTimesCarryTheirStandardError) {
  PipelineBaseline b;
  for (double t : {1.0, 1.02, 0.98, 1.01, 0.99}) b.add(all_max_round(t, 1.0), 40);
  b.estimate({true, true, true, true, true});
  // Forward times 1, 1.02, 0.98, 1.01, 0.99: standard deviation 0.0158, over the root of 5.
  EXPECT_NEAR(b.top_time_error(0, {0, InstructionKind::forward}), std::sqrt(0.001 / 4) / std::sqrt(5.0), 1e-9);
  EXPECT_NEAR(b.top_time_error(0, {0, InstructionKind::backward}), 2 * std::sqrt(0.001 / 4) / std::sqrt(5.0), 1e-9);
  EXPECT_EQ(b.top_time_error(1, {0, InstructionKind::forward}), 0);

  // An outlying round is left out of the mean, and of the error: the five others' as above.
  PipelineBaseline with_outlier;
  for (double t : {1.0, 1.02, 0.98, 1.5, 1.01, 0.99}) with_outlier.add(all_max_round(t, 1.0), 40);
  with_outlier.estimate({true, true, true, true, true, true});
  EXPECT_NEAR(with_outlier.top_time_error(0, {0, InstructionKind::forward}), std::sqrt(0.001 / 4) / std::sqrt(5.0),
              1e-9);
  // The energy is the same rounds' mean: 10 J per second of these rounds, the outlier's left out too.
  EXPECT_NEAR(*with_outlier.top_energy(0, {0, InstructionKind::forward}), 10.0, 1e-9);
  EXPECT_NEAR(*with_outlier.top_energy(0, {0, InstructionKind::backward}), 20.0, 1e-9);
  EXPECT_FALSE(with_outlier.top_energy(2, {0, InstructionKind::forward}));
}

TEST(PipelineBaseline, PacesSpeedsAndConditionsArePerPipeline) {
  PipelineBaseline b;
  for (int r = 0; r < 4; ++r) b.add(all_max_round(1.0, 1.1), 40);
  b.add(all_max_round(1.0, 3.0), 40);  // an outlying round of pipeline 1
  b.estimate({true, true, true, true, true});
  ASSERT_TRUE(b.known());
  EXPECT_NEAR(b.pace(0) / b.pace(1), 1 / 1.1, 1e-12);
  EXPECT_NEAR(b.speed(1, {0, InstructionKind::forward}) / b.speed(0, {0, InstructionKind::forward}), 1.1, 1e-12);
  EXPECT_NEAR(b.energy(1), 110, 1e-9);
  EXPECT_EQ(b.top_time_error(1, {0, InstructionKind::forward}), 0);  // four rounds that agree
  EXPECT_EQ(b.top_time_error(2, {0, InstructionKind::forward}), 0);  // no such pipeline
  std::vector<std::vector<Instruction>> orders = {{{0, InstructionKind::forward, 0},
                                                   {0, InstructionKind::forward, 1},
                                                   {0, InstructionKind::forward, 2},
                                                   {0, InstructionKind::backward, 0},
                                                   {0, InstructionKind::backward, 1},
                                                   {0, InstructionKind::backward, 2}}};
  // Pipeline 1 now 5% slower than in its baseline: its conditions, whatever its own speed.
  auto now = all_max_round(1.0, 1.1 * 1.05);
  EXPECT_NEAR(*b.conditions(now, 0, orders, 1, nullptr, 1410), 1.0, 1e-12);
  EXPECT_NEAR(*b.conditions(now, 1, orders, 1, nullptr, 1410), 1.05, 1e-12);
  // Only slots at the top clock count (and at least 3 of them).
  std::vector<std::vector<int>> clocks = {{1410, 1410, 1200, 1200, 1410, 1410}};
  EXPECT_NEAR(*b.conditions(now, 1, orders, 1, &clocks, 1410), 1.05, 1e-12);
  clocks = {{1410, 1200, 1200, 1200, 1200, 1410}};
  EXPECT_FALSE(b.conditions(now, 1, orders, 1, &clocks, 1410));
  // A change of clock takes effect late: a top-clock slot right after a slower one starts at the
  // slower clock (here 20% longer) and says nothing of the conditions, as long as at least 3 others
  // ran at the top clock after the top clock (the first slot follows the iteration before's last).
  std::vector<std::vector<Instruction>> twelve(1);
  for (auto kind : {InstructionKind::forward, InstructionKind::backward})
    for (int mb = 0; mb < 6; ++mb) twelve[0].push_back({0, kind, mb});
  clocks = {{1410, 1200, 1410, 1200, 1410, 1200, 1410, 1410, 1410, 1410, 1200, 1410}};
  auto late = now;
  const double t = 1.1 * 1.05;
  late.slot_time[1] = {{t, t, t, t, t, t, 2 * t, 2 * t, 2 * t, 2 * t, 2 * t, 2 * t}};
  for (std::size_t k : {2, 4, 6, 11}) late.slot_time[1][0][k] *= 1.2;
  EXPECT_NEAR(*b.conditions(late, 1, twelve, 1, &clocks, 1410), 1.05, 1e-12);
  // Fewer than 3 such slots: every top-clock slot counts.
  clocks = {{1410, 1200, 1410, 1200, 1410, 1200, 1410, 1200, 1410, 1410, 1200, 1410}};
  EXPECT_NEAR(*b.conditions(late, 1, twelve, 1, &clocks, 1410), 1.05 * 1.2, 1e-12);
  // Asked for as few as one such slot (the latency's reference): the one after a top-clock slot alone.
  bool steady_only = false;
  EXPECT_NEAR(*b.conditions(late, 1, twelve, 1, &clocks, 1410, nullptr, &steady_only, nullptr, 1), 1.05, 1e-12);
  EXPECT_TRUE(steady_only);
  // None: every top-clock slot, three of the six slowed by the change.
  clocks = {{1410, 1200, 1410, 1200, 1410, 1200, 1410, 1200, 1410, 1200, 1410, 1200}};
  EXPECT_NEAR(*b.conditions(late, 1, twelve, 1, &clocks, 1410, nullptr, &steady_only, nullptr, 1), 1.05 * 1.1, 1e-12);
  EXPECT_FALSE(steady_only);
}

// The conditions come with the standard error of their median: a short pipeline's all-max round
// measures them from a few instructions, and a calibration within that noise of them is no error.
TEST(PipelineBaseline, ConditionsCarryTheStandardErrorOfTheirMedian) {
  PipelineBaseline b;
  for (int r = 0; r < 4; ++r) b.add(all_max_round(1.0, 1.0), 40);
  b.estimate({true, true, true, true});
  std::vector<std::vector<Instruction>> orders(1);
  for (auto kind : {InstructionKind::forward, InstructionKind::backward})
    for (int mb = 0; mb < 3; ++mb) orders[0].push_back({0, kind, mb});
  auto now = all_max_round(1.0, 1.0);
  double error = -1;
  EXPECT_NEAR(*b.conditions(now, 0, orders, 1, nullptr, 1410, nullptr, nullptr, &error), 1.0, 1e-12);
  EXPECT_EQ(error, 0);  // every slot as in the baseline
  // Ratios 1, 1.02, 0.98 twice: median 1, standard deviation sqrt(0.0016 / 5), times sqrt(pi / 2) over
  // the root of 6.
  now.slot_time[0] = {{1.0, 1.02, 0.98, 2.0, 2.04, 1.96}};
  EXPECT_NEAR(*b.conditions(now, 0, orders, 1, nullptr, 1410, nullptr, nullptr, &error), 1.0, 1e-12);
  EXPECT_NEAR(error, std::sqrt(3.14159265358979 / 2) * std::sqrt(0.0016 / 5) / std::sqrt(6.0), 1e-9);
}

}  // namespace
}  // namespace perseus::online
