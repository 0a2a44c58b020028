// The training-side client on AMD SMI, chosen the one way a process chooses its GPU library
// ($PERSEUS_GPU_LIBRARY): the client's code is the same; the schedule's clocks reach the GPU and
// what it measures comes from AMD SMI's energy counter.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "perseus/client/client.hpp"
#include "perseus/gpu/backends.hpp"
#include "perseus/util/atomic_file.hpp"
#include "server_fixture.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;

struct ClientOnAmdSmiTest : ServerDirTest {
  void SetUp() override {
    ServerDirTest::SetUp();
    ::setenv(gpu::kGpuLibraryEnv, "amdsmi", 1);
  }
  void TearDown() override {
    ::unsetenv(gpu::kGpuLibraryEnv);
    ServerDirTest::TearDown();
  }
};

TEST_F(ClientOnAmdSmiTest, EachInstructionRunsAtItsScheduledClockAndIsMeasured) {
  TestServer server(settings("TwoFrequencies", {{"forward_freq", 1200}, {"backward_freq", 1005}}));
  auto amd = gpu::load_gpu_library("amdsmi", PERSEUS_FAKE_AMDSMI);  // the same simulated GPU, to watch it
  {
    client::ClientOptions o;
    o.server_url = server.url;
    o.num_microbatches = 1;
    o.report_every = 2;
    o.fail_open = false;
    o.nvml_library = PERSEUS_FAKE_AMDSMI;  // the file of the backend $PERSEUS_GPU_LIBRARY names
    client::Client c(o);
    for (int step = 0; step < 2; ++step) {
      c.on_step_begin();
      for (const auto& name : c.pipe_schedule()) {
        c.on_instruction_begin(name);
        c.flush();
        EXPECT_EQ(amd->current_graphics_clock(0), name == "forward" ? 1200u : 1005u) << name;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        c.on_instruction_end(name);
      }
      c.on_step_end();
    }
    EXPECT_EQ(c.round(), 1);
  }
  EXPECT_EQ(amd->current_graphics_clock(0), 1410u) << "clocks are reset when the client goes away";
  ASSERT_TRUE(server.jobs->flush_records(std::chrono::seconds(10)));
  fs::path prof;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.path().filename() == "0.prof.json") prof = entry.path();
  ASSERT_FALSE(prof.empty());
  auto result = nlohmann::json::parse(read_file(prof))[0];
  double forward_time = result["time_breakdown"]["forward"][1][0].get<double>();
  double forward_energy = result["energy_breakdown"]["forward"][1][0].get<double>();
  EXPECT_GE(forward_time, 0.004);
  EXPECT_GT(forward_energy, 0.0);
  EXPECT_LT(forward_energy / forward_time, 300.0 * 1.5);  // below the fake's top power, with rounding slack
}

}  // namespace
}  // namespace perseus::testing
