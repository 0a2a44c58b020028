#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "perseus/pipeline/dag.hpp"
#include "perseus/solver/pipeline_times.hpp"

using namespace perseus;

namespace {

struct Case {
  const char* name;
  ScheduleKind schedule;
  int stages, microbatches, virtual_stages;
};

class CriticalMarks : public testing::TestWithParam<Case> {};

// Durations that differ per instruction, so that only some arcs are critical.
std::vector<int> uneven_durations(const PipelineDag& dag) {
  std::vector<int> durations;
  for (std::size_t i = 0; i < dag.instructions.size(); ++i) durations.push_back(2 + static_cast<int>((i * 7) % 5));
  return durations;
}

// mark_all_critical lists exactly the arcs is_critical calls critical, ascending, and marks them:
// the next update without a change confirms the marks, a change that moves the critical path does not.
TEST_P(CriticalMarks, ListsAndMarksExactlyTheCriticalArcs) {
  const Case& c = GetParam();
  const PipelineDag dag = build_pipeline_dag(c.schedule, c.stages, c.microbatches, {}, c.virtual_stages);
  std::vector<int> durations = uneven_durations(dag);
  PipelineTimes times(dag, durations, std::vector<double>(durations.size(), 1.0));
  times.compute_all();
  std::vector<int> expected;
  const int num_arcs = dag.num_nodes() + static_cast<int>(dag.edges.size());
  for (int a = 0; a < num_arcs; ++a)
    if (times.is_critical(a)) expected.push_back(a);
  std::vector<int> listed = {-1};  // replaced, not appended to
  times.mark_all_critical(listed);
  EXPECT_EQ(listed, expected);
  ASSERT_FALSE(listed.empty());
  EXPECT_TRUE(times.update());
  // Lengthen a critical instruction a lot: arcs that were not critical become so.
  const int node = listed.front() < static_cast<int>(dag.instructions.size()) ? listed.front() : 0;
  times.set_duration(node, durations[node] + 1000, 1.0);
  times.update();
  std::vector<int> after;
  times.mark_all_critical(after);
  EXPECT_TRUE(times.update());
  for (int a = 0; a < num_arcs; ++a)
    EXPECT_EQ(std::find(after.begin(), after.end(), a) != after.end(), times.is_critical(a)) << "arc " << a;
}

INSTANTIATE_TEST_SUITE_P(Schedules, CriticalMarks,
                         testing::Values(Case{"OneFOneB", ScheduleKind::one_f_one_b, 4, 8, 1},
                                         Case{"ZbH1", ScheduleKind::zb_h1, 4, 8, 1},
                                         Case{"Zbv", ScheduleKind::zbv, 3, 6, 2}),
                         [](const testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
