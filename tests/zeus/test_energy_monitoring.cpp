// CUDA's device numbering at every entry point (monitor, power limits, client, gpud) on a
// 4-GPU fake NVML; RAPL energy from a fake powercap tree, directly and through gpud; the power
// timeline of PowerMonitor. Times are simulated where the code takes a clock.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "perseus/client/client.hpp"
#include "perseus/cpu/rapl.hpp"
#include "perseus/gpu/visible_devices.hpp"
#include "perseus/gpud/client.hpp"
#include "perseus/gpud/daemon.hpp"
#include "perseus/zeus/energy_monitor.hpp"
#include "perseus/zeus/power_monitor.hpp"
#include "server_fixture.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;
using gpu::GpuError;
using gpu::GpuErrorKind;

constexpr unsigned kTopLimit = 400000, kTopClock = 1410;

// The fake NVML with four GPUs (it reads the count when first initialised).
std::shared_ptr<gpu::GpuLibrary> four_gpus() {
  ::setenv("PERSEUS_FAKE_NVML_GPUS", "4", 1);
  std::shared_ptr<gpu::GpuLibrary> nvml = gpu::load_nvml(PERSEUS_FAKE_NVML);
  ::unsetenv("PERSEUS_FAKE_NVML_GPUS");
  return nvml;
}

std::string uuid_of(unsigned nvml_index) { return fmt::format("GPU-fa4e0000-0000-4000-8000-{:012x}", nvml_index); }

// Every NVML GPU whose power limit or SM clock is not the default.
std::vector<unsigned> changed(gpu::GpuLibrary& nvml) {
  std::vector<unsigned> out;
  for (unsigned d = 0; d < nvml.device_count(); ++d)
    if (nvml.power_limit_mw(d) != kTopLimit || nvml.current_graphics_clock(d) != kTopClock) out.push_back(d);
  return out;
}

struct VisibleCase {
  const char* name;
  std::optional<std::string> visible;
  std::vector<unsigned> nvml;
};

class VisibleDevices : public ::testing::TestWithParam<VisibleCase> {};

TEST_P(VisibleDevices, MapCudaIndicesAsCudaDoes) {
  auto nvml = four_gpus();
  EXPECT_EQ(gpu::visible_nvml_indices(*nvml, GetParam().visible), GetParam().nvml);
  auto numbered = gpu::cuda_numbered(nvml, GetParam().visible);
  EXPECT_EQ(numbered->device_count(), GetParam().nvml.size());
  for (unsigned i = 0; i < GetParam().nvml.size(); ++i) EXPECT_EQ(numbered->uuid(i), uuid_of(GetParam().nvml[i]));
}

INSTANTIATE_TEST_SUITE_P(
    CudaVisibleDevices, VisibleDevices,
    ::testing::Values(VisibleCase{"Unset", std::nullopt, {0, 1, 2, 3}}, VisibleCase{"TwoOfFour", "2,3", {2, 3}},
                      VisibleCase{"Reordered", "3,1", {3, 1}}, VisibleCase{"Spaces", " 2 , 3 ", {2, 3}},
                      VisibleCase{"EmptyHidesAll", "", {}}, VisibleCase{"MinusOneHidesAll", "-1", {}},
                      VisibleCase{"EndsAtAnInvalidEntry", "1,junk,2", {1}}, VisibleCase{"EndsAtARepeat", "1,1,2", {1}},
                      VisibleCase{"EndsAtAMissingIndex", "0,9,1", {0}}, VisibleCase{"EndsAtAnEmptyEntry", "2,,3", {2}},
                      VisibleCase{"Uuids", uuid_of(3) + "," + uuid_of(0), {3, 0}},
                      VisibleCase{"UuidPrefix", "GPU-fa4e0000-0000-4000-8000-000000000002", {2}},
                      VisibleCase{"AmbiguousUuidPrefixEnds", "GPU-fa4e", {}},
                      VisibleCase{"UnknownUuidEnds", "1,GPU-8c1d-44", {1}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(VisibleDevicesErrors, AnIndexPastTheVisibleOnesNamesTheVariable) {
  auto nvml = four_gpus();
  EXPECT_EQ(gpu::nvml_index(*nvml, 1, "2,3"), 3u);
  try {
    gpu::nvml_index(*nvml, 2, "2,3");
    FAIL();
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), GpuErrorKind::invalid_argument);
    EXPECT_STREQ(e.what(), "GPU index 2: 2 GPUs are visible (CUDA_VISIBLE_DEVICES='2,3')");
  }
  try {
    gpu::visible_nvml_indices(*nvml, "MIG-4b6c1a0e-1b1f-5b4e-9c3a-0123456789ab");
    FAIL();
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), GpuErrorKind::not_supported);
    EXPECT_NE(std::string(e.what()).find("MIG"), std::string::npos);
  }
}

