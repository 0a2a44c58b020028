// The `perseus` executable end to end: exit codes, messages and files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "perseus/client/http_client.hpp"
#include "perseus/plan/frontier_record.hpp"
#include "perseus/server/scheduler.hpp"
#include "cli/cli_process.hpp"
#include "process_fixture.hpp"

#include "perseus/util/atomic_file.hpp"

namespace fs = std::filesystem;

namespace {

using Result = perseus::testing::CliResult;

Result run(const std::string& args, const std::string& env = "") { return perseus::testing::run_cli(args, env); }

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
  const std::string example_ = PERSEUS_SOURCE_DIR "/examples/synthetic-4stage.csv";
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

// Plans move to Zeus and back: exported in Zeus's format, read back, emulated like the original.
TEST_F(Cli, ZeusPlansExportReadAndEmulate) {
  const std::string out = (dir_ / "out").string();
  auto r = run("optimize " + example_ + " --stages 4 --microbatches 6 --p2p-power 75 --out " + out + " --quiet");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string zeus_dir = (dir_ / "zeus").string(), py_dir = (dir_ / "py").string();
  ASSERT_EQ(run("plans export " + out + " --out " + zeus_dir + " --index 3 --format zeus").code, 0);
  ASSERT_EQ(run("plans export " + out + " --out " + py_dir + " --index 3 --format py").code, 0);
  const std::string zeus_plan = zeus_dir + "/freqs_pipeline_00003.py";
  EXPECT_EQ(perseus::read_file(zeus_plan).rfind("[\n[('forward', ", 0), 0u) << perseus::read_file(zeus_plan);
  r = run("plans read " + zeus_plan);
  ASSERT_EQ(r.code, 0) << r.output;
  auto zeus = nlohmann::json::parse(r.output);
  auto artifact = nlohmann::json::parse(run("plans read " + py_dir + "/freqs_pipeline_00003.py").output);
  EXPECT_EQ(zeus["format"], "zeus");
  EXPECT_EQ(artifact["format"], "perseus-py");
  EXPECT_EQ(zeus["frequencies"], artifact["frequencies"]);
  EXPECT_EQ(zeus["instructions"][3][0], "forward");
  // --microbatches comes from the plan's forwards.
  auto emulated_zeus = run("emulate " + example_ + " --stages 4 --p2p-power 75 --plan " + zeus_plan);
  auto emulated_py = run("emulate " + example_ + " --stages 4 --microbatches 6 --p2p-power 75 --plan " + py_dir +
                         "/freqs_pipeline_00003.py");
  ASSERT_EQ(emulated_zeus.code, 0) << emulated_zeus.output;
  auto numbers = [](const std::string& text) { return text.substr(text.find("iteration time")); };
  EXPECT_EQ(numbers(emulated_zeus.output), numbers(emulated_py.output));
  // A plan that names another order than the emulated schedule's is refused, naming the slot.
  r = run("emulate " + example_ + " --stages 4 --p2p-power 75 --schedule gpipe --plan " + zeus_plan);
  EXPECT_EQ(r.code, 65) << r.output;
  EXPECT_NE(r.output.find("the plan names a backward where the gpipe schedule runs a forward"), std::string::npos)
      << r.output;
}

// Zeus's server settings (ZEUS_PFO_*) configure `perseus serve` when neither a flag nor
// PERSEUS_* does, so that the commands in Zeus's docs work as written.
TEST_F(Cli, ZeusEnvironmentVariablesConfigureTheServer) {
  auto zeus = run("serve", "ZEUS_PFO_SCHEDULER=Nope");
  EXPECT_EQ(zeus.code, 64);
  EXPECT_NE(zeus.output.find("unknown scheduler 'Nope'"), std::string::npos) << zeus.output;
  EXPECT_NE(run("serve", "ZEUS_PFO_SCHEDULER=Nope PERSEUS_SCHEDULER=Mine").output.find("'Mine'"), std::string::npos);
  EXPECT_NE(run("serve --scheduler Flag", "ZEUS_PFO_SCHEDULER=Nope").output.find("'Flag'"), std::string::npos);
  EXPECT_EQ(run("serve", "ZEUS_PFO_MAX_JOB_IDLE_TIME=soon").code, 64);
  EXPECT_EQ(run("serve", "ZEUS_PFO_DUMP_DATA=maybe").code, 64);

  // The docs' command, its placeholder taken literally: a usage error that explains it.
  auto docs = run("serve --scheduler PointSolution --port 7787",
                  "ZEUS_PFO_SCHEDULER_ARGS='{\"solution_path\": \"path/to/freqs_pipeline_%05d.py\"}'");
  EXPECT_EQ(docs.code, 64) << docs.output;
  EXPECT_NE(docs.output.find("'%05d' in Zeus's docs stands for a plan's number"), std::string::npos) << docs.output;
  // A malformed plan stops the server at start with a usage error naming the file and line.
  const std::string bad = write("freqs_pipeline_00001.py", "[\n[('forward', 1410)],\n[('forward', x)],\n]\n");
  auto malformed =
      run("serve --scheduler PointSolution --port 0", "ZEUS_PFO_SCHEDULER_ARGS='{\"solution_path\": \"" + bad + "\"}'");
  EXPECT_EQ(malformed.code, 64) << malformed.output;
  EXPECT_NE(malformed.output.find("freqs_pipeline_00001.py:3: expected a clock"), std::string::npos)
      << malformed.output;

  // With a real plan the server starts with Zeus's settings.
  const std::string good = write("freqs_pipeline_00002.py", "[\n[('forward', 1410), ('backward', 1410)],\n]\n");
  const std::string records = (dir_ / "zeus-dump").string();
  auto started = run("serve --scheduler PointSolution --port 0",
                     "timeout --foreground -s INT 1 env ZEUS_PFO_SCHEDULER_ARGS='{\"solution_path\": \"" + good +
                         "\"}' ZEUS_PFO_DUMP_DIR=" + records + " ZEUS_PFO_LOG_LEVEL=DEBUG");
  EXPECT_NE(started.output.find("scheduler PointSolution, mode frequency, records in " + records), std::string::npos)
      << started.output;
  auto no_records = run("serve --port 0", "timeout --foreground -s INT 1 env ZEUS_PFO_DUMP_DATA=false");
  EXPECT_NE(no_records.output.find("no records"), std::string::npos) << no_records.output;
  // Zeus's documented command gives only the scheduler's arguments: Zeus's default scheduler,
  // PointSolution, then; and Zeus reads its settings' names in any case.
  auto zeus_default =
      run("serve --port 0", "timeout --foreground -s INT 1 env ZEUS_PFO_SCHEDULER_ARGS='{\"solution_path\": \"" + good +
                                "\"}' ZEUS_PFO_DUMP_DIR=" + records);
  EXPECT_NE(zeus_default.output.find("scheduler PointSolution, mode frequency"), std::string::npos)
      << zeus_default.output;
  auto lower = run("serve", "zeus_pfo_scheduler=Nope");
  EXPECT_NE(lower.output.find("unknown scheduler 'Nope'"), std::string::npos) << lower.output;
  auto lower_args =
      run("serve --port 0", "timeout --foreground -s INT 1 env zeus_pfo_scheduler_args='{\"solution_path\": \"" + good +
                                "\"}' zeus_pfo_dump_dir=" + records);
  EXPECT_NE(lower_args.output.find("scheduler PointSolution, mode frequency, records in " + records), std::string::npos)
      << lower_args.output;
}

// Power-limit schedulers set the mode; a --mode that contradicts them is a usage error.
TEST_F(Cli, PowerLimitSchedulersSetTheMode) {
  auto contradiction = run("serve --scheduler ZeusGlobalPowerLimit --mode frequency");
  EXPECT_EQ(contradiction.code, 64);
  EXPECT_NE(contradiction.output.find("contradicts scheduler ZeusGlobalPowerLimit, which sets power limits"),
            std::string::npos)
      << contradiction.output;
  EXPECT_EQ(run("serve --scheduler AllMaxFrequency", "PERSEUS_MODE='power limit'").code, 64);
  auto started = run("serve --scheduler AllMaxPowerLimit3D --port 0 --no-dump", "timeout --foreground -s INT 1");
  EXPECT_NE(started.output.find("scheduler AllMaxPowerLimit3D, mode power limit"), std::string::npos) << started.output;
  auto either = run("serve --scheduler InstructionProfiler --mode 'power limit' --port 0 --no-dump",
                    "timeout --foreground -s INT 1");
  EXPECT_NE(either.output.find("mode power limit"), std::string::npos) << either.output;
}

// Inputs at the planner's limits: each is a clear error naming the limit, or works.
TEST_F(Cli, PlannerInputsThatBrokeItAreClearErrors) {
  const std::string base =
      example_ + " --stages 4 --microbatches 6 --p2p-power 75 --quiet --out " + (dir_ / "o").string();
  auto tiny_unit = run("optimize " + base + " --unit-time 1e-12");  // durations became -2147483648
  EXPECT_EQ(tiny_unit.code, 64) << tiny_unit.output;
  EXPECT_NE(tiny_unit.output.find("beyond the planner's 2^31-1 time units; use a larger --unit-time"),
            std::string::npos);
  auto huge = run("optimize " + example_ + " --stages 4 --microbatches 2147483647 --p2p-power 75 --quiet --out " +
                  (dir_ / "o2").string());  // was std::bad_alloc
  EXPECT_EQ(huge.code, 64);
  EXPECT_NE(huge.output.find("the planner handles at most 2000000"), std::string::npos) << huge.output;
  std::string slow = "stage,instruction,frequency,time,energy\n";
  for (const char* kind : {"forward", "backward"})
    for (auto [mhz, seconds] : std::vector<std::pair<int, double>>{{1410, 1e6}, {1200, 1.2e6}, {1000, 1.5e6}})
      slow += fmt::format("0,{},{},{},{}\n", kind, mhz, seconds, 1e12 / seconds);
  auto hang = run("optimize " + write("slow.csv", slow) + " --stages 1 --microbatches 1 --p2p-power 75 --quiet --out " +
                  (dir_ / "o3").string());  // refused up front, not computed for ever
  EXPECT_EQ(hang.code, 64);
  EXPECT_NE(hang.output.find("its clocks span 500000000 units, so a frontier could have that many points"),
            std::string::npos)
      << hang.output;
  // A UTF-8 byte-order mark, as spreadsheets write, is accepted as pandas accepts it.
  auto bom = run("optimize " + write("bom.csv", "\xEF\xBB\xBF" + perseus::read_file(example_)) +
                 " --stages 4 --microbatches 6 --p2p-power 75 --quiet --out " + (dir_ / "o4").string());
  EXPECT_EQ(bom.code, 0) << bom.output;
  // A 10 MB field is not echoed whole.
  auto long_field = run("optimize " +
                        write("long.csv", "stage,instruction,frequency,time,energy\n0,forward,1410," +
                                              std::string(10'000'000, 'x') + ",1\n") +
                        " --stages 1 --microbatches 1 --p2p-power 75 --out " + (dir_ / "o5").string());
  EXPECT_EQ(long_field.code, 65);
  EXPECT_LT(long_field.output.size(), 1000u);
  EXPECT_NE(long_field.output.find(" bytes in all)"), std::string::npos) << long_field.output;
}

TEST_F(Cli, StatusShowsTheJobsOfARunningServer) {
  perseus::testing::ServeProcess serve(dir_ / "serve", "AllMaxFrequency", "{}", "--no-dump");
  ASSERT_NE(serve.port, 0);
  const std::string url = serve.url();
  perseus::client::HttpClient http(url);
  auto registered =
      http.request("POST", "/register_job",
                   R"({"pp_degree": 2, "dp_degree": 1, "tp_degree": 1, "world_size": 2, "job_metadata": "demo"})",
                   std::chrono::seconds(5));
  ASSERT_EQ(registered.status, 200) << registered.body;
  const std::string id = nlohmann::json::parse(registered.body).get<std::string>();
  auto all = run("status --server " + url);
  EXPECT_EQ(all.code, 0) << all.output;
  EXPECT_NE(all.output.find("job " + id), std::string::npos) << all.output;
  EXPECT_NE(all.output.find("scheduler AllMaxFrequency (zeus client), registering, round 0, 0/2 ranks registered"),
            std::string::npos)
      << all.output;
  auto one = run("status --server " + url + " '" + id + "' --json");
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_EQ(nlohmann::json::parse(one.output)["phase"], "registering");
  auto unknown = run("status --server " + url + " nope");
  EXPECT_EQ(unknown.code, 1);
  EXPECT_NE(unknown.output.find("404"), std::string::npos) << unknown.output;
  auto gone = run("status --server http://127.0.0.1:1");
  EXPECT_EQ(gone.code, 66) << gone.output;
  EXPECT_NE(gone.output.find("is `perseus serve` running there?"), std::string::npos) << gone.output;
  // --watch: refreshes until Ctrl-C (one block after another when not on a terminal), then exits 0.
  auto watched = run("status --server " + url + " --watch 0.2", "timeout --foreground --preserve-status -s INT 1");
  EXPECT_EQ(watched.code, 0) << watched.output;
  EXPECT_GE(perseus::testing::count_lines_with(watched.output, "perseus status " + url + " every 0.2 s at "), 2u)
      << watched.output;
  EXPECT_GE(perseus::testing::count_lines_with(watched.output, "job " + id), 2u) << watched.output;
  auto too_fast = run("status --server " + url + " --watch 0");
  EXPECT_EQ(too_fast.code, 64) << too_fast.output;
}

TEST_F(Cli, StatusShowsTheClustersPowerBudgetAndServeChecksIt) {
  perseus::testing::ServeProcess serve(dir_ / "serve", "AllMaxFrequency", "{}", "--no-dump --power-budget 5000");
  ASSERT_NE(serve.port, 0);
  auto all = run("status --server " + serve.url());
  EXPECT_EQ(all.code, 0) << all.output;
  EXPECT_NE(all.output.find("power budget 5000 W (flag): predicted 0 W, measured - (all-max -)"), std::string::npos)
      << all.output;
  auto bad = run("serve --power-budget -3 --port 0 --no-dump");
  EXPECT_EQ(bad.code, 64) << bad.output;
  EXPECT_NE(bad.output.find("--power-budget"), std::string::npos) << bad.output;
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
  // Three Pareto clocks cannot fix an exponential: the strict reference mode refuses, the default
  // (auto) falls back to piecewise-linear there, says so and records it.
  r = run("optimize " + few + " --stages 1 --microbatches 2 --p2p-power 10 --cost-model exp --out " +
          (dir_ / "y").string());
  EXPECT_EQ(r.code, 65);
  EXPECT_NE(r.output.find("use --cost-model auto or pwl"), std::string::npos) << r.output;
  r = run("optimize " + few + " --stages 1 --microbatches 2 --p2p-power 10 --out " + (dir_ / "y").string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("piecewise-linear for stage 0 forward (3 options: too few for the exponential fit); "
                          "stage 0 backward (3 options: too few for the exponential fit)"),
            std::string::npos)
      << r.output;
  auto plans = nlohmann::json::parse(perseus::read_file(dir_ / "y" / "plans.json"));
  EXPECT_EQ(plans["cost_model"], "auto");
  EXPECT_EQ(plans["cost_models"][1], nlohmann::json({{"stage", 0},
                                                     {"instruction", "backward"},
                                                     {"model", "pwl"},
                                                     {"fallback", "3 options: too few for the exponential fit"}}));
  r = run("optimize " + few + " --stages 1 --microbatches 2 --p2p-power 10 --cost-model pwl --quiet --out " +
          (dir_ / "y").string());
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST_F(Cli, EmulateBaselineWhatIfAndPlots) {
  const std::string out = (dir_ / "out").string();
  ASSERT_EQ(run("optimize " + example_ + " --stages 4 --microbatches 6 --p2p-power 75 --out " + out + " -q").code, 0);
  // A frontier names its profile and pipeline: nothing else is needed.
  auto r = run("emulate --frontier " + out + " --slowdown 1.1 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_GT(j["iteration_time"].get<double>(), 0);
  EXPECT_EQ(j["stages"].size(), 4u);
  r = run("emulate --frontier " + out + " --all-points --out " + out + "/judged.csv");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("judged "), std::string::npos);
  EXPECT_EQ(perseus::read_file(out + "/judged.csv").rfind("index,model_time,model_energy,emulated_time", 0), 0u);

  const std::string pipe = example_ + " --stages 4 --microbatches 6 --p2p-power 75";
  r = run("baseline envpipe-balanced " + pipe + " --out " + out + "/envpipe.json");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("emulate " + pipe + " --plan " + out + "/envpipe.json --noise 0.05 --repeat 5 --seed 3");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("over 5 runs"), std::string::npos) << r.output;
  r = run("baseline zeus-global " + pipe + " --eta 0.8 --out " + out + "/zeus.py");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("emulate " + pipe + " --plan " + out + "/zeus.py");
  ASSERT_EQ(r.code, 0) << r.output;

  r = run("whatif " + pipe + " --pipelines 4 --slowdowns 1,1.2 --out " + out + "/whatif.csv");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string csv = perseus::read_file(out + "/whatif.csv");
  EXPECT_EQ(csv.rfind("slowdown,method,", 0), 0u);
  EXPECT_NE(csv.find(",perseus,"), std::string::npos);
  EXPECT_NE(csv.find(",envpipe-balanced,"), std::string::npos);

  r = run("plot timeline --frontier " + out + " --index 0 --color power --out " + out + "/t.svg");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(perseus::read_file(out + "/t.svg").find("class=\"critical-path\""), std::string::npos);
  r = run("plot frontier " + out + " " + out + " --names a,b --slowdown 1.1 --out " + out + "/f.svg");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string svg = perseus::read_file(out + "/f.svg");
  EXPECT_NE(svg.find("data-name=\"envpipe-balanced\""), std::string::npos);
  EXPECT_NE(svg.find("data-name=\"b\""), std::string::npos);
}

TEST_F(Cli, EmulateBadInputs) {
  const std::string pipe = example_ + " --stages 4 --microbatches 6 --p2p-power 75";
  // A clock the profile lacks: data error naming the clock.
  const std::string plan = write("bad.py", "[[1410, 1410], [1410]]\n");
  auto r = run("emulate " + pipe + " --plan " + plan);
  EXPECT_EQ(r.code, 65) << r.output;
  EXPECT_NE(r.output.find("bad.py: the plan has clocks for 2 stages, the pipeline has 4"), std::string::npos)
      << r.output;
  std::string rows;
  for (int s = 0; s < 4; ++s) {
    rows.append("[").append(s == 2 ? "1234" : "1410");
    for (int k = 1; k < 12; ++k) rows.append(", 1410");
    rows.append("],\n");
  }
  r = run("emulate " + pipe + " --plan " + write("clock.py", "[\n" + rows + "]\n"));
  EXPECT_EQ(r.code, 65) << r.output;
  EXPECT_NE(r.output.find("1234 MHz"), std::string::npos) << r.output;
  // No plan source, or two.
  EXPECT_EQ(run("emulate " + pipe).code, 64);
  EXPECT_EQ(run("emulate " + pipe + " --baseline all-max --plan " + plan).code, 64);
  EXPECT_EQ(run("emulate " + pipe + " --baseline nope").code, 64);
  EXPECT_EQ(run("emulate " + pipe + " --baseline all-max --index 3").code, 64);
  // Pipeline options are required without a frontier.
  EXPECT_EQ(run("emulate " + example_ + " --baseline all-max").code, 64);
  EXPECT_EQ(run("whatif " + pipe + " --global-batch 100").code, 64);  // not a multiple of 6
  EXPECT_EQ(run("baseline all-max " + pipe + " --out " + (dir_ / "x.txt").string()).code, 64);
}

namespace {

bool has(const Result& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

// Every bad command line reads the same way: the flag, what it must be, what was given, and for a
// misspelt command, flag or value the nearest right one; exit 64.
TEST_F(Cli, UsageErrorsNameTheFlagWhatItMustBeAndWhatWasGiven) {
  const std::string shape = " --microbatches 6 --p2p-power 75 --out " + (dir_ / "x").string();
  auto words = run("optimize " + example_ + " --stages four" + shape);
  EXPECT_EQ(words.code, 64);
  EXPECT_TRUE(has(words, "perseus optimize: error: --stages must be a positive integer, got 'four'")) << words.output;
  EXPECT_FALSE(has(words, "1797693")) << words.output;
  EXPECT_TRUE(has(words, "Run 'perseus optimize --help'")) << words.output;
  auto zero = run("optimize " + example_ + " --stages 0" + shape);
  EXPECT_EQ(zero.code, 64);
  EXPECT_TRUE(has(zero, "--stages must be a positive integer, got '0'")) << zero.output;
  auto power = run("optimize " + example_ + " --stages 4 --microbatches 6 --p2p-power -5 --out x");
  EXPECT_EQ(power.code, 64);
  EXPECT_TRUE(has(power, "--p2p-power must be a non-negative number, got '-5'")) << power.output;
  auto fraction = run("optimize " + example_ + " --stages 4" + shape + " --threads 3");
  EXPECT_EQ(fraction.code, 64);
  EXPECT_TRUE(has(fraction, "--threads must be an integer from 0 to 2, got '3'")) << fraction.output;
  auto retention = run("serve --job-retention 2e9");
  EXPECT_EQ(retention.code, 64);
  EXPECT_TRUE(has(retention, "--job-retention must be a number from 0 to 1000000000, got '2e9'")) << retention.output;
  // An option without a check: the conversion fails in the same words.
  auto unchecked = run("simulate " + example_ + " --stages 4.5 --microbatches 6 --p2p-power 75");
  EXPECT_EQ(unchecked.code, 64);
  EXPECT_TRUE(has(unchecked, "--stages must be an integer, got '4.5'")) << unchecked.output;
  auto schedule = run("optimize " + example_ + " --stages 4" + shape + " --schedule gpip");
  EXPECT_EQ(schedule.code, 64);
  EXPECT_TRUE(has(schedule,
                  "--schedule must be one of 1f1b, gpipe, interleaved, zb-h1, zbv, dualpipev, envpipe, got "
                  "'gpip'; did you mean 'gpipe'?"))
      << schedule.output;
  EXPECT_EQ(run("optimize " + example_ + " --stages 4" + shape + " --quiet").code, 0);
}

TEST_F(Cli, UnknownCommandsAndOptionsGetTheNearestKnownOne) {
  auto command = run("optimise " + example_);
  EXPECT_EQ(command.code, 64);
  EXPECT_TRUE(has(command, "perseus: error: unknown command 'optimise'; did you mean 'optimize'?")) << command.output;
  auto nested = run("plans exprot " + dir_.string());
  EXPECT_EQ(nested.code, 64);
  EXPECT_TRUE(has(nested, "perseus plans: error: unknown command 'exprot'; did you mean 'export'?")) << nested.output;
  auto nothing_near = run("frobnicate");
  EXPECT_EQ(nothing_near.code, 64);
  EXPECT_TRUE(has(nothing_near, "unknown command 'frobnicate' (one of: optimize, plans,")) << nothing_near.output;

  auto option = run("optimize " + example_ + " --stage 4 --microbatches 6 --p2p-power 75 --out x");
  EXPECT_EQ(option.code, 64);
  EXPECT_TRUE(has(option, "perseus optimize: error: unknown option '--stage'; did you mean '--stages'?"))
      << option.output;
  EXPECT_FALSE(has(option, "unexpected argument '4'")) << option.output;  // the unknown option's value
  auto assigned = run("serve --prot=7787");
  EXPECT_EQ(assigned.code, 64);
  EXPECT_TRUE(has(assigned, "unknown option '--prot'; did you mean '--port'?")) << assigned.output;

  auto none = run("");
  EXPECT_EQ(none.code, 64);
  EXPECT_TRUE(has(none, "perseus: error: a command is required: one of optimize, plans,")) << none.output;
}

TEST_F(Cli, EveryMissingRequiredArgumentIsReportedAtOnce) {
  auto r = run("optimize " + example_);
  EXPECT_EQ(r.code, 64);
  EXPECT_TRUE(has(r, "perseus optimize: error: missing --stages, --microbatches, --p2p-power, --out (required)"))
      << r.output;
  auto positional = run("optimize --stages 4 --microbatches 6 --p2p-power 75");
  EXPECT_EQ(positional.code, 64);
  EXPECT_TRUE(has(positional, "missing profile, --out (required)")) << positional.output;
  // With a bad value besides: both problems, one line each.
  auto both = run("optimize " + example_ + " --stages four");
  EXPECT_EQ(both.code, 64);
  EXPECT_TRUE(has(both, "--stages must be a positive integer, got 'four'")) << both.output;
  EXPECT_TRUE(has(both, "missing --microbatches, --p2p-power, --out (required)")) << both.output;
}

TEST_F(Cli, ServeHelpListsEverySchedulerTheRegistryKnows) {
  auto help = run("serve --help");
  EXPECT_EQ(help.code, 0) << help.output;
  for (const auto& name : perseus::server::scheduler_names())
    if (!name.ends_with("3D")) {
      EXPECT_TRUE(has(help, name)) << name << "\n" << help.output;
    }
  EXPECT_TRUE(has(help, "ZeusLocalPowerState")) << help.output;
  EXPECT_TRUE(has(help, "Perseus,")) << help.output;
}

TEST_F(Cli, ServeAndGpuRefuseBadSettingsWithUsageErrors) {
  auto unknown = run("serve --scheduler Nope");
  EXPECT_EQ(unknown.code, 64);
  EXPECT_NE(unknown.output.find("unknown scheduler 'Nope'"), std::string::npos);
  auto bad_json = run("serve --scheduler-args '{bad'");
  EXPECT_EQ(bad_json.code, 64);
  EXPECT_NE(bad_json.output.find("--scheduler-args"), std::string::npos);
  auto bad_arg = run("serve --scheduler TwoFrequencies --scheduler-args '{\"forward_freq\": 1200}'");
  EXPECT_EQ(bad_arg.code, 64);
  EXPECT_NE(bad_arg.output.find("backward_freq"), std::string::npos);
  EXPECT_EQ(run("serve --mode watts").code, 64);
  auto bad_host = run("serve --host nope --port 0 --no-dump");
  EXPECT_EQ(bad_host.code, 64);
  EXPECT_NE(bad_host.output.find("--host 'nope' is not an IP address"), std::string::npos) << bad_host.output;
  auto retention = run("serve --job-retention -1");
  EXPECT_EQ(retention.code, 64);
  EXPECT_NE(retention.output.find("--job-retention"), std::string::npos) << retention.output;
  auto env = run("serve --scheduler-args '{}' --port 0 --dump-dir x --log-level loud");
  EXPECT_EQ(env.code, 64);
  EXPECT_NE(env.output.find("--log-level"), std::string::npos);
  // Environment fallback: PERSEUS_SCHEDULER is read when --scheduler is not given.
  const fs::path log = dir_ / "env.log";
  const std::string command =
      "PERSEUS_SCHEDULER=Nope " + std::string(PERSEUS_BINARY) + " serve > " + log.string() + " 2>&1";
  EXPECT_NE(std::system(command.c_str()), 0);
  EXPECT_NE(perseus::read_file(log).find("unknown scheduler 'Nope'"), std::string::npos);

  auto missing = run("gpu --nvml /no/such/libnvidia-ml.so.1");
  EXPECT_EQ(missing.code, 66);
  EXPECT_NE(missing.output.find("/no/such/libnvidia-ml.so.1"), std::string::npos);
  auto fake = run(std::string("gpu --nvml ") + PERSEUS_FAKE_NVML);
  EXPECT_EQ(fake.code, 0);
  EXPECT_NE(fake.output.find("81 values, 1410 .. 210 MHz"), std::string::npos) << fake.output;

  // gpu reset: every GPU, one GPU, a GPU that does not exist, a driver that refuses.
  auto reset = run(std::string("gpu reset --nvml ") + PERSEUS_FAKE_NVML);
  EXPECT_EQ(reset.code, 0) << reset.output;
  EXPECT_NE(reset.output.find("GPU 0: clocks and power limit reset (400 W, the driver's default)"), std::string::npos)
      << reset.output;
  // The driver's default limit, not the top of the range, on a GPU whose board allows more.
  const auto default_env =
      "PERSEUS_FAKE_NVML_DEFAULT_LIMIT_W=300 PERSEUS_FAKE_NVML_STATE=" + (dir_ / "gpu_reset_default.state").string();
  auto to_default = run(std::string("gpu reset --nvml ") + PERSEUS_FAKE_NVML, default_env);
  EXPECT_NE(to_default.output.find("GPU 0: clocks and power limit reset (300 W, the driver's default)"),
            std::string::npos)
      << to_default.output;
  auto listed = run(std::string("gpu --nvml ") + PERSEUS_FAKE_NVML, default_env);
  EXPECT_NE(listed.output.find("300 W (range 150 .. 400 W, default 300 W)"), std::string::npos) << listed.output;
  EXPECT_EQ(run(std::string("gpu reset --device 0 --nvml ") + PERSEUS_FAKE_NVML).code, 0);
  auto no_device = run(std::string("gpu reset --device 3 --nvml ") + PERSEUS_FAKE_NVML);
  EXPECT_EQ(no_device.code, 64);
  EXPECT_NE(no_device.output.find("--device 3: this node has 1 GPU"), std::string::npos) << no_device.output;
  auto denied = run(std::string("gpu reset --nvml ") + PERSEUS_FAKE_NVML, "PERSEUS_FAKE_NVML_DENY=1");
  EXPECT_EQ(denied.code, 1);
  EXPECT_NE(denied.output.find("GPU 0: graphics clock:"), std::string::npos) << denied.output;
  auto no_daemon = run("gpu --gpud /no/such/gpud.sock");
  EXPECT_EQ(no_daemon.code, 66);
  EXPECT_NE(no_daemon.output.find("is `perseus gpud` running on this node?"), std::string::npos) << no_daemon.output;
  EXPECT_EQ(run("gpud --socket-mode 999 --socket x.sock").code, 64);

  // serve --token-file: unreadable 66, too short 64; a public address without one warns.
  EXPECT_EQ(run("serve --token-file /no/such/token").code, 66);
  auto short_token = run("serve --token-file " + write("short.token", "abc\n"));
  EXPECT_EQ(short_token.code, 64);
  EXPECT_NE(short_token.output.find("at least 16 characters"), std::string::npos) << short_token.output;
  const fs::path open_log = dir_ / "open.log";
  const std::string open_server = std::string(PERSEUS_BINARY) + " serve --host 0.0.0.0 --port 0 --no-dump > " +
                                  open_log.string() + " 2>&1 & for i in $(seq 200); do grep -q listening " +
                                  open_log.string() + " && break; sleep 0.05; done; kill $!; wait";
  EXPECT_EQ(std::system(open_server.c_str()), 0);
  EXPECT_NE(perseus::read_file(open_log).find("without --token-file"), std::string::npos)
      << perseus::read_file(open_log);
}

}  // namespace

namespace {

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line.front() == '{') out.push_back(nlohmann::json::parse(line));
  return out;
}

// perseus whatif's saving of the pipelines that are not the straggler at T'/T = 1: the plan planned
// from the full profile, intrinsic (no straggler to use).
double intrinsic_saving(const std::string& profile) {
  auto r = run("whatif " + profile +
               " --stages 8 --microbatches 12 --p2p-power 83.64 --pipelines 2 --slowdowns 1 "
               "--baselines all-max");
  EXPECT_EQ(r.code, 0) << r.output;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string slowdown, method;
    words >> slowdown >> method;
    if (slowdown == "1.000" && method == "perseus") {
      std::string last;
      for (std::string w; words >> w;) last = w;
      return std::stod(last) / 100;
    }
  }
  ADD_FAILURE() << "no perseus row:\n" << r.output;
  return 0;
}

}  // namespace

