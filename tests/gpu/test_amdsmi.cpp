// The AMD SMI backend against the project's fake AMD SMI (the fake NVML's simulated GPU shown the
// way AMD SMI shows an Instinct GPU), and the registry that chooses a backend.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "perseus/gpu/backends.hpp"

namespace perseus::gpu {
namespace {

// Sets an environment variable for one scope, putting back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::unique_ptr<GpuLibrary> fake_amd() { return load_gpu_library("amdsmi", PERSEUS_FAKE_AMDSMI); }

TEST(AmdSmi, ListsClocksAndLocksThroughClockRanges) {
  auto amd = fake_amd();
  ASSERT_EQ(amd->device_count(), 1u);
  EXPECT_EQ(amd->name(0), "Perseus Simulated GPU");
  EXPECT_EQ(amd->uuid(0).rfind("GPU-", 0), 0u);
  EXPECT_EQ(amd->supported_memory_clocks(0), (std::vector<unsigned>{1593, 1215}));
  auto clocks = amd->supported_graphics_clocks(0, 1593);
  ASSERT_EQ(clocks.size(), 81u) << "the range 210 .. 1410 MHz in 15 MHz steps";
  EXPECT_EQ(clocks.front(), 1410u);
  EXPECT_EQ(clocks.back(), 210u);
  EXPECT_EQ(amd->current_graphics_clock(0), 1410u);
  unsigned top_power = amd->power_usage_mw(0);
  amd->lock_graphics_clock(0, 1005, 1005);
  EXPECT_EQ(amd->current_graphics_clock(0), 1005u);
  EXPECT_LT(amd->power_usage_mw(0), top_power);
  amd->lock_memory_clock(0, 1215, 1215);
  EXPECT_EQ(amd->current_memory_clock(0), 1215u);
  amd->reset_graphics_clock(0);
  amd->reset_memory_clock(0);
  EXPECT_EQ(amd->current_graphics_clock(0), 1410u);
  EXPECT_EQ(amd->current_memory_clock(0), 1593u);
  EXPECT_EQ(amd->supported_graphics_clocks(0, 1593), clocks) << "the range found at open, not the locked one";
}

TEST(AmdSmi, PowerCapsInMicrowattsBecomeMilliwatts) {
  auto amd = fake_amd();
  auto range = amd->power_limit_range(0);
  EXPECT_EQ(range.min_mw, 150000u);
  EXPECT_EQ(range.max_mw, 400000u);
  amd->set_power_limit_mw(0, 275000);
  EXPECT_EQ(amd->power_limit_mw(0), 275000u);
  EXPECT_EQ(amd->current_graphics_clock(0), 1350u) << "the simulated GPU's cap holds the clock";
  try {
    amd->set_power_limit_mw(0, 100000);
    FAIL();
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), GpuErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("amdsmi_set_power_cap on GPU 0"), std::string::npos) << e.what();
  }
  amd->set_power_limit_mw(0, range.max_mw);
  EXPECT_EQ(amd->power_limit_mw(0), 400000u);
}

// The counter counts in units of 15.259 µJ; the backend gives mJ, as NVML does.
TEST(AmdSmi, EnergyCounterTimesItsResolution) {
  ScopedEnv power("PERSEUS_FAKE_NVML_POWER_W", "80");
  auto amd = fake_amd();
  EXPECT_EQ(amd->power_usage_mw(0), 80000u);
  auto before = amd->total_energy_mj(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  double joules = static_cast<double>(amd->total_energy_mj(0) - before) / 1000.0;
  EXPECT_GT(joules, 80 * 0.09);
  EXPECT_LT(joules, 80 * 0.5);  // generous: a loaded CI machine may oversleep
}

// MI200 and earlier report only the average socket power.
TEST(AmdSmi, PowerFromTheAverageWhereNoCurrentReading) {
  ScopedEnv power("PERSEUS_FAKE_NVML_POWER_W", "123");
  ScopedEnv average("PERSEUS_FAKE_AMDSMI_POWER", "average");
  EXPECT_EQ(fake_amd()->power_usage_mw(0), 123000u);
}

TEST(AmdSmi, ErrorsSayWhatWentWrong) {
  try {
    load_gpu_library("amdsmi", "/no/such/libamd_smi.so");
    FAIL();
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), GpuErrorKind::library_missing);
    EXPECT_NE(std::string(e.what()).find("PERSEUS_AMDSMI_LIBRARY"), std::string::npos) << e.what();
  }
  auto amd = fake_amd();
  try {
    amd->lock_graphics_clock(0, 1207, 1207);
    FAIL();
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), GpuErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("amdsmi_set_gpu_clk_range on GPU 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(amd->name(3), GpuError);
}

