#pragma once
// How a job ended: done (its scheduler has nothing more to run, or training finished) or failed,
// and why. On the wire (the detail of the 500 every later schedule request of the job gets, GET
// /jobs' end_detail, the job store) it is the artifact's text "[profiling-done] <why>" or
// "[job-failed] <why>": the artifact's and Zeus's clients match on those markers.
#include <optional>
#include <string>
#include <string_view>

namespace perseus::protocol {

struct JobOutcome {
  enum class Kind { done, failed };
  Kind kind = Kind::failed;
  std::string why;

  static JobOutcome done(std::string why) { return {Kind::done, std::move(why)}; }
  static JobOutcome failed(std::string why) { return {Kind::failed, std::move(why)}; }
  bool is_done() const { return kind == Kind::done; }
  bool operator==(const JobOutcome&) const = default;
};

// The outcome's wire text.
std::string to_detail(const JobOutcome& outcome);
// The outcome a wire text starts with; nullopt when it starts with neither marker.
std::optional<JobOutcome> outcome_from_detail(std::string_view detail);
// Whether a server's error detail says the job is done: the marker anywhere in it.
bool says_done(std::string_view detail);

}  // namespace perseus::protocol
