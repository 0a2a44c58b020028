// Zeus's energy monitor and GlobalPowerLimitOptimizer on a simulated node: GPUs that draw exactly
// their power limit, steps that take longer at lower limits, all in simulated time.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "perseus/util/atomic_file.hpp"
#include "perseus/util/error.hpp"
#include "perseus/zeus/power_limit_optimizer.hpp"

namespace perseus::zeus {
namespace {

// Two GPUs with power limits 150..300 W (300 W at start) that draw their limit.
class SimulatedGpus final : public gpu::GpuLibrary {
 public:
  double now = 0;                 // seconds, advanced by the test
  bool has_counter = true, refuse_limits = false;
  std::vector<unsigned> limits_set;  // every set_power_limit_mw, device 0

  unsigned device_count() override { return 2; }
  std::string name(unsigned) override { return "simulated"; }
  std::vector<unsigned> supported_memory_clocks(unsigned) override { return {1593}; }
  std::vector<unsigned> supported_graphics_clocks(unsigned, unsigned) override { return {1410}; }
  unsigned current_graphics_clock(unsigned) override { return 1410; }
  unsigned current_memory_clock(unsigned) override { return 1593; }
  void lock_graphics_clock(unsigned, unsigned, unsigned) override {}
  void reset_graphics_clock(unsigned) override {}
  void lock_memory_clock(unsigned, unsigned, unsigned) override {}
  void reset_memory_clock(unsigned) override {}
  unsigned power_limit_mw(unsigned d) override { return limit_mw[d]; }
  gpu::PowerLimitRange power_limit_range(unsigned) override { return {150000, 300000}; }
  void set_power_limit_mw(unsigned d, unsigned mw) override {
    if (refuse_limits) throw gpu::GpuError(gpu::GpuErrorKind::no_permission, "Insufficient permissions");
    advance();
    limit_mw[d] = mw;
    if (d == 0) limits_set.push_back(mw / 1000);
  }
  std::uint64_t total_energy_mj(unsigned d) override {
    if (!has_counter) throw gpu::GpuError(gpu::GpuErrorKind::not_supported, "no energy counter");
    advance();
    return static_cast<std::uint64_t>(std::llround(energy_mj[d]));
  }
  unsigned power_usage_mw(unsigned d) override { return limit_mw[d]; }

  // A training step at the current limit: 1 s at 300 W, sqrt(300 / limit) s below.
  void step() { now += std::sqrt(300000.0 / limit_mw[0]); }

