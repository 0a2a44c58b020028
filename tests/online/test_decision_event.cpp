#include <gtest/gtest.h>

#include <set>
#include <string>

#include "perseus/online/decision_event.hpp"

namespace perseus::online {
namespace {

// Every event has its own words (the status JSON, the log and the web page tell events apart by
// them), and the words others match stay as they are.
TEST(DecisionEvent, EveryEventHasItsOwnWords) {
  std::set<std::string> seen;
  int events = 0;
  for (int i = 0;; ++i) {
    const std::string words(to_string(static_cast<DecisionEvent>(i)));
    if (words == "?") break;
    EXPECT_TRUE(seen.insert(words).second) << "two events read '" << words << "'";
    ++events;
  }
  EXPECT_EQ(static_cast<std::size_t>(events), seen.size());
  EXPECT_GT(events, static_cast<int>(DecisionEvent::unpaced)) << "an event past the last one read '?'";
  EXPECT_EQ(to_string(DecisionEvent::stepped_up), "stepped up");
  EXPECT_EQ(to_string(DecisionEvent::straggler_detected), "straggler detected");
  EXPECT_EQ(to_string(DecisionEvent::straggler_cleared_api), "straggler cleared (api)");
  EXPECT_EQ(to_string(DecisionEvent::paced_to_new_speeds), "paced to the pipelines' new speeds");
  EXPECT_EQ(to_string(DecisionEvent::paced_earlier), "paced earlier");
}

}  // namespace
}  // namespace perseus::online
