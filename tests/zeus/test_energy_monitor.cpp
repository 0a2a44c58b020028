// Zeus's energy monitor on a simulated node: GPUs that draw exactly their power limit, in
// simulated time.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

#include "perseus/zeus/energy_monitor.hpp"

namespace perseus::zeus {
namespace {

// Two GPUs with power limits 150..300 W (300 W at start) that draw their limit.
class SimulatedGpus final : public gpu::GpuLibrary {
 public:
  double now = 0;  // seconds, advanced by the test
  bool has_counter = true;

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
    advance();
    limit_mw[d] = mw;
  }
  std::uint64_t total_energy_mj(unsigned d) override {
    if (!has_counter) throw gpu::GpuError(gpu::GpuErrorKind::not_supported, "no energy counter");
    advance();
    return static_cast<std::uint64_t>(std::llround(energy_mj[d]));
  }
  unsigned power_usage_mw(unsigned d) override { return limit_mw[d]; }

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
    monitor = std::make_unique<EnergyMonitor>(
        gpus, std::vector<unsigned>{}, [g = gpus.get()] { return g->now; }, 0.0);
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

}  // namespace
}  // namespace perseus::zeus
