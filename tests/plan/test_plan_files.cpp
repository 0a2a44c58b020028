#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "perseus/plan/plan_files.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/util/csv.hpp"
#include "perseus/util/error.hpp"
#include "solver_fixtures.hpp"

using namespace perseus;

namespace {
std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("perseus_test_" + name + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// The InputError a parser throws on `text`, or "accepted".
std::string error_of(PlanFile (*parse)(const std::string&, const std::string&), const std::string& text,
                     const std::string& source) {
  try {
    parse(text, source);
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}
}  // namespace

TEST(FrontierRecord, RoundTripReconstructsEveryPlanExactly) {
  const auto problem = fixtures::synthetic_problem(3, 5, 0.01, 9);
  const Frontier frontier = solve_frontier(problem);
  const auto record = make_frontier_record(problem, frontier, {"synthetic.csv", "exp"});
  const auto dir = temp_dir("record");
  write_frontier_record(record, dir);
  const auto back = read_frontier_record(dir);
  ASSERT_EQ(back.points.size(), frontier.points.size());
  for (std::size_t i = 0; i < frontier.points.size(); i += 7) {
    const auto durations = frontier.durations_at(i);
    const Plan plan = plan_at(back, i);
    for (int s = 0; s < problem.dag.num_stages; ++s) {
      for (std::size_t k = 0; k < problem.dag.stage_nodes[s].size(); ++k) {
        const int node = problem.dag.stage_nodes[s][k];
        EXPECT_EQ(plan.frequencies[s][k], problem.spec_of(node).options.knob_for(durations[node]));
      }
    }
    EXPECT_DOUBLE_EQ(plan.time, frontier.points[i].quant_time * 0.001);
    EXPECT_DOUBLE_EQ(plan.energy, record.points[i].energy);
    EXPECT_EQ(plan.emulated_time, record.points[i].emulated_time);
  }
  // A frontier.csv written before the emulated columns still reads, without them.
  std::string csv = read_file(dir / "frontier.csv"), old;
  LineReader reader(csv);
  for (std::string_view line; reader.next(line);) {
    const auto fields = split_csv_line(line);
    old += fmt::format("{}\n", fmt::join(fields.begin(), fields.begin() + 7, ","));
  }
  write_file_atomic(dir / "frontier.csv", old);
  const auto older = read_frontier_record(dir);
  ASSERT_EQ(older.points.size(), frontier.points.size());
  EXPECT_FALSE(older.points[0].has_emulated());
  EXPECT_EQ(older.points[0].time, back.points[0].time);
  std::filesystem::remove_all(dir);
}

TEST(FrontierRecord, CheapestWithinDeadline) {
  FrontierRecord record;
  for (auto [t, e] : std::vector<std::pair<double, double>>{{3.0, 10}, {2.9, 9.5}, {2.8, 11}, {2.7, 12}}) {
    RecordedPoint p;
    p.time = t;
    p.energy = e;
    record.points.push_back(p);
  }
  EXPECT_EQ(cheapest_within(record, 3.0), 1u);  // 2.9 s is cheaper than 3.0 s
  EXPECT_EQ(cheapest_within(record, 2.85), 2u);
  EXPECT_EQ(cheapest_within(record, 2.7), 3u);
  EXPECT_FALSE(cheapest_within(record, 2.6));
}

// Where the record has emulated times and energies, plans are chosen by them: what they take on
// the profile, not the planner's floored times.
TEST(FrontierRecord, ChoosesByEmulatedTimesWhereItHasThem) {
  FrontierRecord record;
  // (quantized, emulated) times and (model, emulated) energies: the quantized times fall, the
  // emulated ones wiggle (point 2 runs slower than point 1 on the profile).
  const std::vector<std::array<double, 4>> points = {
      {3.0, 3.04, 10, 10.2}, {2.9, 2.93, 9.5, 9.4}, {2.8, 2.95, 11, 11.3}, {2.7, 2.72, 12, 12.1}};
  for (const auto& [t, te, e, ee] : points) {
    RecordedPoint p;
    p.time = t;
    p.emulated_time = te;
    p.energy = e;
    p.emulated_energy = ee;
    record.points.push_back(p);
  }
  EXPECT_EQ(cheapest_within(record, 2.94), 1u);
  EXPECT_EQ(cheapest_within(record, 2.9), 3u) << "point 1 takes 2.93 s on the profile";
  EXPECT_FALSE(cheapest_within(record, 2.71)) << "the fastest takes 2.72 s on the profile";
  EXPECT_EQ(fastest_point(record), 3u);
  EXPECT_EQ(cheapest_point(record), 1u);
  mark_dominated(record);
  EXPECT_TRUE(record.points[0].dominated) << "point 1 is faster and cheaper on the profile";
  EXPECT_FALSE(record.points[1].dominated);
  EXPECT_TRUE(record.points[2].dominated) << "point 1 is faster and cheaper on the profile";
  EXPECT_FALSE(record.points[3].dominated);
  EXPECT_TRUE(record.points[0].has_emulated());
  record.points[0].emulated_time = std::nan("");
  EXPECT_FALSE(record.points[0].has_emulated());
  EXPECT_EQ(record.points[0].shown_time(), 3.0);
}

TEST(FrontierRecord, DominatedPointsAreSlowerAndCostlierThanAnother) {
  // Equal points dominate none of each other; one as fast and cheaper, or faster and as cheap, does.
  const std::vector<std::pair<double, double>> points = {{5, 10}, {4, 10}, {4, 9}, {3, 9}, {3, 9}, {2, 11}, {1, 12}};
  const std::vector<bool> expected = {true, true, true, false, false, false, false};
  EXPECT_EQ(dominated_points(points), expected);
  EXPECT_TRUE(dominated_points({}).empty());
}

TEST(PlanFiles, PythonPlanRoundTripsWithoutEvaluation) {
  Plan plan;
  plan.num_stages = 2;
  plan.num_microbatches = 1;
  plan.frequencies = {{1410, 1395}, {1380, 1410}};
  plan.cost_change = 0.5;
  plan.effective_cost = 100;
  plan.energy = 5736.362622327515;
  const std::string text = plan_to_python(plan, 7);
  EXPECT_EQ(text,
            "[\n[1410, 1395],\n[1380, 1410],\n]\n# Iteration 7: cost change 0.5 \n"
            "# Iteration 7: total cost 100.0 \n# Iteration 7: refined cost 5736.362622327515 \n");
  const PlanFile back = parse_python_plan(text, "freqs_pipeline_00007.py");
  EXPECT_EQ(back.frequencies, plan.frequencies);
  EXPECT_DOUBLE_EQ(*back.refined_cost, plan.energy);
  EXPECT_DOUBLE_EQ(*back.total_cost, 100.0);
}

TEST(PlanFiles, PythonCodeIsRejectedNotRun) {
  for (const std::string text : {"__import__('os').system('touch /tmp/pwned')\n", "[[1410], [1+1]]\n",
                                 "[[1410]]\nprint(1)\n", "[[1410, -5]]\n", "[[1410]", "[]\n"}) {
    EXPECT_THROW(parse_python_plan(text, "evil.py"), InputError) << text;
  }
  try {
    parse_python_plan("[\n[1410, 1395],\n[1380, x],\n]\n", "bad.py");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("bad.py:3: expected a clock", 0), 0u) << e.what();
  }
}

TEST(PlanFiles, JsonPlanValidation) {
  EXPECT_EQ(parse_json_plan(R"({"frequencies": [[1410, 900]], "time": 1.5})", "p.json").frequencies,
            (std::vector<std::vector<int>>{{1410, 900}}));
  EXPECT_THROW(parse_json_plan("{", "p.json"), InputError);
  EXPECT_THROW(parse_json_plan(R"({"frequencies": [["fast"]]})", "p.json"), InputError);
  EXPECT_THROW(parse_json_plan(R"({"time": 1})", "p.json"), InputError);
}

// Found by fuzz_plan_json and by hand: each is a clear error naming the file and field.
TEST(PlanFiles, JsonPlanEdgeCasesAreErrorsNamingTheField) {
  auto message = [](const std::string& text) { return error_of(parse_json_plan, text, "p.json"); };
  EXPECT_NE(message(R"({"frequencies": [[1410]], "energy": 405.96E620})").find("p.json"), std::string::npos)
      << "a number too large for a double is an error naming the file, not an internal error";
  EXPECT_NE(message(R"({"frequencies": [[900.5]]})").find("frequencies[0][0]"), std::string::npos)
      << "900.5 is refused, not truncated to 900";
  EXPECT_NE(message(R"({"frequencies": [[]]})").find("frequencies[0]"), std::string::npos);
  EXPECT_NE(message(R"({"frequencies": [[1410]], "format": 7})").find("format"), std::string::npos);
  EXPECT_NE(message(R"({"frequencies": [[99999999999]]})").find("positive whole number"), std::string::npos);
  EXPECT_NE(message(R"({"frequencies": [[1410]], "num_microbatches": 4294967297})").find("num_microbatches"),
            std::string::npos);
  EXPECT_NE(message(R"({"frequencies": [[1410]], "extra_forwards": {"a": 1}})").find("extra_forwards"),
            std::string::npos);
  EXPECT_EQ(message(R"({"format": "perseus-plan/1", "frequencies": [[1410, 1395]]})"), "accepted");
}

// Zeus's run_optimization.py writes per stage ("forward"|"backward", clock) tuples and its own
// comment lines; they are read as data, and written back the same way.
TEST(PlanFiles, ZeusTuplePlansRoundTrip) {
  Plan plan;
  plan.num_stages = 2;
  plan.num_microbatches = 1;
  plan.frequencies = {{1410, 1395}, {1380, 1410}};
  plan.cost_change = -0.25;
  plan.effective_cost = 100;
  plan.energy = 120.5;
  const std::string text = plan_to_zeus(plan, 12);
  EXPECT_EQ(text,
            "[\n[('forward', 1410), ('backward', 1395)],\n[('forward', 1380), ('backward', 1410)],\n]\n"
            "# Iteration 12 cost change: -0.25\n# Iteration 12 total cost: 100.0\n"
            "# Iteration 12 total cost with P2P: 120.5\n");
  const PlanFile back = parse_python_plan(text, "freqs_pipeline_00012.py");
  EXPECT_EQ(back.frequencies, plan.frequencies);
  EXPECT_EQ(back.instructions,
            (std::vector<std::vector<std::string>>{{"forward", "backward"}, {"forward", "backward"}}));
  EXPECT_DOUBLE_EQ(*back.cost_change, -0.25);
  EXPECT_DOUBLE_EQ(*back.total_cost, 100.0);
  EXPECT_DOUBLE_EQ(*back.energy, 120.5);
  // Double quotes and trailing commas inside tuples are Python too.
  const PlanFile quoted = parse_python_plan("[[(\"forward\", 1410,), (\"backward\", 1200)]]", "q.py");
  EXPECT_EQ(quoted.instructions.front().back(), "backward");
}

TEST(PlanFiles, MalformedZeusPlansAreErrorsNamingTheLine) {
  auto message = [](const std::string& text) { return error_of(parse_python_plan, text, "z.py"); };
  EXPECT_NE(message("[\n[('forward', 1410)],\n[('jump', 1410)],\n]").find("z.py:3: instruction 'jump' is not"),
            std::string::npos);
  EXPECT_NE(message("[[('forward', 1410), 1395]]").find("mixes plain clocks"), std::string::npos);
  EXPECT_NE(message("[[1410], [('forward', 1410)]]").find("every stage must list"), std::string::npos);
  EXPECT_NE(message("[[('forward', 1410)], [1410]]").find("every stage must list"), std::string::npos);
  EXPECT_NE(message("[[('forward, 1410)]]").find("unterminated string"), std::string::npos);
  EXPECT_NE(message("[[('forward' 1410)]]").find("expected ','"), std::string::npos);
  EXPECT_NE(message("[[('forward', -1)]]").find("expected a clock"), std::string::npos);
  EXPECT_NE(message("[[('forward', __import__('os'))]]").find("expected a clock"), std::string::npos);
}
