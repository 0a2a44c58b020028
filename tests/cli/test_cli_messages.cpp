// What the `perseus` command says when something is off: the numbers it needs to fix it, nothing
// printed before its arguments are known good, where to get a job's secret, and that a script can
// wait for a server it just started.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_process.hpp"
#include "perseus/client/http_client.hpp"
#include "process_fixture.hpp"

namespace perseus::testing {
namespace {

namespace fs = std::filesystem;

const std::string kExample = std::string(PERSEUS_SOURCE_DIR) + "/examples/synthetic-4stage.csv";
const std::string kShape = " --microbatches 8 --p2p-power 75";

bool says(const CliResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

int unused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t size = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  ::close(fd);
  return ntohs(address.sin_port);
}

TEST(CliMessages, AProfileOfOtherStageCountsSaysHowManyItHasAndWhatFits) {
  const fs::path out = test_dir();
  // zbv runs two model stages per GPU stage (a V): its profile holds 2 x S of them.
  const std::string split = (out / "split.csv").string();
  ASSERT_EQ(run_cli("synth-profile --from " + kExample + " --split-backward 0.5 --out " + split).code, 0);
  const std::string optimize = " --out " + (out / "frontier").string();
  struct Case {
    std::string command, says;
  };
  for (const auto& [command, expected] : std::vector<Case>{
           {"optimize " + kExample + " --stages 5" + kShape + optimize,
            "the profile has 4 model stages (0..3), but a pipeline of 5 stages needs 5; this profile fits 4 pipeline "
            "stages"},
           {"emulate " + kExample + " --stages 3" + kShape + " --baseline all-max",
            "the profile has 4 model stages (0..3), but a pipeline of 3 stages needs 3"},
           {"optimize " + split + " --schedule zbv --stages 4" + kShape + optimize,
            "the profile has 4 model stages (0..3), but the zbv schedule runs 2 model stages on every pipeline stage "
            "(a V), so 4 stages need 8; this profile fits 2 pipeline stages"},
           {"optimize " + kExample + " --schedule interleaved --virtual-stages 2 --stages 4" + kShape + optimize,
            "the interleaved schedule runs 2 model stages on every pipeline stage, so 4 stages need 8; this profile "
            "fits 2 pipeline stages"}}) {
    auto r = run_cli(command);
    EXPECT_EQ(r.code, 65) << command << "\n" << r.output;
    EXPECT_TRUE(says(r, expected)) << command << "\n" << r.output;
  }
  EXPECT_EQ(run_cli("optimize " + split + " --schedule zbv --stages 2" + kShape + " --quiet" + optimize).code, 0);
}

TEST(CliMessages, SimulateSaysNothingOfARunItsArgumentsRuleOut) {
  for (const std::string& args : {" --stages 5" + kShape, " --stages 4" + kShape + " --straggler 5:1.2",
                                  " --stages 4" + kShape + " --time-scale -1"}) {
    auto r = run_cli("simulate " + kExample + args + " --server http://127.0.0.1:1");
    EXPECT_TRUE(r.code == 64 || r.code == 65) << args << "\n" << r.output;
    EXPECT_FALSE(says(r, "simulating")) << args << "\n" << r.output;
    EXPECT_FALSE(says(r, "perseus serve")) << "checked before the server is asked: " << r.output;
  }
}

// The library names its settings (`time_scale`); the command line says the flag its user typed.
TEST(CliMessages, TheLibrarysSettingsAreSaidAsTheFlagsTyped) {
  const std::string simulate = "simulate " + kExample + " --stages 4" + kShape + " --server http://127.0.0.1:1";
  for (const auto& [args, expected] : std::vector<std::pair<std::string, std::string>>{
           {" --straggler 5:1.2", "perseus: error: --straggler 5:...: there are only 1 pipelines (0..0)"},
           {" --time-scale -1", "perseus: error: --time-scale must be between 0 and 1000"},
           {" --clock-latency 20000", "perseus: error: --clock-latency must be between 0 and 10 s (10000 ms)"},
           {" --pipelines 5000", "at most 16384 simulated ranks (--stages x --pipelines x --tensor-parallel)"}}) {
    auto r = run_cli(simulate + args);
    EXPECT_EQ(r.code, 64) << args << "\n" << r.output;
    EXPECT_TRUE(says(r, expected)) << args << "\n" << r.output;
  }
  auto noise = run_cli("optimize " + kExample + " --stages 4" + kShape + " --noise-factor 2 --quiet --out " +
                       (test_dir() / "out").string());
  EXPECT_EQ(noise.code, 64) << noise.output;
  EXPECT_TRUE(says(noise, "perseus: error: --noise-factor must be in (0, 1]")) << noise.output;
}

TEST(CliMessages, PlansOfAFolderThatIsNoOptimizeOutputSayWhatIsExpected) {
  const fs::path dir = test_dir();
  auto empty = run_cli("plans show " + dir.string());
  EXPECT_EQ(empty.code, 66) << empty.output;
  EXPECT_TRUE(says(empty, "is no `perseus optimize` output: it has no plans.json")) << empty.output;
  auto missing = run_cli("plans show " + (dir / "nowhere").string());
  EXPECT_EQ(missing.code, 66) << missing.output;
  EXPECT_TRUE(says(missing, "is no folder")) << missing.output;
}

TEST(CliMessages, EveryHelpNamesTheExitCodes) {
  for (const std::string command : {"", "optimize", "plans", "synth-profile", "emulate", "baseline", "whatif", "plot",
                                    "serve", "gpu", "gpud", "status", "simulate", "straggler"}) {
    auto help = run_cli(command + " --help");
    EXPECT_EQ(help.code, 0) << command;
    for (const char* code : {"0 success", "1 the computation failed", "64 bad command line", "65 malformed input",
                             "66 input missing or unreadable", "73 output not writable", "130 interrupted"})
      EXPECT_TRUE(says(help, code)) << "perseus " << command << " --help: " << code << "\n" << help.output;
  }
}

TEST(CliMessages, StatusWaitsForAServerThatIsStartingAndGivesUpOnNone) {
  const fs::path dir = test_dir();
  auto none = run_cli("status --wait 0.3 --server http://127.0.0.1:1");
  EXPECT_EQ(none.code, 66) << none.output;
  EXPECT_TRUE(says(none, "waited 0.3 s")) << none.output;

  const int port = unused_port();
  spawn(dir,
        fmt::format("sh -c '{} status --wait 60 --server http://127.0.0.1:{}; echo $? > status.rc'", PERSEUS_BINARY,
                    port),
        "status");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // it asks before the server is there
  EXPECT_FALSE(fs::exists(dir / "status.rc"));
  ServeProcess server(dir / "serve", "AllMaxFrequency", "{}", "", "", port);
  ASSERT_TRUE(eventually([&] { return fs::exists(dir / "status.rc") && !read_file(dir / "status.rc").empty(); },
                         std::chrono::seconds(30)));
  EXPECT_EQ(read_file(dir / "status.rc"), "0\n") << read_file(dir / "status.out") << read_file(dir / "status.err");
}

TEST(CliMessages, ASecretJobSaysWhereItsSecretComesFromAndSimulatePrintsIt) {
  const fs::path dir = test_dir();
  ServeProcess server(dir, "Perseus", "{}");
  auto simulated =
      run_cli("simulate " + kExample + " --stages 4" + kShape + " --iterations 20 --server " + server.url());
  ASSERT_EQ(simulated.code, 0) << simulated.output;
  std::smatch found;
  ASSERT_TRUE(std::regex_search(simulated.output, found,
                                std::regex("job (\\S+) registered \\(perseus straggler on it: "
                                           "PERSEUS_JOB_SECRET=([0-9a-f]{32})\\)\n")))
      << simulated.output;
  EXPECT_LT(simulated.output.find("job " + found[1].str() + " registered"), simulated.output.find("iterations 1-"));
  // A job registered with a secret takes a straggler only with it.
  client::HttpClient rank0(server.url());
  rank0.set_job_secret("new");
  auto reply = rank0.request("POST", "/register_job",
                             R"({"job_id": "", "pp_degree": 1, "dp_degree": 1, "tp_degree": 1, "world_size": 1,
                                 "framework": "f", "model_name": "m", "partition_method": "uniform",
                                 "microbatch_size": 1, "num_microbatches": 1})",
                             std::chrono::seconds(10));
  ASSERT_EQ(reply.status, 200) << reply.body;
  const std::string job = nlohmann::json::parse(reply.body).get<std::string>();
  const std::string straggler = "straggler '" + job + "' --slowdown 1.2 --server " + server.url();
  auto without = run_cli(straggler, "env -u PERSEUS_JOB_SECRET -u PERSEUS_TOKEN");
  EXPECT_EQ(without.code, 1) << without.output;
  EXPECT_TRUE(says(without, "HTTP 403")) << without.output;
  EXPECT_TRUE(says(without, "Set PERSEUS_JOB_SECRET to the job's secret (`perseus simulate` prints it"))
      << without.output;
  auto wrong = run_cli(straggler, "PERSEUS_JOB_SECRET=" + std::string(32, '0'));
  EXPECT_TRUE(says(wrong, "PERSEUS_JOB_SECRET is set, but not to this job's secret")) << wrong.output;
  auto right = run_cli(straggler, "PERSEUS_JOB_SECRET=" + rank0.received_job_secret());
  EXPECT_FALSE(says(right, "HTTP 403")) << right.output;  // let in: the job has no ranks yet (409)
  EXPECT_TRUE(says(right, "has not started")) << right.output;

  // perseus status and the server's log say why the simulated job ended without the protocol's marker.
  auto status = run_cli("status '" + found[1].str() + "' --server " + server.url());
  EXPECT_TRUE(says(status, "  ended: training finished: every rank closed its client\n")) << status.output;
  EXPECT_FALSE(says(status, "[profiling-done]")) << status.output;
  EXPECT_NE(server.log().find("job " + found[1].str() + " done: training finished: every rank closed its client"),
            std::string::npos)
      << server.log();
  EXPECT_EQ(server.log().find("[profiling-done]"), std::string::npos) << server.log();
}

}  // namespace
}  // namespace perseus::testing