// The monitor and power limits in CUDA's numbering: CUDA index 1 of "2,3" is NVML GPU 3, and only it
// is capped. (The Python power-limit optimizer caps the NVML GPUs its monitor maps to: tests/python.)
TEST(DevicesPerEntryPoint, MonitorAndPowerLimitsTouchOnlyTheMappedGpu) {
  auto nvml = four_gpus();
  auto visible = gpu::cuda_numbered(nvml, "2,3");
  EXPECT_EQ(zeus::EnergyMonitor(visible).gpu_indices(), (std::vector<unsigned>{0, 1})) << "a default monitor";
  zeus::EnergyMonitorOptions mo;
  mo.gpu_indices = std::vector<unsigned>{1};
  zeus::EnergyMonitor monitor(visible, mo);
  EXPECT_EQ(gpu::nvml_index(*nvml, 1, "2,3"), 3u);
  const auto range = monitor.gpus().power_limit_range(1);
  EXPECT_EQ(range.max_mw, kTopLimit);
  monitor.gpus().set_power_limit_mw(1, range.max_mw - 100000);
  EXPECT_EQ(changed(*nvml), (std::vector<unsigned>{3}));
  EXPECT_EQ(nvml->power_limit_mw(3), kTopLimit - 100000);
  monitor.gpus().set_power_limit_mw(1, range.max_mw);
  EXPECT_TRUE(changed(*nvml).empty()) << "the maximum restored";
  monitor.begin_window("w");
  auto m = monitor.end_window("w");
  EXPECT_EQ(m.gpu_energy.size(), 1u);
  EXPECT_EQ(m.gpu_energy.count(1), 1u) << "keyed by the CUDA index";
}

// A client of a server that runs forwards at 1200 MHz, as CUDA device 1 of "2,3": after one
// forward began, only NVML GPU 3 runs at 1200 MHz; all is reset at close.
void one_forward_changes_only_gpu_3(client::ClientOptions o, gpu::GpuLibrary& nvml) {
  server::ServerSettings settings;
  settings.scheduler = "TwoFrequencies";
  settings.scheduler_args = {{"forward_freq", 1200}, {"backward_freq", 1005}};
  settings.dump_data = false;
  TestServer server(settings);
  o.server_url = server.url;
  o.fail_open = false;
  o.device = 1;
  o.cuda_visible_devices = "2,3";
  {
    client::Client c(o);
    c.on_step_begin();
    c.on_instruction_begin("forward");
    c.flush();
    EXPECT_EQ(changed(nvml), (std::vector<unsigned>{3}));
    EXPECT_EQ(nvml.current_graphics_clock(3), 1200u);
    c.on_instruction_end("forward");
    c.close(false);
  }
  EXPECT_TRUE(changed(nvml).empty()) << "reset at close";
}

TEST(DevicesPerEntryPoint, AClientDrivesTheMappedGpu) {
  auto nvml = four_gpus();
  client::ClientOptions o;
  o.gpu = nvml;
  one_forward_changes_only_gpu_3(o, *nvml);
}

// A temporary directory, removed afterwards.
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("perseus-energy-" + std::to_string(::getpid()) + "-" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text << "\n";
}

// A powercap tree: package 0 with a core and a DRAM subzone, package 1 without DRAM, a psys zone.
struct FakePowercap {
  fs::path root;
  explicit FakePowercap(fs::path r) : root(std::move(r)) {
    zone("intel-rapl:0", "package-0", 1000000, 1000000000);
    zone("intel-rapl:0/intel-rapl:0:0", "core", 5, 1000000000);
    zone("intel-rapl:0/intel-rapl:0:1", "dram", 2000000, 65000000);
    zone("intel-rapl:1", "package-1", 0, 1000000000);
    zone("intel-rapl:2", "psys", 0, 1000000000);
  }
  void zone(const std::string& dir, const std::string& name, std::uint64_t energy, std::uint64_t range) {
    write(root / dir / "name", name);
    write(root / dir / "max_energy_range_uj", std::to_string(range));
    set(dir, energy);
  }
  void set(const std::string& dir, std::uint64_t energy_uj) {
    write(root / dir / "energy_uj", std::to_string(energy_uj));
  }
};

