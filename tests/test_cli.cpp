// The `perseus` executable end to end: exit codes, messages and files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "perseus/util/atomic_file.hpp"

namespace fs = std::filesystem;

namespace {

struct Result {
  int code;
  std::string output;  // stdout and stderr together
};

Result run(const std::string& args) {
  const fs::path log = fs::temp_directory_path() / ("perseus_cli_" + std::to_string(::getpid()) + ".log");
  const std::string command = std::string(PERSEUS_BINARY) + " " + args + " > " + log.string() + " 2>&1";
  const int status = std::system(command.c_str());
  Result result{WIFEXITED(status) ? WEXITSTATUS(status) : -1, perseus::read_file(log)};
  fs::remove(log);
  return result;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("perseus_cli_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  fs::path dir_;
  const std::string example_ = std::string(PERSEUS_SOURCE_DIR) + "/examples/synthetic-4stage.csv";
};

}  // namespace

TEST_F(Cli, OptimizeShowExportAndReadBack) {
  const std::string out = (dir_ / "out").string();
  auto r = run("optimize " + example_ + " --stages 4 --microbatches 6 --p2p-power 75 --out " + out + " --quiet");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string frontier = perseus::read_file(out + "/frontier.csv");
  EXPECT_EQ(frontier.rfind("index,time,energy,", 0), 0u);
  EXPECT_EQ(perseus::read_file(out + "/iteration_time_energy.csv").rfind("time,energy\n", 0), 0u);

  r = run("plans show " + out + " --index 0");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("stage 3: F0@"), std::string::npos) << r.output;
  r = run("plans show " + out + " --slowdown 1.05 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\"frequencies\""), std::string::npos);

  r = run("plans export " + out + " --out " + (dir_ / "plans").string() + " --every 100 --format py");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "plans" / "freqs_pipeline_00000.py"));
  EXPECT_TRUE(fs::exists(dir_ / "plans" / "freqs_pipeline_00100.py"));
  EXPECT_FALSE(fs::exists(dir_ / "plans" / "freqs_pipeline_00000.json"));
  r = run("plans read " + (dir_ / "plans" / "freqs_pipeline_00100.py").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\"refined_cost\""), std::string::npos);

  r = run("plans show " + out + " --time 0.001");
  EXPECT_EQ(r.code, 64);
  EXPECT_NE(r.output.find("no plan finishes within"), std::string::npos);
}

TEST_F(Cli, BadInputsGetClearErrorsAndFittingExitCodes) {
  auto r = run("optimize /nonexistent.csv --stages 2 --microbatches 2 --p2p-power 70 --out " + (dir_ / "x").string());
  EXPECT_EQ(r.code, 66);
  EXPECT_NE(r.output.find("cannot read '/nonexistent.csv'"), std::string::npos) << r.output;

  const std::string bad = write("bad.csv", "stage,instruction,frequency,time,energy\n0,forward,1410,nan,3\n");
  r = run("optimize " + bad + " --stages 1 --microbatches 2 --p2p-power 70 --out " + (dir_ / "x").string());
  EXPECT_EQ(r.code, 65);
  EXPECT_NE(r.output.find("bad.csv:2: field 'time': 'nan' is not finite"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "x" / "frontier.csv"));

  r = run("optimize " + example_ + " --stages 4 --p2p-power 70 --out " + (dir_ / "x").string());
  EXPECT_EQ(r.code, 64);

  const std::string few = write("few.csv",
                                "stage,instruction,frequency,time,energy\n"
                                "0,forward,1400,0.010,30\n0,forward,1200,0.012,28\n0,forward,1000,0.015,27\n"
                                "0,backward,1400,0.020,60\n0,backward,1200,0.024,56\n0,backward,1000,0.030,54\n");
  r = run("optimize " + few + " --stages 1 --microbatches 2 --p2p-power 10 --out " + (dir_ / "y").string());
  EXPECT_EQ(r.code, 65);
  EXPECT_NE(r.output.find("use --cost-model pwl"), std::string::npos) << r.output;
  r = run("optimize " + few + " --stages 1 --microbatches 2 --p2p-power 10 --cost-model pwl --quiet --out " + (dir_ / "y").string());
  EXPECT_EQ(r.code, 0) << r.output;
}
