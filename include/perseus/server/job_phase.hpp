#pragma once
// The phase a job is shown in (GET /jobs, GET /jobs/{id}, the metrics, the power budget): the
// server's own (registering, running, done, failed) and, while it runs, its scheduler's when it has
// phases of its own (the turnkey loop's warmup, profiling, planning, deployed). Written once, here.
#include <array>
#include <string_view>

namespace perseus::server {

enum class JobPhase { registering, running, warmup, profiling, planning, deployed, done, failed };

inline constexpr std::array<JobPhase, 8> kAllJobPhases = {JobPhase::registering, JobPhase::running,  JobPhase::warmup,
                                                          JobPhase::profiling,   JobPhase::planning, JobPhase::deployed,
                                                          JobPhase::done,        JobPhase::failed};

constexpr std::string_view to_string(JobPhase phase) {
  switch (phase) {
    case JobPhase::registering:
      return "registering";
    case JobPhase::running:
      return "running";
    case JobPhase::warmup:
      return "warmup";
    case JobPhase::profiling:
      return "profiling";
    case JobPhase::planning:
      return "planning";
    case JobPhase::deployed:
      return "deployed";
    case JobPhase::done:
      return "done";
    case JobPhase::failed:
      return "failed";
  }
  return "running";
}

// The phases in which a turnkey job runs the top clock, or clocks on their way down from it
// (registering: not yet running anything else).
constexpr bool before_plans(JobPhase phase) {
  return phase == JobPhase::warmup || phase == JobPhase::profiling || phase == JobPhase::planning ||
         phase == JobPhase::registering;
}

}  // namespace perseus::server
