// The Perseus scheduler's arguments are checked when the server starts, not at a job's first round.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "perseus/server/scheduler.hpp"
#include "perseus/util/error.hpp"

namespace perseus {
namespace {

using nlohmann::json;

TEST(PerseusArguments, AreCheckedAtServerStart) {
  for (const json& bad : {json{{"slowdown", 0.9}}, json{{"slowdown", 1.1}, {"deadline", 3.0}}, json{{"tolerance", -1}},
                          json{{"coarse_step", 0}}, json{{"cost_model", "cubic"}}, json{{"warmup_rounds", 0}},
                          json{{"straggler_threshold", 0}}, json{{"probe_every", -1}}, json{{"retry_after", -2}},
                          json{{"report_rounds", 0}}, json{{"confirm_passes", -1}}, json{{"confirm_error", -0.1}},
                          json{{"unknown", 1}}}) {
    try {
      (void)server::configure_scheduler("Perseus", bad);
      ADD_FAILURE() << bad.dump() << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::bad_setting) << bad.dump();
    }
  }
  EXPECT_EQ(server::scheduler_mode("Perseus"), protocol::PowerMode::frequency);
}

}  // namespace
}  // namespace perseus
