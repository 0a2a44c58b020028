#pragma once
// Every step-up to a faster plan is provisional. What condemned the saving plan was measured under
// some conditions (a baseline, a straggler or its absence, the cluster's pace); once that evidence
// is stale the saving plan is tried again at once, and in any case after a number of rounds that
// doubles with every retry that fails again, up to a bound: a disturbance that condemned a plan
// costs at most its own duration plus that bound, never the rest of the run.
#include <string>

namespace perseus::online {

// What a verdict on a plan rests on.
struct Evidence {
  int baseline_corrections = 0;  // corrections of the all-max baseline so far
  int straggler_changes = 0;     // stragglers detected, cleared or changed (told or detected) so far
  double conditions = 1;         // the reference's stretch of the baseline
};

class RetryPolicy {
 public:
  // `first`: rounds before the first retry; `most`: the bound the doubling stops at (0: never retry).
  RetryPolicy(int first = 20, int most = 40);

  // A plan was condemned in `round` on `evidence` (a failed retry when one was being tried).
  // `same_plan_again`: the plan condemned is the one condemned last time, tried again since; where
  // the evidence has not gone stale between the two verdicts, it is tried again only once the
  // evidence is stale, not after rounds alone (its miss is its own, measured twice).
  void stepped_up(int round, const Evidence& evidence, bool same_plan_again = false);
  // Whether to try the saving plan again in `round`; `why` says why when it is, `stale` whether
  // the evidence changed (rather than rounds passing).
  bool due(int round, const Evidence& now, std::string* why = nullptr, bool* stale = nullptr) const;
  // The saving plan (or one closer to it) runs again from `round` on.
  void retried(int round);
  // The plan has run `rounds` rounds without being condemned: a retry that held that long (10
  // rounds, or the wait if shorter) is a success (the wait goes back to `first`). Returns true
  // once when it is.
  bool held(int rounds);
  // Another retry, due at once (after a retry that held but did not go all the way).
  void wait(int round, const Evidence& evidence);
  bool waiting() const { return waiting_; }        // a step-up is waiting for its retry
  bool stale_only() const { return stale_only_; }  // ... for stale evidence only
  int interval() const { return interval_; }

 private:
  int first_, most_;
  int interval_;
  bool waiting_ = false, trying_ = false, stale_only_ = false, condemned_before_ = false;
  int stepped_round_ = 0;
  Evidence at_step_;
};

}  // namespace perseus::online
