// Plans chosen under noise: the variability estimate, the Monte Carlo expected time, the choice
// and the step-up (include/perseus/online/noise_aware_choice.hpp), and the automatic unit time's
// stability under measurement noise.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "perseus/profile/blocking_power.hpp"
#include "perseus/online/background_planner.hpp"
#include "perseus/online/noise_aware_choice.hpp"
#include "perseus/plan/frontier_record.hpp"
#include "perseus/profile/profile.hpp"
#include "perseus/profile/synthetic.hpp"

namespace perseus::online {
namespace {

// A small pipeline whose middle stages are equal: its frontier plans balance several paths.
const PlanningOutput& small_plans() {
  static const PlanningOutput plans = [] {
    SyntheticGpu gpu;
    gpu.num_stages = 4;
    PlanningInput input;
    input.profile = parse_profile(synthetic_profile_csv(gpu), "synthetic.csv");
    input.config.num_stages = 4;
    input.config.num_microbatches = 6;
    input.config.unit_time = 0.001;
    input.config.p_block = 75;
    return plan_online(input);
  }();
  return plans;
}

// Every frontier point's clocks, walked once.
const std::vector<std::vector<std::vector<int>>>& frontier_clocks() {
  static const auto clocks = [] {
    const auto& plans = small_plans();
    std::vector<std::vector<std::vector<int>>> out;
    Plan plan = plan_at(plans.record, 0);
    for (std::size_t i = 0; i < plans.record.points.size(); ++i) {
      advance_plan(plans.record, plan, i);
      out.push_back(plan.frequencies);
    }
    return out;
  }();
  return clocks;
}

double total(const PlanningOutput& plans, double time, double energy, double deadline) {
  return energy + plans.record.num_stages * std::max(0.0, deadline - time) * plans.record.p_block;
}

TEST(VariabilityEstimator, RecoversKnownSigmaAcrossClocksAndRounds) {
  for (double sigma : {0.01, 0.03}) {
    VariabilityEstimator estimator(2);
    std::mt19937_64 rng(5);
    std::lognormal_distribution<double> noise(0.0, sigma);
    for (int set = 0; set < 60; ++set) {
      // Each set its own clock and round: a level that the estimate must not see.
      const double level = 0.05 * (1 + 0.1 * (set % 7)) * (set % 2 ? 1.02 : 0.99);
      std::vector<double> durations;
      for (int i = 0; i < 12; ++i) durations.push_back(level * noise(rng));
      estimator.add(1, InstructionKind::backward, durations);
    }
    const auto v = estimator.estimate();
    EXPECT_NEAR(v.of(1, InstructionKind::backward), sigma, 0.1 * sigma);
    EXPECT_EQ(v.of(0, InstructionKind::forward), 0);  // nothing measured there
    EXPECT_EQ(v.of(1, InstructionKind::forward), 0);
    EXPECT_NEAR(v.max(), sigma, 0.1 * sigma);
  }
}

TEST(VariabilityEstimator, ResistsASlowIterationAndBadValues) {
  VariabilityEstimator estimator(1);
  std::mt19937_64 rng(9);
  std::lognormal_distribution<double> noise(0.0, 0.02);
  for (int round = 0; round < 20; ++round) {
    std::vector<double> durations;
    for (int it = 0; it < 10; ++it)
      for (int m = 0; m < 12; ++m) durations.push_back(0.1 * noise(rng) * (it == 3 ? 1.3 : 1.0));  // one slow iteration
    durations.push_back(0);
    durations.push_back(std::numeric_limits<double>::quiet_NaN());
    estimator.add(0, InstructionKind::forward, durations);
  }
  EXPECT_NEAR(estimator.estimate().of(0, InstructionKind::forward), 0.02, 0.003);
  EXPECT_GT(estimator.pairs(0, InstructionKind::forward), 0u);
  EXPECT_THROW(estimator.add(1, InstructionKind::forward, {1.0, 1.0}), std::out_of_range);
}

TEST(VariabilityEstimator, ConstantDurationsMeanNoNoise) {
  VariabilityEstimator estimator(1);
  estimator.add(0, InstructionKind::forward, std::vector<double>(20, 0.07));
  EXPECT_EQ(estimator.estimate().max(), 0);
}

TEST(EmulatorNoise, PerStageSigmaKeepsTheScalarDraws) {
  const auto& plans = small_plans();
  const auto& emulator = *plans.emulator;
  const auto top = plans.frequencies(plans.candidates.size() - 1);
  const auto scalar = emulator.run(top, EmulatorNoise{0.02, 3});
  const auto staged = emulator.run(top, emulator_noise(Variability::uniform(4, 0.02), 3));
  EXPECT_EQ(scalar.iteration_time, staged.iteration_time);
  EXPECT_EQ(scalar.energy, staged.energy);

  // Only stage 2's backwards vary.
  Variability v = Variability::uniform(4, 0);
  v.sigma[2][1] = 0.05;
  const auto clean = emulator.run(top);
  const auto noisy = emulator.run(top, emulator_noise(v, 3));
  int changed = 0;
  for (std::size_t s = 0; s < clean.instructions.size(); ++s)
    for (std::size_t k = 0; k < clean.instructions[s].size(); ++k) {
      const auto& a = clean.instructions[s][k];
      const auto& b = noisy.instructions[s][k];
      if (s == 2 && a.instruction.kind == InstructionKind::backward) {
        changed += a.duration != b.duration;
      } else {
        EXPECT_EQ(a.duration, b.duration) << s << " " << k;
      }
    }
  EXPECT_GT(changed, 0);
}

TEST(ExpectedTime, EqualsTheNoiseFreeTimeWithoutNoise) {
  const auto& plans = small_plans();
  const auto none = Variability::uniform(4, 0);
  for (std::size_t i : {std::size_t{0}, plans.candidates.size() / 2, plans.candidates.size() - 1}) {
    const auto e = expected_time_and_energy(plans, plans.frequencies(i), none);
    EXPECT_NEAR(e.time, plans.candidates[i].time, 1e-12 * plans.candidates[i].time);
    EXPECT_NEAR(e.energy, plans.candidates[i].energy, 1e-9 * plans.candidates[i].energy);
  }
  EXPECT_NEAR(expected_all_max_time(plans, none), plans.all_max().time, 1e-12);
}

TEST(ExpectedTime, GrowsWithSigmaAndWithPipelines) {
  const auto& plans = small_plans();
  const auto freqs = plans.frequencies(plans.candidates.size() / 2);
  double before = plans.candidates[plans.candidates.size() / 2].time;
  for (double sigma : {0.01, 0.02, 0.04}) {
    const double t = expected_time(plans, freqs, Variability::uniform(4, sigma));
    EXPECT_GT(t, before) << sigma;
    before = t;
  }
  NoiseAwareOptions two;
  two.pipelines = 2;
  EXPECT_GT(expected_time(plans, freqs, Variability::uniform(4, 0.02), two),
            expected_time(plans, freqs, Variability::uniform(4, 0.02)));
  // Thousands of pipelines: drawn as many as the work bound allows, still slower than two.
  NoiseAwareOptions many;
  many.pipelines = 4096;
  many.max_work = 1 << 16;
  EXPECT_GT(expected_time(plans, freqs, Variability::uniform(4, 0.02), many),
            expected_time(plans, freqs, Variability::uniform(4, 0.02), two));
  // The same seed gives the same draws: a plan compares with itself exactly.
  EXPECT_EQ(expected_time(plans, freqs, Variability::uniform(4, 0.02)),
            expected_time(plans, freqs, Variability::uniform(4, 0.02)));
  EXPECT_THROW(expected_time(plans, {{1410}}, Variability::uniform(4, 0.02)), std::exception);
}

// The cheapest frontier point (by expected energy, blocking until the deadline) whose expected
// time meets the deadline, found by brute force.
std::optional<double> cheapest_frontier_total(const PlanningOutput& plans, double deadline, const Variability& v,
                                              const NoiseAwareOptions& options) {
  std::optional<double> best;
  for (const auto& clocks : frontier_clocks()) {
    const auto e = expected_time_and_energy(plans, clocks, v, options);
    if (e.time <= deadline) {
      const double t = total(plans, e.time, e.energy, deadline);
      if (!best || t < *best) best = t;
    }
  }
  return best;
}

TEST(ChoosePlanUnderNoise, MeetsTheDeadlineNoDearerThanAnyFrontierPoint) {
  const auto& plans = small_plans();
  for (double sigma : {0.0, 0.02, 0.04}) {
    const auto v = Variability::uniform(4, sigma);
    NoiseAwareOptions options;
    options.pipelines = 2;
    const double reference = expected_all_max_time(plans, v, options);
    for (double slowdown : {1.0, 1.05}) {
      const double deadline = slowdown * reference;
      const auto chosen = choose_plan_under_noise(plans, deadline, v, options);
      SCOPED_TRACE(::testing::Message() << "sigma " << sigma << " slowdown " << slowdown << ": " << chosen.label());
      EXPECT_LE(chosen.time, deadline);
      const auto again = expected_time_and_energy(plans, chosen.frequencies, v, options);
      EXPECT_DOUBLE_EQ(chosen.time, again.time);
      EXPECT_DOUBLE_EQ(chosen.energy, again.energy);
      // Something other than all-max meets it here (a frontier plan with some clocks raised, at
      // least), so all-max is not the answer.
      EXPECT_TRUE(chosen.point.has_value());
      const auto frontier = cheapest_frontier_total(plans, deadline, v, options);
      if (slowdown > 1) {
        ASSERT_TRUE(frontier.has_value());
      }
      if (frontier) {
        EXPECT_LE(total(plans, chosen.time, chosen.energy, deadline), *frontier + 1e-9);
      }
    }
  }
}

TEST(ChoosePlanUnderNoise, NoiseFreeMatchesTheNoiseFreeChoice) {
  const auto& plans = small_plans();
  const double deadline = 1.02 * plans.all_max().time;
  const auto chosen = choose_plan_under_noise(plans, deadline, Variability::uniform(4, 0));
  const auto plain = choose_plan(plans, deadline);
  EXPECT_LE(chosen.time, deadline);
  EXPECT_LE(total(plans, chosen.time, chosen.energy, deadline),
            total(plans, plain.time, plain.energy, deadline) + 1e-9);
}

TEST(ChoosePlanUnderNoise, TheNoiseFreeChoiceMissesWhatTheNoisyOneMeets) {
  const auto& plans = small_plans();
  const auto v = Variability::uniform(4, 0.03);
  NoiseAwareOptions options;
  options.pipelines = 2;
  const double deadline = expected_all_max_time(plans, v, options);
  const auto naive = choose_plan(plans, plans.all_max().time);
  EXPECT_GT(expected_time(plans, naive.frequencies, v, options), deadline);
  const auto chosen = choose_plan_under_noise(plans, deadline, v, options);
  EXPECT_LE(chosen.time, deadline);
  EXPECT_LT(chosen.energy, plans.all_max().energy);
}

// A clock latency slows every instruction whose clock rises over the one before it on its stage:
// at zero slowdown asked, frontier plans miss all-max's time by those latencies, and the choice
// removes changes on the critical path (the instruction before raised to its clock) instead of
// giving up the saving.
TEST(ChoosePlanUnderNoise, AClockLatencyMergesChangesRatherThanFallingBackToAllMax) {
  const auto& plans = small_plans();
  const auto v = Variability::uniform(4, 0.005);
  for (double latency : {0.002, 0.005}) {
    NoiseAwareOptions options;
    options.pipelines = 2;
    options.clock_latency = latency;
    const double deadline = expected_all_max_time(plans, v, options);
    const auto chosen = choose_plan_under_noise(plans, deadline, v, options);
    EXPECT_LE(chosen.time, deadline) << latency;
    const auto top = expected_time_and_energy(plans, all_max(plans).frequencies, v, options);
    EXPECT_LT(chosen.energy, 0.97 * top.energy) << latency;
  }
}

// Equal stages under 1F1B: the saving lies in the few instructions next to the warm-up's and cool-down's
// bubbles, and the changes back to the top clock before the critical instructions after them delay
// those by the latency, which no top clock wins back. Within all-max's own time (the noise is all but
// none) a plan keeps a small part of the saving; the allowance takes in that delay, within 0.15%.
TEST(ChooseWithinAllowance, AClockLatencyOnEqualStagesIsAllowedItsDelayRatherThanMostOfTheSaving) {
  SyntheticGpu gpu;
  gpu.num_stages = 3;
  gpu.embedding_extra = gpu.head_extra = 0;
  PlanningInput input;
  input.profile = parse_profile(synthetic_profile_csv(gpu), "synthetic.csv");
  input.config.num_stages = 3;
  input.config.num_microbatches = 9;
  input.config.unit_time = 0.001;
  input.config.p_block = 75;
  const PlanningOutput plans = plan_online(input);
  const auto v = Variability::uniform(3, 0.0003);
  NoiseAwareOptions at_once;
  at_once.pipelines = 2;
  NoiseAwareOptions late = at_once;
  late.clock_latency = 0.002;
  const auto top = expected_time_and_energy(plans, all_max(plans).frequencies, v, late);
  const auto saving = [&](const ChosenPlan& p) { return 1 - p.energy / top.energy; };
  const double ideal = saving(choose_within_allowance(plans, 1.0, v, at_once).plan);
  const double narrow = saving(choose_plan_under_noise(plans, deadline_for(plans, 1.0, v, late), v, late));
  const AllowedChoice chosen = choose_within_allowance(plans, 1.0, v, late);
  EXPECT_LT(narrow, 0.6 * ideal) << narrow << " of " << ideal;
  EXPECT_TRUE(chosen.widened);
  EXPECT_GT(saving(chosen.plan), 0.9 * ideal) << saving(chosen.plan) << " of " << ideal;
  EXPECT_LE(chosen.plan.time, top.time * 1.0015);
  EXPECT_LE(chosen.plan.time, chosen.deadline);
}

// A profile the turnkey loop measured (GPT-3 175B on A100s, 5 stages of the 8, 1.8% noise): under
// that noise its forwards and backwards read fastest a step or two below the top clock, not at the
// same clock. Under a clock latency neither may be pulled to the other's clock to merge a change (it
// would run slower there): a repair that did so went round in circles and the choice fell back to
// all-max, 11% more energy than a plan that meets the deadline.
TEST(ChoosePlanUnderNoise, KindsFastestAtDifferentClocksStillGetASavingPlanUnderALatency) {
  PlanningInput input;
  input.profile = read_profile(std::string(PERSEUS_SOURCE_DIR) + "/tests/data/gpt3-a100-measured-online.csv");
  input.config.num_stages = 5;
  input.config.num_microbatches = 15;
  input.config.unit_time = 0.00099;
  input.config.p_block = kA100BlockingPowerW;
  const PlanningOutput plans = plan_online(input);
  const auto v = Variability::uniform(5, 0.018);
  for (double latency : {0.001, 0.00188}) {
    NoiseAwareOptions options;
    options.pipelines = 2;
    options.clock_latency = latency;
    const double deadline = deadline_for(plans, 1.0, v, options);
    const auto chosen = choose_plan_under_noise(plans, deadline, v, options);
    EXPECT_LE(chosen.time, deadline) << latency;
    EXPECT_FALSE(chosen.is_all_max()) << latency;
    const auto top = expected_time_and_energy(plans, all_max(plans).frequencies, v, options);
    EXPECT_LT(chosen.energy, 0.95 * top.energy) << latency;
  }
}

// A straggler's own plan is chosen for its all-max time, which all-max meets exactly; a saving plan
// that ends as late (its critical path at the top clock, its times summed in another order) may come
// out a last bit later. Within rounding it meets the deadline, and all-max is not the answer.
TEST(ChoosePlanUnderNoise, APlanAsFastAsAllMaxMeetsAllMaxsTimeToWithinRounding) {
  const auto& plans = small_plans();
  const auto v = Variability::uniform(4, 0);
  const auto top = expected_time_and_energy(plans, all_max(plans).frequencies, v);
  const auto chosen = choose_plan_under_noise(plans, top.time * (1 - 1e-14), v);
  EXPECT_FALSE(chosen.is_all_max()) << chosen.label();
  EXPECT_LE(chosen.time, top.time * (1 + 1e-12));
  EXPECT_LT(chosen.energy, 0.99 * top.energy);
}

TEST(ChoosePlanUnderNoise, FastestPlanWhenNothingMeetsTheDeadline) {
  const auto& plans = small_plans();
  const auto v = Variability::uniform(4, 0.02);
  const auto chosen = choose_plan_under_noise(plans, 0.5 * plans.all_max().time, v);
  EXPECT_LE(chosen.time, expected_all_max_time(plans, v) + 1e-12);
}

TEST(StepUp, StrictlyFasterAndNotAllMaxWhileAFrontierPlanMeets) {
  const auto& plans = small_plans();
  const auto v = Variability::uniform(4, 0.02);
  NoiseAwareOptions options;
  options.pipelines = 2;
  options.step_margin = 0.01;
  const double reference = expected_all_max_time(plans, v, options);
  std::vector<double> frontier;  // expected times, the same draws as step_up's
  for (const auto& clocks : frontier_clocks()) frontier.push_back(expected_time(plans, clocks, v, options));
  ChosenPlan current = choose_plan_under_noise(plans, 1.06 * reference, v, options);
  int steps = 0;
  for (; current.point || current.fit_steps > 0; ++steps) {
    // The loop measured the plan 1% slower than predicted: the corrected deadline is 1% tighter.
    const double deadline = 1.06 * reference / 1.01;
    const double limit = std::min(deadline, current.time * (1 - options.step_margin));
    const bool frontier_meets = std::any_of(frontier.begin(), frontier.end(), [&](double t) { return t <= limit; });
    const auto next = step_up(plans, current, deadline, v, options);
    EXPECT_LT(next.time, current.time);
    if (frontier_meets) {
      EXPECT_TRUE(next.point || next.fit_steps > 0) << "stepped to all-max from " << current.label();
      EXPECT_LE(next.time, limit);
    }
    current = next;
    ASSERT_LT(steps, 20);
  }
  EXPECT_GT(steps, 1);  // it went through saving plans before all-max
}

// The shipped GPT-3 175B A100 profile planned for `schedule` over 8 stages.
PlanningOutput plan_gpt3(ScheduleKind schedule, int microbatches) {
  PlanningInput input;
  input.profile = read_profile(std::string(PERSEUS_SOURCE_DIR) + "/examples/gpt3-175b-a100.csv");
  input.config.num_stages = 8;
  input.config.num_microbatches = microbatches;
  input.config.schedule = schedule;
  input.config.p_block = kA100BlockingPowerW;
  input.config.unit_time = automatic_unit_time(input.profile);
  return plan_online(input);
}

// 1F1B, 12 microbatches.
const PlanningOutput& gpt3_plans() {
  static const PlanningOutput plans = plan_gpt3(ScheduleKind::one_f_one_b, 12);
  return plans;
}

// The measured GPT-3 175B A100 profile (8 stages, 12 microbatches, 2 pipelines) at sigma 0.02:
// the variability estimated from noisy all-max rounds, the plan chosen for zero slowdown, then
// judged with fresh draws against an all-max twin (bench/noise_choice.cpp over more cases).
TEST(ChoosePlanUnderNoise, Gpt3KeepsMostOfTheSavingUnderNoiseWithoutSlowdown) {
  const PlanningOutput& plans = gpt3_plans();
  const Emulator& emulator = *plans.emulator;
  const auto truth = Variability::uniform(8, 0.02);
  const auto top = all_max(plans).frequencies;

  VariabilityEstimator estimator(8);
  for (std::uint64_t round = 0; round < 4; ++round) {
    std::vector<std::vector<double>> sets(16);
    for (std::uint64_t it = 0; it < 10; ++it) {
      const auto run = emulator.run(top, emulator_noise(truth, 1000 + 10 * round + it));
      for (std::size_t s = 0; s < 8; ++s)
        for (const auto& unit : run.instructions[s])
          sets[2 * s + variability_index(unit.instruction.kind)].push_back(unit.duration);
    }
    for (int s = 0; s < 8; ++s) {
      estimator.add(s, InstructionKind::forward, sets[static_cast<std::size_t>(2 * s)]);
      estimator.add(s, InstructionKind::backward, sets[static_cast<std::size_t>(2 * s + 1)]);
    }
  }
  const auto v = estimator.estimate();
  EXPECT_NEAR(v.of(3, InstructionKind::backward), 0.02, 0.002);

  NoiseAwareOptions options;
  options.pipelines = 2;
  const auto chosen = choose_plan_under_noise(plans, deadline_for(plans, 1, v, options), v, options);
  ASSERT_TRUE(chosen.point.has_value()) << chosen.label();

  // Truth: 300 iterations of two pipelines, each iteration as long as the slower one.
  auto cluster = [&](const std::vector<std::vector<int>>& plan) {
    double time = 0, energy = 0;
    for (std::uint64_t it = 0; it < 300; ++it) {
      const auto a = emulator.run(plan, emulator_noise(truth, 5000 + 2 * it));
      const auto b = emulator.run(plan, emulator_noise(truth, 5001 + 2 * it));
      const double t = std::max(a.iteration_time, b.iteration_time);
      time += t;
      energy += a.energy + b.energy + 8 * kA100BlockingPowerW * (2 * t - a.iteration_time - b.iteration_time);
    }
    return std::pair{time, energy};
  };
  const auto [base_time, base_energy] = cluster(top);
  const auto [time, energy] = cluster(chosen.frequencies);
  const auto ideal = choose_plan(plans, plans.all_max().time);
  const double ideal_saving = 1 - ideal.energy / plans.all_max().energy;
  EXPECT_LE(time / base_time - 1, 0.005);
  EXPECT_GE(1 - energy / base_energy, 0.8 * ideal_saving);
  // The noise-free choice, for contrast, is measurably slower under the same draws.
  EXPECT_GT(cluster(ideal.frequencies).first / base_time - 1, 0.004);
}

// GPipe on GPT-3 175B's A100 profile: long rows of microbatches make every staircase path near-critical.
const PlanningOutput& gpipe_plans() {
  static const PlanningOutput plans = plan_gpt3(ScheduleKind::gpipe, 16);
  return plans;
}

// GPUs faster than the profile's (the profile measured next to a pipeline that ran slow then) save what
// the profile's GPUs save at the same slowdown: the plans are scaled, not held to the profile's times.
TEST(ChoosePlanUnderNoise, GpusFasterThanTheProfilesSaveAsMuchAtTheSameSlowdown) {
  const PlanningOutput& plans = gpt3_plans();
  const auto v = Variability::uniform(8, 0.003);
  constexpr double kSpeed = 0.95;
  NoiseAwareOptions unit, fast;
  unit.pipelines = 2;
  std::map<std::pair<int, InstructionKind>, double> speeds;
  for (int s = 0; s < 8; ++s)
    for (auto kind : {InstructionKind::forward, InstructionKind::backward}) speeds[{s, kind}] = kSpeed;
  fast.speeds = {speeds, speeds};
  constexpr double kSlowdown = 1.03;
  const auto on_unit = choose_plan_under_noise(plans, kSlowdown * expected_all_max_time(plans, v, unit), v, unit);
  const double deadline = kSlowdown * expected_all_max_time(plans, v, fast);
  const auto on_fast = choose_plan_under_noise(plans, deadline, v, fast);
  EXPECT_LE(on_fast.time, deadline);
  ASSERT_LT(on_unit.energy, plans.all_max().energy);
  EXPECT_LE(on_fast.energy, kSpeed * on_unit.energy * 1.002)
      << "unit " << on_unit.label() << ", fast " << on_fast.label();
}

TEST(ChooseWithinAllowance, WidensWhereTheNoiseCostsMuchOfTheSavingAndTheTimeBuysIt) {
  const PlanningOutput& plans = gpipe_plans();
  const auto v = Variability::uniform(8, 0.02);
  NoiseAwareOptions options;
  options.pipelines = 2;
  const AllowedChoice narrow = [&] {
    NoiseAwareOptions o = options;
    o.wide_allowance = o.allowance;  // never wider
    o.wide_max_allowance = o.max_allowance;
    return choose_within_allowance(plans, 1, v, o);
  }();
  EXPECT_FALSE(narrow.widened);
  EXPECT_DOUBLE_EQ(narrow.deadline, deadline_for(plans, 1, v, options));
  const auto top = expected_time_and_energy(plans, all_max(plans).frequencies, v, options);
  const double noise_free_saving = 1 - choose_plan(plans, plans.all_max().time).energy / plans.all_max().energy;
  ASSERT_LT(1 - narrow.plan.energy / top.energy, (1 - options.widen_at) * noise_free_saving);

  const AllowedChoice wide = choose_within_allowance(plans, 1, v, options);
  ASSERT_TRUE(wide.widened);
  EXPECT_LE(wide.plan.time, wide.deadline * (1 + 1e-12));
  EXPECT_LE(wide.deadline, top.time * (1 + options.wide_max_allowance) * (1 + 1e-12));
  EXPECT_NEAR(wide.allowance, wide.deadline / top.time - 1, 1e-12);
  EXPECT_GT(wide.deadline, narrow.deadline);
  const double further = (total(plans, narrow.plan.time, narrow.plan.energy, wide.deadline) -
                          total(plans, wide.plan.time, wide.plan.energy, wide.deadline)) /
                         total(plans, top.time, top.energy, wide.deadline);
  EXPECT_GE(further, options.wide_return * (wide.plan.time - narrow.plan.time) / top.time);
  EXPECT_GT(narrow.plan.energy - wide.plan.energy, 0.003 * top.energy);  // 0.46% of all-max's energy here

  // A return it cannot give keeps the narrow plan.
  options.wide_return = 1e6;
  const AllowedChoice kept = choose_within_allowance(plans, 1, v, options);
  EXPECT_FALSE(kept.widened);
  EXPECT_EQ(kept.plan.frequencies, narrow.plan.frequencies);
}

TEST(ChooseWithinAllowance, NeverWidensWithoutNoiseOrWhereTheNoiseCostsLittle) {
  const PlanningOutput& plans = gpipe_plans();
  const AllowedChoice quiet = choose_within_allowance(plans, 1, Variability::uniform(8, 0), {});
  EXPECT_FALSE(quiet.widened);
  EXPECT_EQ(quiet.plan.frequencies,
            choose_plan_under_noise(plans, plans.all_max().time, Variability::uniform(8, 0), {}).frequencies);
  // The small pipeline at a noise that costs it little of its saving.
  const auto& small = small_plans();
  const auto v = Variability::uniform(4, 0.002);
  const AllowedChoice calm = choose_within_allowance(small, 1, v, {});
  EXPECT_FALSE(calm.widened);
  EXPECT_EQ(calm.plan.frequencies, choose_plan_under_noise(small, deadline_for(small, 1, v, {}), v, {}).frequencies);
}

Profile one_stage_profile(double shortest) {
  std::string csv = "stage,instruction,frequency,time,energy\n";
  csv += fmt::format("0,forward,1410,{},20\n0,forward,1200,{},18\n", shortest, shortest * 1.1);
  csv += fmt::format("0,backward,1410,{},40\n0,backward,1200,{},36\n", 2 * shortest, 2.2 * shortest);
  return parse_profile(csv, "one-stage.csv");
}

TEST(AutomaticUnitTime, AFewPercentOfNoiseMovesItByAsMuch) {
  // 50 ms is where a fiftieth of the shortest instruction crosses a power of ten.
  for (double shortest : {0.05, 0.0050016, 0.5}) {
    const double unit = automatic_unit_time(one_stage_profile(shortest));
    for (double change : {0.97, 0.99, 1.01, 1.03}) {
      const double noisy = automatic_unit_time(one_stage_profile(shortest * change));
      EXPECT_LT(std::max(noisy, unit) / std::min(noisy, unit), 1.06) << shortest << " x " << change;
      // With the unit planned before, a re-measured profile keeps it exactly.
      EXPECT_EQ(automatic_unit_time(one_stage_profile(shortest * change), unit), unit);
    }
  }
  EXPECT_DOUBLE_EQ(automatic_unit_time(one_stage_profile(0.05016)), 0.001);
  EXPECT_DOUBLE_EQ(automatic_unit_time(one_stage_profile(0.1125)), 0.0022);
  EXPECT_LE(automatic_unit_time(one_stage_profile(0.0499)), 0.0499 / 50);
  EXPECT_GE(automatic_unit_time(one_stage_profile(0.0499)), 0.0499 / 50 * 0.9);
  // Far from what was planned before: the rule again.
  EXPECT_DOUBLE_EQ(automatic_unit_time(one_stage_profile(0.05016), 0.0001), 0.001);
  EXPECT_DOUBLE_EQ(automatic_unit_time(one_stage_profile(1e-7)), 1e-6);
  EXPECT_DOUBLE_EQ(automatic_unit_time(one_stage_profile(500)), 1.0);
}

}  // namespace
}  // namespace perseus::online