TEST(Rapl, CountersFromThePowercapTreeIncludingAWrapAround) {
  TempDir tmp;
  FakePowercap tree(tmp.path);
  cpu::RaplCounters counters(cpu::powercap_tree(tmp.path.string()));
  EXPECT_EQ(counters.packages(), (std::vector<unsigned>{0, 1})) << "psys is no package";
  EXPECT_TRUE(counters.has_dram(0));
  EXPECT_FALSE(counters.has_dram(1));
  tree.set("intel-rapl:0", 999000000);                // +998 J
  tree.set("intel-rapl:0/intel-rapl:0:1", 64000000);  // +62 J
  tree.set("intel-rapl:1", 3000000);                  // +3 J
  auto first = counters.read();
  tree.set("intel-rapl:0", 1500000);                // wrapped at 1000 J: +2.5 J
  tree.set("intel-rapl:0/intel-rapl:0:1", 500000);  // wrapped at 65 J: +1.5 J
  auto second = counters.read();
  EXPECT_DOUBLE_EQ(first.cpu_j.at(0), 998.0);
  EXPECT_DOUBLE_EQ(first.dram_j.at(0), 62.0);
  EXPECT_DOUBLE_EQ(first.cpu_j.at(1), 3.0);
  EXPECT_DOUBLE_EQ(second.cpu_j.at(0), 1000.5);
  EXPECT_DOUBLE_EQ(second.dram_j.at(0), 63.5);
  EXPECT_EQ(second.dram_j.count(1), 0u);
}

TEST(Rapl, TheMonitorReportsCpuAndDramPerWindow) {
  TempDir tmp;
  FakePowercap tree(tmp.path);
  auto nvml = four_gpus();
  auto rapl = std::make_shared<cpu::RaplCounters>(cpu::powercap_tree(tmp.path.string()));
  double now = 0;
  zeus::EnergyMonitorOptions o;
  o.rapl = rapl;
  o.clock = [&] { return now; };
  o.rapl_sample_interval_s = 0;
  zeus::EnergyMonitor all(nvml, o);
  o.cpu_indices = std::vector<unsigned>{1};
  zeus::EnergyMonitor second(nvml, o);
  all.begin_window("w");
  second.begin_window("w");
  tree.set("intel-rapl:0", 900000000);
  tree.set("intel-rapl:0", 500000);  // only the last value is seen
  tree.set("intel-rapl:0/intel-rapl:0:1", 3000000);
  tree.set("intel-rapl:1", 7000000);
  now = 2;
  auto m = all.end_window("w");
  auto s = second.end_window("w");
  ASSERT_TRUE(m.cpu_energy && m.dram_energy);
  EXPECT_DOUBLE_EQ(m.cpu_energy->at(0), 999.5);  // 1 J -> wrapped -> 0.5 J
  EXPECT_DOUBLE_EQ(m.cpu_energy->at(1), 7.0);
  EXPECT_EQ(*m.dram_energy, (std::map<unsigned, double>{{0, 1.0}}));
  EXPECT_EQ(*s.cpu_energy, (std::map<unsigned, double>{{1, 7.0}}));
  EXPECT_FALSE(s.dram_energy) << "package 1 has no DRAM zone";
  EXPECT_DOUBLE_EQ(m.time, 2.0);
  o.cpu_indices = std::vector<unsigned>{5};
  EXPECT_THROW(zeus::EnergyMonitor(nvml, o), std::invalid_argument);
  EXPECT_THROW(cpu::powercap_tree((tmp.path / "none").string()), cpu::RaplError);
}

TEST(Rapl, RestartAndCancel) {
  auto nvml = four_gpus();
  double now = 0;
  zeus::EnergyMonitorOptions o;
  o.clock = [&] { return now; };
  zeus::EnergyMonitor monitor(nvml, o);
  monitor.begin_window("w");
  now = 5;
  EXPECT_THROW(monitor.begin_window("w"), std::invalid_argument);
  monitor.begin_window("w", true);
  now = 6;
  EXPECT_DOUBLE_EQ(monitor.end_window("w").time, 1.0) << "restarted at 5";
  monitor.begin_window("c");
  auto cancelled = monitor.end_window("c", true);
  EXPECT_EQ(cancelled.gpu_energy, (std::map<unsigned, double>{{0, 0.0}, {1, 0.0}, {2, 0.0}, {3, 0.0}}));
  EXPECT_FALSE(cancelled.cpu_energy);
}

// gpud in-process on the 4-GPU fake, serving the good tree while the caller's is unreadable.
struct GpudEnergy : ::testing::Test {
  TempDir tmp;
  std::string socket = (tmp.path / "gpud.sock").string();
  std::shared_ptr<gpu::GpuLibrary> nvml = four_gpus();
  boost::asio::io_context io;
  std::unique_ptr<gpud::Daemon> daemon;
  std::thread thread;
  FakePowercap tree{tmp.path / "daemon-tree"};