 private:
  void advance() {
    for (int d = 0; d < 2; ++d) energy_mj[d] += limit_mw[d] * (now - last);
    last = now;
  }
  unsigned limit_mw[2] = {300000, 300000};
  double energy_mj[2] = {0, 0};
  double last = 0;
};

struct Node {
  std::shared_ptr<SimulatedGpus> gpus = std::make_shared<SimulatedGpus>();
  std::unique_ptr<EnergyMonitor> monitor;
  explicit Node(bool counter = true) {
    gpus->has_counter = counter;
    monitor = std::make_unique<EnergyMonitor>(gpus, std::vector<unsigned>{}, [g = gpus.get()] { return g->now; }, 0.0);
  }
};

TEST(EnergyMonitor, NestedAndOverlappingWindowsPerGpu) {
  Node node;
  node.monitor->begin_window("epoch");
  node.gpus->now = 2;
  node.monitor->begin_window("step");
  node.gpus->now = 3;
  node.monitor->begin_window("overlap");
  node.gpus->now = 5;
  auto step = node.monitor->end_window("step");
  node.gpus->now = 6;
  auto overlap = node.monitor->end_window("overlap");
  auto epoch = node.monitor->end_window("epoch");
  EXPECT_DOUBLE_EQ(step.time, 3.0);
  EXPECT_DOUBLE_EQ(step.gpu_energy.at(0), 900.0);  // 300 W for 3 s
  EXPECT_DOUBLE_EQ(step.total_energy, 1800.0);
  EXPECT_DOUBLE_EQ(overlap.time, 3.0);
  EXPECT_DOUBLE_EQ(epoch.time, 6.0);
  EXPECT_DOUBLE_EQ(epoch.gpu_energy.at(1), 1800.0);
  EXPECT_THROW(node.monitor->end_window("epoch"), std::invalid_argument);
  node.monitor->begin_window("x");
  EXPECT_THROW(node.monitor->begin_window("x"), std::invalid_argument);
  EXPECT_DOUBLE_EQ(node.monitor->end_window("x", true).total_energy, 0.0) << "cancelled";
  EXPECT_THROW(EnergyMonitor(node.gpus, {2}), std::invalid_argument);
}

TEST(EnergyMonitor, WithoutAnEnergyCounterPowerIsIntegrated) {
  Node node(false);
  EXPECT_TRUE(node.monitor->integrates_power(0));
  node.monitor->begin_window("w");
  node.gpus->now = 4;
  node.gpus->set_power_limit_mw(0, 200000);
  node.monitor->begin_window("sample");  // a reading, as the background sampler takes them
  node.gpus->now = 6;
  auto m = node.monitor->end_window("w");
  EXPECT_DOUBLE_EQ(m.gpu_energy.at(0), 300.0 * 4 + 200.0 * 2);
  EXPECT_DOUBLE_EQ(m.gpu_energy.at(1), 300.0 * 6);
}

struct Row {
  int step;  // on_step_begin calls so far
  PowerLimitState state;
  int limit;
};

// wait 1, warm-up 2, profile 3, limits 300/250/200/150 W: the seed's state machine, step by step.
TEST(GlobalPowerLimitOptimizer, WalksTheStateMachineAndKeepsTheSelectedLimit) {
  Node node;
  auto path = std::filesystem::temp_directory_path() / ("perseus-plo-" + std::to_string(::getpid()) + ".json");
  std::filesystem::remove(path);
  PowerLimitOptimizerOptions options;
  options.selector = std::make_shared<MaxSlowdownConstraintSelector>(1.2);
  options.warmup_steps = 2;
  options.profile_steps = 3;
  options.pl_step = 50;
  options.profile_path = path.string();
  std::vector<PowerLimitMeasurement> measured;
  {
    GlobalPowerLimitOptimizer plo(*node.monitor, options);
    EXPECT_EQ(plo.power_limits(), (std::vector<int>{300, 250, 200, 150}));
    using S = PowerLimitState;
    const std::vector<Row> rows = {
        {1, S::ready, 300},     {2, S::warmup, 300},     {3, S::warmup, 300},     {4, S::profiling, 300},
        {6, S::profiling, 300}, {7, S::warmup, 250},     {9, S::profiling, 250},  {12, S::warmup, 200},
        {17, S::warmup, 150},   {19, S::profiling, 150}, {21, S::profiling, 150}, {22, S::done, 250},
        {30, S::done, 250},
    };
    int steps = 0;
    for (const auto& row : rows) {
      while (steps < row.step) {
        plo.on_step_begin();
        node.gpus->step();
        plo.on_step_end();
        ++steps;
      }
      EXPECT_EQ(plo.state(), row.state) << "after step " << row.step;
      EXPECT_EQ(plo.current_power_limit(), row.limit) << "after step " << row.step;
    }
    measured = plo.measurements();
    ASSERT_EQ(measured.size(), 4u);
    EXPECT_EQ(measured[1].power_limit, 250);
    EXPECT_NEAR(measured[1].time, 3 * std::sqrt(300.0 / 250), 1e-9) << "three profiled steps";
    EXPECT_NEAR(measured[1].energy, 2 * 250 * measured[1].time, 0.01) << "both GPUs (the counter counts whole mJ)";
    EXPECT_EQ(plo.optimal_power_limit(), 250) << "200 W is 1.22x slower than 300 W";
  }
  EXPECT_EQ(node.gpus->limits_set, (std::vector<unsigned>{300, 250, 200, 150, 250, 300})) << "the maximum restored at the end";

  // The saved profile (Zeus's format) skips profiling next time.
  auto saved = read_power_limit_profile(path.string());
  EXPECT_EQ(saved, measured);
  EXPECT_NE(read_file(path).find("\"measurements\""), std::string::npos);
  Node again;
  GlobalPowerLimitOptimizer loaded(*again.monitor, options);
  EXPECT_EQ(loaded.state(), PowerLimitState::done);
  EXPECT_EQ(loaded.current_power_limit(), 250);
  std::filesystem::remove(path);
}

// No waiting; warm-up, profiling and the step between limits as given.
PowerLimitOptimizerOptions steps(int warmup, int profile, int pl_step) {
  PowerLimitOptimizerOptions options;
  options.wait_steps = 0;
  options.warmup_steps = warmup;
  options.profile_steps = profile;
  options.pl_step = pl_step;
  return options;
}

TEST(GlobalPowerLimitOptimizer, AnEpochEndStartsTheLimitOverAtTheMaximum) {
  Node node;
  GlobalPowerLimitOptimizer plo(*node.monitor, steps(1, 4, 100));  // 300, 200 W
  for (int i = 0; i < 3; ++i) plo.on_step_begin();  // ready -> warmup -> profiling 300 -> (1 step in)
  ASSERT_EQ(plo.state(), PowerLimitState::profiling);
  plo.on_epoch_end();
  EXPECT_EQ(plo.state(), PowerLimitState::ready);
  EXPECT_EQ(plo.current_power_limit(), 300);
  EXPECT_TRUE(plo.measurements().empty()) << "the interrupted window is dropped";
  for (int i = 0; i < 6; ++i) plo.on_step_begin();  // 300 W again, now to the end
  EXPECT_EQ(plo.measurements().size(), 1u);
  EXPECT_EQ(plo.state(), PowerLimitState::warmup);
  EXPECT_EQ(plo.current_power_limit(), 200);
}

TEST(GlobalPowerLimitOptimizer, LimitsNeverGoBelowTheMinimumAndBadOptionsAreRefused) {
  Node node;
  PowerLimitOptimizerOptions options;
  options.pl_step = 40;  // 300, 260, 220, 180 — not 140
  GlobalPowerLimitOptimizer plo(*node.monitor, options);
  EXPECT_EQ(plo.power_limits(), (std::vector<int>{300, 260, 220, 180}));
  auto with = [](auto change) {
    PowerLimitOptimizerOptions o;
    change(o);
    return o;
  };
  for (const auto& bad : {with([](auto& o) { o.wait_steps = -1; }), with([](auto& o) { o.warmup_steps = -1; }),
                          with([](auto& o) { o.profile_steps = 0; }), with([](auto& o) { o.pl_step = 0; })})
    EXPECT_THROW(GlobalPowerLimitOptimizer(*node.monitor, bad), std::invalid_argument);
}

TEST(GlobalPowerLimitOptimizer, AGpuThatRefusesLimitsNeverStopsTraining) {
  Node node;
  node.gpus->refuse_limits = true;
  GlobalPowerLimitOptimizer plo(*node.monitor);
  EXPECT_FALSE(plo.enabled());
  for (int i = 0; i < 100; ++i) plo.on_step_begin();
  plo.on_epoch_end();
  EXPECT_TRUE(node.gpus->limits_set.empty());
  PowerLimitOptimizerOptions strict;
  strict.fail_open = false;
  EXPECT_THROW(GlobalPowerLimitOptimizer(*node.monitor, strict), gpu::GpuError);
}

TEST(GlobalPowerLimitOptimizer, DataParallelMeasurementsAreCombined) {
  Node node;
  PowerLimitOptimizerOptions options = steps(0, 1, 150);  // 300, 150 W
  options.selector = std::make_shared<EnergySelector>();
  options.combine = [](double& energy, double& time) {  // as if a second rank measured twice the time and energy
    energy *= 2;
    time *= 2;
  };
  GlobalPowerLimitOptimizer plo(*node.monitor, options);
  for (int i = 0; i < 3; ++i) {
    plo.on_step_begin();
    node.gpus->step();
  }
  ASSERT_EQ(plo.measurements().size(), 2u);
  EXPECT_NEAR(plo.measurements()[0].time, 2.0, 1e-9);
  EXPECT_NEAR(plo.measurements()[0].energy, 2 * 600.0, 1e-3);
  EXPECT_EQ(plo.optimal_power_limit(), 150);
}

TEST(OptimumSelectors, ChooseAsZeusDoes) {
  const std::vector<PowerLimitMeasurement> m = {{300, 1000, 10.0}, {250, 900, 10.5}, {200, 850, 12.0}, {150, 870, 15.0}};
  EXPECT_EQ(EnergySelector().select(m), 200);
  EXPECT_EQ(TimeSelector().select(m), 300);
  // eta 0.5, MaxPower 300: 500+1500=2000, 450+1575=2025, 425+1800, 435+2250
  EXPECT_EQ(ZeusCostSelector(0.5).select(m), 300);
  EXPECT_EQ(ZeusCostSelector(1.0).select(m), 200);
  // eta 0.9, MaxPower 300 x 4 = 1200: 900+1200=2100, 810+1260=2070, 765+1440=2205, 783+1800=2583
  EXPECT_EQ(ZeusCostSelector(0.9, 4).select(m), 250);
  EXPECT_EQ(ZeusCostSelector(0.9, 1).select(m), 250) << "1200, 1125, 1125, 1233: a tie goes to the first listed, as Python's min";
  EXPECT_EQ(ZeusCostSelector(0.99, 1).select(m), 200);
  EXPECT_EQ(MaxSlowdownConstraintSelector(1.1).select(m), 250);
  EXPECT_EQ(MaxSlowdownConstraintSelector(1.5).select(m), 150);
  EXPECT_EQ(MaxSlowdownConstraintSelector(1.0).select(m), 300);
  EXPECT_THROW(ZeusCostSelector(1.5), std::invalid_argument);
  EXPECT_THROW(ZeusCostSelector(0.5, 0), std::invalid_argument);
  EXPECT_THROW(MaxSlowdownConstraintSelector(0.9), std::invalid_argument);
}

TEST(PowerLimitProfile, BadFilesAreErrorsNamingTheField) {
  auto path = std::filesystem::temp_directory_path() / ("perseus-plo-bad-" + std::to_string(::getpid()) + ".json");
  write_file_atomic(path, R"({"measurements": [{"power_limit": 300, "energy": "lots", "time": 1}]})");
  try {
    read_power_limit_profile(path.string());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("measurements[0]"), std::string::npos) << e.what();
  }
  write_file_atomic(path, "{\"measure");
  EXPECT_THROW(read_power_limit_profile(path.string()), InputError);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace perseus::zeus