// The turnkey loop end to end: perseus serve --scheduler Perseus + perseus simulate on a real profile
// with 2 pipelines deploys a plan whose measured saving is within 1 point of whatif's, at no more than
// 0.5% slowdown; a 1.2x straggler is detected without any API call, the other pipeline slows down
// to it (less energy), and returns when it recovers.
TEST_F(Cli, TurnkeyServeAndSimulateEndToEnd) {
  const std::string profile = std::string(PERSEUS_SOURCE_DIR) + "/examples/gpt3-175b-a100.csv";
  // The simulated ranks register their jobs with a secret; perseus straggler below acts as the
  // administrator, with the server's token (every command here gets it from PERSEUS_TOKEN).
  fs::create_directories(dir_ / "serve");
  perseus::write_file_atomic(dir_ / "serve" / "token", "0123456789abcdef-admin\n");
  ::setenv("PERSEUS_TOKEN", "0123456789abcdef-admin", 1);
  struct Unset {
    ~Unset() { ::unsetenv("PERSEUS_TOKEN"); }
  } unset;
  perseus::testing::ServeProcess serve(dir_ / "serve", "Perseus", R"({"wait_for_plan": true})", "--token-file token");
  ASSERT_NE(serve.port, 0);
  // 700 iterations: the server's saving and slowdown cover the last 60 rounds (300 iterations), past
  // the straggler and the rounds its recovery takes to detect.
  auto r = run("simulate " + profile +
               " --stages 8 --microbatches 12 --p2p-power 83.64 --pipelines 2 --iterations 700 "
               "--report-every 50 --straggler 1:1.2@201-300 --json --server " +
               serve.url());
  ASSERT_EQ(r.code, 0) << r.output;
  auto lines = json_lines(r.output);
  ASSERT_EQ(lines.size(), 15u) << r.output;  // 14 reports and the summary
  const auto& summary = lines.back()["summary"];
  const auto& server = summary["server"];
  ASSERT_TRUE(server.is_object()) << summary.dump();
  EXPECT_EQ(server["phase"], "done");  // training over: every rank closed its client
  EXPECT_EQ(server["end_detail"], "[profiling-done] training finished: every rank closed its client");
  EXPECT_NEAR(server["saving"].get<double>(), intrinsic_saving(profile), 0.01) << server.dump();
  EXPECT_LE(server["slowdown"].get<double>(), 0.005);
  auto energy = [&](int window, int pipeline) {
    return lines[window]["report"]["pipelines"][pipeline]["energy"].get<double>();
  };
  EXPECT_LT(energy(5, 0), 0.95 * energy(3, 0));   // iterations 251-300: slowed to the straggler
  EXPECT_NEAR(energy(7, 0), energy(3, 0), 1e-6);  // 351-400: back to the target plan
  bool detected = false;
  for (const auto& d : server["decisions"]) detected = detected || d["event"] == "straggler detected";
  EXPECT_TRUE(detected) << server["decisions"].dump();

  // A job that is still training: tell it about a straggler, see it, clear it.
  const pid_t trainer =
      perseus::testing::spawn(dir_,
                              std::string(PERSEUS_BINARY) + " simulate " + profile +
                                  " --stages 8 --microbatches 12 --p2p-power 83.64 "
                                  "--pipelines 2 --iterations 100000000 --report-every 1000000 --server " +
                                  serve.url(),
                              "trainer");
  std::string job;
  for (int i = 0; i < 1000 && job.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto jobs = nlohmann::json::parse(run("status --json --server " + serve.url()).output, nullptr, false);
    if (jobs.is_array())
      for (const auto& j : jobs)
        if (j["phase"] == "deployed") job = j["job_id"];
  }
  ASSERT_FALSE(job.empty()) << "the second job never deployed";
  auto told = run("straggler '" + job + "' --slowdown 1.1 --dp-rank 1 --server " + serve.url());
  EXPECT_EQ(told.code, 0) << told.output;
  auto shown = run("status '" + job + "' --server " + serve.url());
  EXPECT_NE(shown.output.find("straggler: pipeline 1 (api), 1.100x"), std::string::npos) << shown.output;
  EXPECT_NE(shown.output.find("plan: frontier point"), std::string::npos) << shown.output;
  EXPECT_EQ(run("straggler '" + job + "' --clear --server " + serve.url()).code, 0);
  EXPECT_EQ(run("straggler '" + job + "' --server " + serve.url()).code, 64);  // none of the three
  EXPECT_EQ(run("straggler '" + job + "' --slowdown 1.1 --clear --server " + serve.url()).code, 64);
  auto unknown = run("straggler nope --clear --server " + serve.url());
  EXPECT_EQ(unknown.code, 1);
  EXPECT_NE(unknown.output.find("404"), std::string::npos) << unknown.output;
  auto ended = run("straggler '" + std::string(summary["job_id"]) + "' --slowdown 1.2 --server " + serve.url());
  EXPECT_EQ(ended.code, 1);
  EXPECT_NE(ended.output.find("has ended"), std::string::npos) << ended.output;
  ::kill(trainer, SIGINT);
  for (int i = 0; i < 500 && perseus::testing::ServeProcess::alive(trainer); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

TEST_F(Cli, SimulatePrintsReportsAndASummaryAndEndsCleanlyOnCtrlC) {
  const std::string profile = std::string(PERSEUS_SOURCE_DIR) + "/examples/gpt3-175b-a100.csv";
  perseus::testing::ServeProcess serve(dir_ / "serve", "AllMaxFrequency", "{}", "--no-dump");
  ASSERT_NE(serve.port, 0);
  const std::string shape = " --stages 8 --microbatches 12 --p2p-power 83.64 --server " + serve.url();
  auto r = run("simulate " + profile + shape + " --pipelines 2 --iterations 20 --report-every 10");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("iterations 1-10: 2.8365 s and 14678.0 J per iteration (all GPUs)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("  pipeline 1: compute 2.8365 s, 7339.0 J"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("summary: 20 iterations (ran 20 iterations)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("server: done (AllMaxFrequency), round 4"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("GPU speeds"), std::string::npos) << "GPUs all alike: nothing to say";
  // Under a spread, the summary names the slowest and fastest GPU; with --json, it lists every one.
  auto spread = run("simulate " + profile + shape + " --pipelines 2 --iterations 10 --gpu-speed-spread 0.02 --seed 5");
  ASSERT_EQ(spread.code, 0) << spread.output;
  const auto said = spread.output.find("GPU speeds (--gpu-speed-spread): time and energy x1.");
  ASSERT_NE(said, std::string::npos) << spread.output;
  EXPECT_NE(spread.output.find("on the slowest (pipeline ", said), std::string::npos) << spread.output;
  EXPECT_NE(spread.output.find(" on the fastest (pipeline ", said), std::string::npos) << spread.output;
  auto listed = json_lines(
      run("simulate " + profile + shape + " --pipelines 2 --iterations 10 --gpu-speed-spread 0.02 --seed 5 --json")
          .output);
  ASSERT_FALSE(listed.empty());
  const auto& speeds = listed.back()["summary"]["gpu_speeds"];
  ASSERT_EQ(speeds.size(), 2u) << speeds.dump();
  double slowest = 0;
  for (const auto& stages : speeds) {
    ASSERT_EQ(stages.size(), 8u) << speeds.dump();
    for (const auto& ranks : stages) slowest = std::max(slowest, ranks.at(0).get<double>());
  }
  EXPECT_NE(spread.output.find(fmt::format("x{:.4f} on the slowest", slowest)), std::string::npos) << spread.output;

  // --foreground: timeout otherwise signals the command and then its own process group, and the
  // second SIGINT, once the first was handled, ends the process at once (as a second Ctrl-C should).
  auto stopped = run("simulate " + profile + shape + " --iterations 100000000 --json",
                     "timeout --foreground --preserve-status -s INT 2");
  EXPECT_EQ(stopped.code, 130) << stopped.output;
  auto lines = json_lines(stopped.output);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back()["summary"]["ended"].get<std::string>().find("interrupted after"), std::string::npos);

  auto gone =
      run("simulate " + profile + " --stages 8 --microbatches 12 --p2p-power 83.64 --server http://127.0.0.1:1");
  EXPECT_EQ(gone.code, 66) << gone.output;
  EXPECT_NE(gone.output.find("perseus serve"), std::string::npos) << gone.output;
  auto bad = run("simulate " + profile + shape + " --straggler 5:1.2");
  EXPECT_EQ(bad.code, 64) << bad.output;
  EXPECT_NE(bad.output.find("only 1 pipelines"), std::string::npos) << bad.output;
  auto scale = run("simulate " + profile + shape + " --time-scale -1");
  EXPECT_EQ(scale.code, 64) << scale.output;
  EXPECT_NE(scale.output.find("--time-scale"), std::string::npos) << scale.output;
  auto uncovered = run("simulate " + example_ + shape);  // 4 stages in the file, 8 asked
  EXPECT_EQ(uncovered.code, 65) << uncovered.output;
}

// --recompute plans 1F1B with activation recomputation; the frontier records it, so that
// emulate, whatif and plot judge its plans with recomputation too.
TEST_F(Cli, RecomputeIsPlannedRecordedAndFollowedByTheFrontiersReaders) {
  const std::string with = (dir_ / "with").string(), without = (dir_ / "without").string();
  const std::string shape = " --stages 4 --microbatches 6 --p2p-power 75 --quiet --out ";
  ASSERT_EQ(run("optimize " + example_ + shape + with + " --recompute").code, 0);
  ASSERT_EQ(run("optimize " + example_ + shape + without).code, 0);
  auto meta = nlohmann::json::parse(perseus::read_file(with + "/plans.json"));
  EXPECT_EQ(meta["recompute"], true);
  EXPECT_EQ(nlohmann::json::parse(perseus::read_file(without + "/plans.json"))["recompute"], false);
  EXPECT_NE(perseus::read_file(with + "/frontier.csv"), perseus::read_file(without + "/frontier.csv"));
  // The fastest plan of the recomputing frontier, emulated: the record says recompute, so the
  // backwards carry their forwards without the flag; the same with the flag given again.
  auto by_record = run("emulate --frontier " + with + " --index 0");
  auto by_flag = run("emulate " + example_ + " --frontier " + with + " --index 0 --recompute");
  ASSERT_EQ(by_record.code, 0) << by_record.output;
  EXPECT_EQ(by_record.output, by_flag.output);
  auto plain = run("emulate " + example_ + " --stages 4 --microbatches 6 --p2p-power 75 --baseline all-max");
  auto recomputed =
      run("emulate " + example_ + " --stages 4 --microbatches 6 --p2p-power 75 --baseline all-max --recompute");
  ASSERT_EQ(recomputed.code, 0) << recomputed.output;
  EXPECT_NE(plain.output, recomputed.output);
}

TEST_F(Cli, InterleavedIsPlannedRecordedAndFollowedByTheFrontiersReaders) {
  // 4 stages x 2 model chunks: the profile has 8 model stages (stage = chunk x 4 + pipeline stage).
  const std::string profile = (dir_ / "eight.csv").string();
  ASSERT_EQ(run("synth-profile --stages 8 --out " + profile).code, 0);
  const std::string out = (dir_ / "il").string();
  auto r = run("optimize " + profile +
               " --stages 4 --schedule interleaved --virtual-stages 2 --microbatches 8 "
               "--p2p-power 70 --quiet --out " +
               out);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto meta = nlohmann::json::parse(perseus::read_file(out + "/plans.json"));
  EXPECT_EQ(meta["schedule"], "interleaved");
  EXPECT_EQ(meta["virtual_stages"], 2);
  EXPECT_EQ(meta["cost_models"].size(), 16u);  // a forward and a backward per model stage
  r = run("plans show " + out + " --index 0");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("stage 3: F0c0@"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" F0c1@"), std::string::npos) << r.output;
  // The fastest point emulates in exactly the planner's time (quantized), as for 1F1B.
  r = run("emulate --frontier " + out + " --quantize");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto predicted = r.output.substr(r.output.find("prediction: ") + 12, 8);
  EXPECT_NE(r.output.find("iteration time " + predicted), std::string::npos) << r.output;
  // A JSON plan carries the schedule; emulating it needs no schedule flags.
  r = run("plans show " + out + " --slowdown 1.1 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string plan = write("plan.json", r.output);
  r = run("emulate " + profile + " --stages 4 --microbatches 8 --p2p-power 70 --plan " + plan);
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("whatif --frontier " + out + " --pipelines 4");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("zeus-stage"), std::string::npos);
  // Planning in-process gives the same report.
  auto in_process = run("whatif " + profile +
                        " --stages 4 --schedule interleaved --virtual-stages 2 --microbatches 8 "
                        "--p2p-power 70 --pipelines 4");
  ASSERT_EQ(in_process.code, 0) << in_process.output;
  EXPECT_EQ(in_process.output.substr(in_process.output.find("all-max")), r.output.substr(r.output.find("all-max")));
  r = run("plot timeline --frontier " + out + " --out " + (dir_ / "t.svg").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(perseus::read_file(dir_ / "t.svg").find("F7c1"), std::string::npos);
  // Megatron-LM's requirements, and the profile's model stages, are checked with clear errors.
  r = run("optimize " + profile +
          " --stages 4 --schedule interleaved --virtual-stages 2 --microbatches 6 --p2p-power 70 "
          "--quiet --out " +
          out + "2");
  EXPECT_EQ(r.code, 64);
  EXPECT_NE(r.output.find("multiple of the stages"), std::string::npos) << r.output;
  r = run("optimize " + profile +
          " --stages 4 --schedule interleaved --virtual-stages 3 --microbatches 8 --p2p-power 70 "
          "--quiet --out " +
          out + "2");
  EXPECT_EQ(r.code, 65);
  EXPECT_NE(r.output.find("the profile has 8 model stages (0..7), but the interleaved schedule runs 3 model stages on "
                          "every pipeline stage, so 4 stages need 12"),
            std::string::npos)
      << r.output;
  r = run("optimize " + profile + " --stages 8 --virtual-stages 2 --microbatches 8 --p2p-power 70 --quiet --out " +
          out + "2");
  EXPECT_EQ(r.code, 64);
  EXPECT_NE(r.output.find("needs --schedule interleaved"), std::string::npos) << r.output;
}

TEST_F(Cli, WhatIfMetersWithThePapersConventionOnRequest) {
  const std::string shape =
      " --stages 4 --microbatches 6 --p2p-power 75 --pipelines 8 --slowdowns 1,1.2 --baselines zeus-global";
  auto ours = run("whatif " + example_ + shape);
  auto paper = run("whatif " + example_ + shape + " --convention paper --out " + (dir_ / "paper.csv").string());
  ASSERT_EQ(ours.code, 0) << ours.output;
  ASSERT_EQ(paper.code, 0) << paper.output;
  EXPECT_EQ(ours.output.find("paper's convention"), std::string::npos);
  EXPECT_NE(paper.output.find("paper's convention: T = the planner's fastest"), std::string::npos) << paper.output;
  const std::string csv = perseus::read_file(dir_ / "paper.csv");
  EXPECT_NE(csv.find("1.2,perseus,"), std::string::npos) << csv;
  EXPECT_EQ(run("whatif " + example_ + shape + " --convention notebook").code, 64);
}

// --threads 2 plans the same files as one thread (the solver test compares every point; here the
// flag reaches the solver), and a count it does not offer is a usage error.
TEST_F(Cli, OptimizeThreadsGiveTheSameFrontier) {
  const std::string one = (dir_ / "one").string(), two = (dir_ / "two").string();
  const std::string shape = " --stages 4 --microbatches 16 --p2p-power 75 --unit-time 0.0005 --quiet --out ";
  ASSERT_EQ(run("optimize " + example_ + shape + one + " --threads 1").code, 0);
  auto r = run("optimize " + example_ + shape + two + " --threads 2");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* file : {"/frontier.csv", "/plan_changes.csv"})
    EXPECT_EQ(perseus::read_file(one + file), perseus::read_file(two + file)) << file;
  const std::string frontier = perseus::read_file(one + "/frontier.csv");
  EXPECT_GT(std::count(frontier.begin(), frontier.end(), '\n'), 100);  // enough points to hand over
  r = run("optimize " + example_ + shape + two + " --threads 3");
  EXPECT_EQ(r.code, 64);
  EXPECT_NE(r.output.find("--threads"), std::string::npos) << r.output;
}

// A profile with one clock per stage and instruction has one plan, all-max: its frontier is that
// one point. Energies so large that they do not add up are a failed computation (exit 1) saying
// why, with nothing written.
TEST_F(Cli, OptimizeAlwaysPlansButFailsOnSumsThatOverflow) {
  const std::string one_clock = write("one.csv",
                                      "stage,instruction,frequency,time,energy\n"
                                      "0,forward,1410,0.010,2.0\n0,backward,1410,0.020,4.0\n"
                                      "1,forward,1410,0.010,2.0\n1,backward,1410,0.020,4.0\n");
  auto r = run("optimize " + one_clock + " --stages 2 --microbatches 2 --p2p-power 75 --quiet --out " +
               (dir_ / "one").string());
  EXPECT_EQ(r.code, 0) << r.output;
  const auto record = perseus::read_frontier_record(dir_ / "one");
  ASSERT_EQ(record.points.size(), 1u);
  EXPECT_EQ(record.start_frequencies,
            (std::vector<std::vector<int>>{{1410, 1410, 1410, 1410}, {1410, 1410, 1410, 1410}}));
  std::string huge = "stage,instruction,frequency,time,energy\n";
  for (int stage = 0; stage < 2; ++stage)
    for (const char* kind : {"forward", "backward"})
      for (int clock : {1410, 1200, 1000, 800})
        huge += fmt::format("{},{},{},{},1e308\n", stage, kind, clock, 0.01 * 1410 / clock);
  r = run("optimize " + write("huge.csv", huge) + " --stages 2 --microbatches 2 --p2p-power 75 --quiet --out " +
          (dir_ / "huge").string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("no frontier"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "huge" / "frontier.csv"));
}

// Where the server keeps its store decides how it starts: a dump folder it cannot write to exits
// 73 naming it; a directory where the store should be is moved aside and the server starts.
TEST_F(Cli, ServeExits73WithoutAWritableDumpFolderAndStartsPastADirectoryAtItsStore) {
  write("file", "not a folder\n");
  auto r = run(fmt::format("serve --port 0 --dump-dir {}", (dir_ / "file" / "dump").string()));
  EXPECT_EQ(r.code, 73) << r.output;
  EXPECT_NE(r.output.find(".perseus.db"), std::string::npos) << r.output;
  if (::geteuid() != 0) {  // root writes into a read-only folder
    fs::create_directories(dir_ / "readonly");
    fs::permissions(dir_ / "readonly", fs::perms::owner_read | fs::perms::owner_exec);
    r = run(fmt::format("serve --port 0 --dump-dir {}", (dir_ / "readonly").string()));
    EXPECT_EQ(r.code, 73) << r.output;
    fs::permissions(dir_ / "readonly", fs::perms::owner_all);
  }
  fs::create_directories(dir_ / "dump" / ".perseus.db" / "inside");
  r = run(fmt::format("serve --port 0 --dump-dir {}", (dir_ / "dump").string()), "timeout 3");
  EXPECT_EQ(r.code, 124) << "it ran until stopped: " << r.output;
  EXPECT_NE(r.output.find("is not a file: moved it to"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_regular_file(dir_ / "dump" / ".perseus.db"));
}

// A plan's own account of its shape must match what it holds: 1e12 stages for one stage list, or
// an instruction its schedule never runs, is an error naming the field, for every reader.
TEST_F(Cli, PlansWhoseShapeContradictsThemselvesAreRefused) {
  const std::string huge = write("huge.json", R"({"frequencies": [[1410, 1200]], "num_stages": 1e12})");
  const std::string named = write("named.json", R"({"frequencies": [[1410, 1200, 1410, 1200]], "num_stages": 1,
    "num_microbatches": 2, "schedule": "1f1b", "instructions": [["F0", "B0", "F999999999999", "B1"]]})");
  const std::string good = write("good.json", R"({"frequencies": [[1410, 1200, 1410, 1200]], "num_stages": 1,
    "num_microbatches": 2, "schedule": "1f1b", "instructions": [["F0", "B0", "F1", "B1"]]})");
  auto r = run("plans read " + huge);
  EXPECT_EQ(r.code, 65) << r.output;
  EXPECT_NE(r.output.find("field 'num_stages'"), std::string::npos) << r.output;
  r = run("plans read " + named);
  EXPECT_EQ(r.code, 65) << r.output;
  EXPECT_NE(r.output.find("field 'instructions[0][2]'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("F999999999999"), std::string::npos) << r.output;
  EXPECT_EQ(run("plans read " + good).code, 0);
  const std::string profile = write("one-stage.csv",
                                    "stage,instruction,frequency,time,energy\n0,forward,1410,0.010,3\n"
                                    "0,forward,1200,0.012,2.5\n0,backward,1410,0.020,6\n0,backward,1200,0.024,5\n");
  auto emulate = [&](const std::string& plan) {
    return run(fmt::format("emulate {} --stages 1 --microbatches 2 --p2p-power 70 --plan {}", profile, plan));
  };
  EXPECT_EQ(emulate(good).code, 0) << emulate(good).output;
  for (const auto& [plan, field] : {std::pair{huge, "num_stages"}, std::pair{named, "instructions[0][2]"}}) {
    r = emulate(plan);
    EXPECT_EQ(r.code, 65) << plan << ": " << r.output;
    EXPECT_NE(r.output.find(fmt::format("field '{}'", field)), std::string::npos) << r.output;
  }
}

// The noisy profiles on which the exponential fit alone finds no frontier (../shared/data/noplan)
// plan with the default cost model, saying where the hull stands in for the fit and why; the
// reference mode exits naming the (stage, instruction) that stopped it and that auto plans it.
TEST_F(Cli, NoisyProfilesPlanWithTheFallbackStated) {
  const fs::path data = fs::path(PERSEUS_SHARED_DIR) / "data" / "noplan";
  if (!fs::exists(data)) GTEST_SKIP() << "no " << data;
  struct Case {
    const char* file;
    int stages, microbatches;
  };
  for (const Case& c :
       {Case{"two-stage-noisy.csv", 2, 2}, Case{"four-stage-noisy.csv", 4, 12}, Case{"seven-stage-noisy.csv", 7, 6}}) {
    SCOPED_TRACE(c.file);
    const std::string args = fmt::format("optimize {} --stages {} --microbatches {} --p2p-power 75 --out ",
                                         (data / c.file).string(), c.stages, c.microbatches);
    auto r = run(args + (dir_ / "auto").string());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("cost model: piecewise-linear for stage "), std::string::npos) << r.output;
    const auto meta = nlohmann::json::parse(perseus::read_file(dir_ / "auto" / "plans.json"));
    int fallbacks = 0;
    for (const auto& entry : meta["cost_models"]) fallbacks += entry.contains("fallback") ? 1 : 0;
    EXPECT_GT(fallbacks, 0) << meta["cost_models"].dump();
    const auto record = perseus::read_frontier_record(dir_ / "auto");
    EXPECT_GT(record.points.size(), 100u);
    EXPECT_EQ(meta["stop_reason"], "the minimum cut crosses a fixed dependency: the iteration cannot get shorter");

    r = run(args + (dir_ / "exp").string() + " --cost-model exp");
    EXPECT_NE(r.code, 0) << r.output;
    // The fit fails (seven stages: a stage with two options) or stops the solver (the others).
    EXPECT_NE(r.output.find("--cost-model auto"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("stage "), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "exp" / "frontier.csv"));
  }
}

// The times perseus shows are what its plans take on the profile. On the shipped 4-stage example,
// whose top clock is every operation's fastest, the fastest plan runs exactly as fast as all-max on
// every schedule, `plans show` prints the emulated time of the plan it shows, and --slowdown 1.0
// picks a plan no slower than all-max, for less energy.
TEST_F(Cli, TheFastestPlanRunsAsFastAsAllMaxOnEverySchedule) {
  const std::string example = std::string(PERSEUS_SOURCE_DIR) + "/examples/synthetic-4stage.csv";
  const std::string split = (dir_ / "split.csv").string();
  ASSERT_EQ(run("synth-profile --from " + example + " --split-backward 0.55 --out " + split).code, 0);
  struct Case {
    const char* schedule;
    std::string profile, shape;
  };
  for (const Case& c :
       {Case{"1f1b", example, "--stages 4 --microbatches 8"}, Case{"gpipe", example, "--stages 4 --microbatches 8"},
        Case{"interleaved", example, "--stages 2 --virtual-stages 2 --microbatches 4"},
        Case{"zb-h1", split, "--stages 4 --microbatches 8"}, Case{"zbv", split, "--stages 2 --microbatches 8"},
        Case{"dualpipev", split, "--stages 2 --microbatches 8"}}) {
    SCOPED_TRACE(c.schedule);
    const std::string dir = (dir_ / c.schedule).string();
    const std::string pipeline = fmt::format("{} {} --p2p-power 75 --schedule {}", c.profile, c.shape, c.schedule);
    auto r = run("optimize " + pipeline + " --quiet --out " + dir);
    ASSERT_EQ(r.code, 0) << r.output;
    r = run("emulate " + pipeline + " --baseline all-max --json");
    ASSERT_EQ(r.code, 0) << r.output;
    const auto all_max = nlohmann::json::parse(r.output);
    r = run("plans show " + dir + " --json");
    ASSERT_EQ(r.code, 0) << r.output;
    const auto fastest = nlohmann::json::parse(r.output);
    EXPECT_NEAR(fastest["time"].get<double>(), all_max["iteration_time"].get<double>(),
                1e-9 * all_max["iteration_time"].get<double>());
    EXPECT_LE(fastest["planned_time"].get<double>(), fastest["time"].get<double>()) << "floors read short";
    // The text shows the same time, with 10 significant digits.
    r = run("plans show " + dir);
    EXPECT_NE(r.output.find(fmt::format("iteration time {:.10g} s", fastest["time"].get<double>())), std::string::npos)
        << r.output;
    // What --slowdown 1.0 picks runs no slower than all-max on the emulator, for less energy.
    r = run("plans export " + dir + " --slowdown 1.0 --format json --out " + dir + "/chosen");
    ASSERT_EQ(r.code, 0) << r.output;
    const auto index = perseus::read_frontier_record(dir).points.size();
    std::string chosen;
    for (const auto& entry : fs::directory_iterator(dir + "/chosen")) chosen = entry.path().string();
    r = run("emulate " + pipeline + " --plan " + chosen + " --json");
    ASSERT_EQ(r.code, 0) << r.output;
    const auto emulated = nlohmann::json::parse(r.output);
    EXPECT_LE(emulated["iteration_time"].get<double>(), all_max["iteration_time"].get<double>() * (1 + 1e-9));
    EXPECT_LT(emulated["energy"].get<double>(), all_max["energy"].get<double>());
    const auto plan = nlohmann::json::parse(perseus::read_file(chosen));
    EXPECT_NEAR(plan["time"].get<double>(), emulated["iteration_time"].get<double>(),
                1e-9 * emulated["iteration_time"].get<double>());
    EXPECT_GT(index, 10u);
  }
}

// The energy-optimal end is in plain view: the summary names the cheapest plan, `plans show
// --min-energy` shows it, and frontier.csv marks the points slower and costlier than another.
TEST_F(Cli, TheCheapestPlanIsShownAndDominatedPointsMarked) {
  const std::string example = std::string(PERSEUS_SOURCE_DIR) + "/examples/synthetic-4stage.csv";
  const std::string dir = (dir_ / "out").string();
  auto r = run("optimize " + example + " --stages 4 --microbatches 8 --p2p-power 75 --out " + dir);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto record = perseus::read_frontier_record(dir);
  std::size_t cheapest = 0;
  for (std::size_t i = 0; i < record.points.size(); ++i)
    if (record.points[i].emulated_energy < record.points[cheapest].emulated_energy) cheapest = i;
  // The blocking power grows with time: the slowest plan is not the cheapest.
  ASSERT_GT(cheapest, 0u);
  ASSERT_LT(cheapest + 1, record.points.size());
  const auto& c = record.points[cheapest];
  EXPECT_NE(r.output.find(
                fmt::format("cheapest {:.10g} s at {:.10g} J (point {}", c.emulated_time, c.emulated_energy, cheapest)),
            std::string::npos)
      << r.output;
  r = run("plans show " + dir + " --min-energy");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(
      r.output.rfind(
          fmt::format("plan {} of {}: iteration time {:.10g} s", cheapest, record.points.size(), c.emulated_time), 0),
      0u)
      << r.output;
  EXPECT_NE(run("plans show " + dir + " --min-energy --index 3").code, 0);

  // frontier.csv's dominated column: a point is dominated exactly when another is at most as slow
  // and cheaper (or faster and at most as costly).
  std::size_t dominated = 0;
  for (std::size_t i = 0; i < record.points.size(); ++i) {
    const auto& p = record.points[i];
    bool beaten = false;
    for (const auto& q : record.points)
      beaten |= (q.emulated_time <= p.emulated_time && q.emulated_energy < p.emulated_energy) ||
                (q.emulated_time < p.emulated_time && q.emulated_energy <= p.emulated_energy);
    EXPECT_EQ(p.dominated, beaten) << "point " << i;
    dominated += p.dominated;
  }
  EXPECT_TRUE(record.points.front().dominated) << "the cheapest plan is faster and cheaper than the slowest";
  EXPECT_FALSE(record.points[cheapest].dominated);
  const std::string csv = perseus::read_file(dir + "/frontier.csv");
  EXPECT_EQ(csv.rfind("index,time,energy,quant_time,cost_change,effective_cost,profile_energy,emulated_time,"
                      "emulated_energy,dominated\n",
                      0),
            0u);
  EXPECT_GT(dominated, 0u);
  // The picture draws them apart.
  r = run("plot frontier " + dir + " --no-baselines --out " + dir + "/frontier.svg");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(perseus::read_file(dir + "/frontier.svg").find("class=\"dominated\""), std::string::npos);
}
