// The NVML layer against the project's fake NVML: clocks, locking, energy, and the errors for
// a missing library, a refused call and an unsupported clock.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <thread>
#include <utility>

#include "perseus/gpu/backends.hpp"
#include "perseus/gpu/gpu.hpp"

namespace perseus::gpu {
namespace {

TEST(Gpu, FakeNvmlListsClocksAndLocks) {
  auto nvml = load_nvml(PERSEUS_FAKE_NVML);
  ASSERT_EQ(nvml->device_count(), 1u);
  EXPECT_EQ(nvml->name(0), "Perseus Simulated GPU");
  auto memory = nvml->supported_memory_clocks(0);
  ASSERT_EQ(memory.front(), 1593u);
  auto clocks = nvml->supported_graphics_clocks(0, memory.front());
  ASSERT_EQ(clocks.size(), 81u);
  EXPECT_EQ(clocks.front(), 1410u);
  EXPECT_EQ(clocks.back(), 210u);
  EXPECT_EQ(nvml->current_graphics_clock(0), 1410u);
  unsigned top_power = nvml->power_usage_mw(0);
  nvml->lock_graphics_clock(0, 1005, 1005);
  EXPECT_EQ(nvml->current_graphics_clock(0), 1005u);
  EXPECT_LT(nvml->power_usage_mw(0), top_power);
  nvml->reset_graphics_clock(0);
  EXPECT_EQ(nvml->current_graphics_clock(0), 1410u);
}

// A power limit caps the SM clock at the highest clock whose power (60 W + 240 W x (f/1410)^3)
// fits, so time and energy respond to limits as on a real GPU.
TEST(Gpu, FakePowerLimitCapsTheClock) {
  auto nvml = load_nvml(PERSEUS_FAKE_NVML);
  auto range = nvml->power_limit_range(0);
  EXPECT_EQ(range.max_mw, 400000u);
  EXPECT_EQ(range.min_mw, 150000u);
  nvml->set_power_limit_mw(0, 300000);
  EXPECT_EQ(nvml->current_graphics_clock(0), 1410u) << "300 W is the top clock's power";
  nvml->set_power_limit_mw(0, 275000);  // 240 (f/1410)^3 <= 215 -> f <= 1359.4 -> 1350
  EXPECT_EQ(nvml->current_graphics_clock(0), 1350u);
  EXPECT_LE(nvml->power_usage_mw(0), 275000u);
  nvml->lock_graphics_clock(0, 1005, 1005);
  EXPECT_EQ(nvml->current_graphics_clock(0), 1005u) << "a lower lock stays below the cap";
  nvml->set_power_limit_mw(0, 150000);  // 240 (f/1410)^3 <= 90 -> f <= 1017.5 -> 1005 still fits
  EXPECT_EQ(nvml->current_graphics_clock(0), 1005u);
  nvml->reset_graphics_clock(0);
  EXPECT_EQ(nvml->current_graphics_clock(0), 1005u) << "unlocked, the 150 W cap holds it";
  nvml->set_power_limit_mw(0, range.max_mw);
  EXPECT_EQ(nvml->current_graphics_clock(0), 1410u);
}

TEST(Gpu, EnergyCounterFollowsThePowerModel) {
  auto nvml = load_nvml(PERSEUS_FAKE_NVML);
  auto before = nvml->total_energy_mj(0);
  double watts = nvml->power_usage_mw(0) / 1000.0;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  double joules = (nvml->total_energy_mj(0) - before) / 1000.0;
  EXPECT_GT(joules, watts * 0.09);
  EXPECT_LT(joules, watts * 0.5);  // generous: a loaded CI machine may oversleep
}

TEST(Gpu, ALibraryWithoutAFunctionIsNamedWithTheFunction) {
  // Libraries that load and lack the first function asked for (the fake AMD SMI shares the fake NVML's state).
  const std::pair<const char*, const char*> cases[] = {{"nvml", "libm.so.6"}, {"amdsmi", PERSEUS_FAKE_NVML}};
  for (const auto& [backend, path] : cases) {
    try {
      load_gpu_library(backend, path);
      FAIL() << backend;
    } catch (const GpuError& e) {
      EXPECT_EQ(e.kind(), GpuErrorKind::library_missing);
      EXPECT_NE(std::string(e.what()).find(std::string(path) + " does not export "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(backend == std::string("nvml") ? "driver is too old" : "ROCm 6.1"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Gpu, ErrorsSayWhatWentWrong) {
  try {
    load_nvml("/no/such/libnvidia-ml.so.1");
    FAIL();
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), GpuErrorKind::library_missing);
    EXPECT_NE(std::string(e.what()).find("/no/such/libnvidia-ml.so.1"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("PERSEUS_NVML_LIBRARY"), std::string::npos);
  }
  auto nvml = load_nvml(PERSEUS_FAKE_NVML);
  try {
    nvml->lock_graphics_clock(0, 1207, 1207);
    FAIL();
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), GpuErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("nvmlDeviceSetGpuLockedClocks on GPU 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nvml->name(3), GpuError);
}

TEST(Gpu, RefusedLockingNamesThePermission) {
  ::setenv("PERSEUS_FAKE_NVML_DENY", "1", 1);
  {
    auto nvml = load_nvml(PERSEUS_FAKE_NVML);  // the fake reads its settings at nvmlInit
    try {
      nvml->lock_graphics_clock(0, 1410, 1410);
      FAIL();
    } catch (const GpuError& e) {
      EXPECT_EQ(e.kind(), GpuErrorKind::no_permission);
      EXPECT_NE(std::string(e.what()).find("CAP_SYS_ADMIN"), std::string::npos);
    }
    EXPECT_EQ(nvml->current_graphics_clock(0), 1410u);  // reading still works
  }
  ::unsetenv("PERSEUS_FAKE_NVML_DENY");
}

// What a simulation of a GPU (examples/pytorch_pipelining) sets: a constant floor power whatever the
// clock, and the energy its model says each computation used on top, through a call beyond NVML's.
TEST(Gpu, FakeNvmlTakesASimulationsPowerAndEnergy) {
  ::setenv("PERSEUS_FAKE_NVML_POWER_W", "75", 1);
  {
    auto nvml = load_nvml(PERSEUS_FAKE_NVML);  // the fake reads its settings at nvmlInit
    EXPECT_EQ(nvml->power_usage_mw(0), 75000u);
    nvml->lock_graphics_clock(0, 705, 705);
    EXPECT_EQ(nvml->power_usage_mw(0), 75000u) << "the floor does not depend on the clock";
    void* library = ::dlopen(PERSEUS_FAKE_NVML, RTLD_NOW);  // the same instance load_nvml opened
    ASSERT_NE(library, nullptr);
    using AddEnergy = int (*)(unsigned, double);
    auto add = reinterpret_cast<AddEnergy>(::dlsym(library, "perseusFakeNvmlAddEnergy"));
    ASSERT_NE(add, nullptr);
    auto before = nvml->total_energy_mj(0);
    EXPECT_EQ(add(0, 2.5), 0);
    EXPECT_GE(nvml->total_energy_mj(0) - before, 2500u);
    EXPECT_LT(nvml->total_energy_mj(0) - before, 2500u + 75u * 1000u) << "2.5 J and at most a second at 75 W";
    EXPECT_NE(add(1, 1.0), 0) << "no GPU 1";
    EXPECT_NE(add(0, -1.0), 0) << "energy is never taken away";
    nvml->reset_graphics_clock(0);
    ::dlclose(library);
  }
  ::unsetenv("PERSEUS_FAKE_NVML_POWER_W");
}

}  // namespace
}  // namespace perseus::gpu