  void SetUp() override {
    gpud::DaemonOptions options;
    options.socket_path = socket;
    options.powercap_root = tree.root.string();
    daemon = std::make_unique<gpud::Daemon>(io, nvml, options);
    thread = std::thread([this] { io.run(); });
  }
  void TearDown() override {
    boost::asio::post(io, [this] {
      daemon->stop();
      io.stop();
    });
    thread.join();
    ::unsetenv(cpu::kPowercapRootEnv);
  }
};

TEST_F(GpudEnergy, RaplIsReadThroughGpudWhenTheTreeIsUnreadableHere) {
  // The caller's tree has the zones but counters it cannot read (whoever runs the test, root too).
  fs::path mine = tmp.path / "caller-tree";
  write(mine / "intel-rapl:0" / "name", "package-0");
  write(mine / "intel-rapl:0" / "max_energy_range_uj", "1000000000");
  fs::create_directory_symlink(mine / "nowhere", mine / "intel-rapl:0" / "energy_uj");
  ::setenv(cpu::kPowercapRootEnv, mine.string().c_str(), 1);
  try {
    cpu::powercap_tree(mine.string());
    FAIL() << "the caller's tree must be unreadable";
  } catch (const cpu::RaplError& e) {
    EXPECT_EQ(e.kind(), cpu::RaplErrorKind::unreadable);
  }
  EXPECT_THROW(gpud::open_rapl(""), cpu::RaplError) << "no daemon named";
  cpu::RaplCounters counters(gpud::open_rapl(socket));
  EXPECT_EQ(counters.packages(), (std::vector<unsigned>{0, 1}));
  tree.set("intel-rapl:0", 4000000);
  EXPECT_DOUBLE_EQ(counters.read().cpu_j.at(0), 3.0);
}

TEST_F(GpudEnergy, ARankThroughGpudDrivesTheMappedGpuByIndexOrUuid) {
  auto through = gpud::connect(socket);
  EXPECT_EQ(through->uuid(2), uuid_of(2));
  EXPECT_EQ(gpu::nvml_index(*through, 0, uuid_of(3)), 3u);
  client::ClientOptions o;
  o.gpud_socket = socket;
  one_forward_changes_only_gpu_3(o, *nvml);
}

// A GPU whose power follows simulated time: 100 W, then 300 W from t = 10 s.
class SteppedPower final : public gpu::GpuLibrary {
 public:
  double now = 0;
  unsigned device_count() override { return 1; }
  std::string name(unsigned) override { return "stepped"; }
  std::vector<unsigned> supported_memory_clocks(unsigned) override { return {}; }
  std::vector<unsigned> supported_graphics_clocks(unsigned, unsigned) override { return {}; }
  unsigned current_graphics_clock(unsigned) override { return 0; }
  unsigned current_memory_clock(unsigned) override { return 0; }
  void lock_graphics_clock(unsigned, unsigned, unsigned) override {}
  void reset_graphics_clock(unsigned) override {}
  void lock_memory_clock(unsigned, unsigned, unsigned) override {}
  void reset_memory_clock(unsigned) override {}
  unsigned power_limit_mw(unsigned) override { return 0; }
  gpu::PowerLimitRange power_limit_range(unsigned) override { return {}; }
  void set_power_limit_mw(unsigned, unsigned) override {}
  std::uint64_t total_energy_mj(unsigned) override { return 0; }
  unsigned power_usage_mw(unsigned) override { return now < 10 ? 100000 : 300000; }
};

TEST(PowerMonitor, TheTimelineIntegratesToTheEnergyOverAnySpan) {
  auto gpus = std::make_shared<SteppedPower>();
  zeus::PowerMonitor monitor(gpus, {0}, 0, 3, [g = gpus.get()] { return g->now; });  // a sample at t = 0
  for (double t : {5.0, 10.0, 15.0}) {
    gpus->now = t;
    monitor.sample();
  }
  auto timeline = monitor.timeline(0);
  ASSERT_EQ(timeline.size(), 3u) << "at most 3 kept, the oldest dropped";
  EXPECT_DOUBLE_EQ(timeline.front().time, 5.0);
  EXPECT_EQ(monitor.timeline(0, 6.0, 12.0).size(), 1u);
  auto energy = monitor.energy(6, 15);
  ASSERT_TRUE(energy);
  // Linear from 140 W at 6 s to 300 W at 10 s (between the samples at 5 and 10 s), then 300 W.
  EXPECT_DOUBLE_EQ(energy->at(0), (140.0 + 300.0) / 2 * 4 + 300.0 * 5);
  EXPECT_DOUBLE_EQ(monitor.energy(15, 20)->at(0), 300.0 * 5) << "held past the last sample";
  EXPECT_DOUBLE_EQ(zeus::integrate({{0, 100}, {2, 300}}, 0, 2), 400.0) << "linear between samples";
}

}  // namespace
}  // namespace perseus::testing