TEST(AmdSmi, RefusedLockingNamesThePermission) {
  ScopedEnv deny("PERSEUS_FAKE_NVML_DENY", "1");
  auto amd = fake_amd();  // the fake reads its settings at amdsmi_init
  try {
    amd->lock_graphics_clock(0, 1410, 1410);
    FAIL();
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), GpuErrorKind::no_permission);
    EXPECT_NE(std::string(e.what()).find("needs root"), std::string::npos) << e.what();
  }
  EXPECT_EQ(amd->current_graphics_clock(0), 1410u);  // reading still works
}

TEST(GpuBackends, ChosenByNameOrEnvironment) {
  {
    ScopedEnv choice("PERSEUS_GPU_LIBRARY", nullptr);
    EXPECT_STREQ(gpu_backend("")->name, "nvml") << "NVML unless told otherwise";
    EXPECT_STREQ(gpu_backend("amdsmi")->name, "amdsmi");
    EXPECT_EQ(gpu_backend("auto"), nullptr);
  }
  {
    ScopedEnv choice("PERSEUS_GPU_LIBRARY", "amdsmi");
    ScopedEnv file("PERSEUS_AMDSMI_LIBRARY", PERSEUS_FAKE_AMDSMI);
    EXPECT_EQ(describe_gpu_library(), std::string("AMD SMI: ") + PERSEUS_FAKE_AMDSMI);
    EXPECT_EQ(load_gpu_library()->supported_graphics_clocks(0, 1593).size(), 81u);
    EXPECT_STREQ(gpu_backend("nvml")->name, "nvml") << "a name given wins over the variable";
  }
  {
    ScopedEnv choice("PERSEUS_GPU_LIBRARY", "rocm");
    try {
      gpu_backend("");
      FAIL();
    } catch (const GpuError& e) {
      EXPECT_EQ(e.kind(), GpuErrorKind::invalid_argument);
      EXPECT_EQ(std::string(e.what()), "GPU library 'rocm' ($PERSEUS_GPU_LIBRARY): expected one of nvml, amdsmi, auto");
    }
  }
}

TEST(GpuBackends, AutoTakesTheFirstLibraryThatListsAGpu) {
  ScopedEnv nvml("PERSEUS_NVML_LIBRARY", "/no/such/libnvidia-ml.so.1");
  ScopedEnv amd("PERSEUS_AMDSMI_LIBRARY", PERSEUS_FAKE_AMDSMI);
  auto library = load_gpu_library("auto");
  EXPECT_EQ(library->power_limit_range(0).max_mw, 400000u);
  EXPECT_THROW(load_gpu_library("auto", PERSEUS_FAKE_AMDSMI), GpuError) << "a file belongs to one backend";
  ScopedEnv none("PERSEUS_AMDSMI_LIBRARY", "/no/such/libamd_smi.so");
  try {
    load_gpu_library("auto");
    FAIL();
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), GpuErrorKind::library_missing);
    EXPECT_NE(std::string(e.what()).find("/no/such/libnvidia-ml.so.1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/no/such/libamd_smi.so"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace perseus::gpu
