#include "perseus/protocol/job_outcome.hpp"

namespace perseus::protocol {
namespace {

constexpr std::string_view kDoneMarker = "[profiling-done]";
constexpr std::string_view kFailedMarker = "[job-failed]";

std::string_view marker(JobOutcome::Kind kind) { return kind == JobOutcome::Kind::done ? kDoneMarker : kFailedMarker; }

}  // namespace

std::string to_detail(const JobOutcome& outcome) {
  std::string text(marker(outcome.kind));
  text += ' ';
  text += outcome.why;
  return text;
}

std::optional<JobOutcome> outcome_from_detail(std::string_view detail) {
  for (auto kind : {JobOutcome::Kind::done, JobOutcome::Kind::failed}) {
    const std::string_view m = marker(kind);
    if (detail.size() > m.size() && detail.substr(0, m.size()) == m && detail[m.size()] == ' ')
      return JobOutcome{kind, std::string(detail.substr(m.size() + 1))};
  }
  return std::nullopt;
}

bool says_done(std::string_view detail) { return detail.find(kDoneMarker) != std::string_view::npos; }

}  // namespace perseus::protocol
