#pragma once
// Every job's state and its round loop: ask the scheduler for the next schedules,
// wait until every rank asked, answer each, wait for one result per rank, record, let the
// scheduler observe, repeat. Every method must be called on executor(), a strand, so job state
// needs no locks while the HTTP sessions (parsing included) run on all I/O threads; a waiting
// schedule request is a stored reply, not a thread.
//
// Well-defined behaviour at the edges (each refused request gets RequestError / a reply):
// - unknown job, or a rank outside 0..world_size-1: 404;
// - registering a rank twice: the same information again is accepted (a retry), different
//   information is 409; two ranks with the same (dp, pp, tp) coordinates: 409;
// - asking for a schedule before every rank registered: the request waits like any other;
// - asking twice in one round: the newer request replaces the older, which gets 409;
// - asking again for a schedule before reporting this round's result: the round's schedule again
//   (the client gave up on the first answer, which may have gone to a closed connection);
// - a job with more than settings.max_world_size ranks, or with world size x schedule length
//   above settings.max_job_entries: 422; beyond settings.max_jobs / max_total_ranks: 503;
// - a request that changes a job registered with a secret, without it: 403;
// - a result from a rank with no schedule running, or a second result in a round: 409;
// - a round that does not complete within round_timeout_s fails the job: every waiting and
//   later schedule request gets 500 "[job-failed] ... ranks [..] did not ...";
// - the scheduler finishing: 500 "[profiling-done] ..."; the scheduler failing: 500 "[job-failed] ...";
// - an ended job is kept job_retention_s (late ranks get its end detail), then forgotten: 404;
// - every rank saying it finished (POST /leave with finished: it closed its client) ends the job as
//   done ([profiling-done]); ranks waiting for the next round while another finished fail it;
// - a rank that has sent heartbeats and stops (none for the bound), or whose progress stalls while
//   other ranks wait for it at the barrier, fails the job naming it within
//   max(dead_rank_timeout_s, 3 x the typical round time). Ranks that never send heartbeats (the
//   artifact's client) are only subject to round_timeout_s.
//
// Acknowledged means durable: a registration (job or rank) is answered only once the job store
// committed it (StoreCommitter: group commit), and refused with 503 when it cannot be (the client
// retries); a result that completes a round is answered once the round's record is committed. While
// the store cannot be written (a full disk), rounds go on: their records are kept in memory and
// written when it works again. Record files go to a BackgroundWriter of their own. Neither runs
// on the strand, so a slow, full or locked disk does not slow a round.
//
// With records on (settings.dump_data), jobs survive restarts (job_store.hpp): the constructor
// restores every job from <dump_dir>/.perseus.db, each at the start of the round that was running
// when the server went away (or after the last round the store holds in full). That round runs again; a result reported
// for it after the restart is accepted and dropped (it may be incomplete), so no measurement is taken twice or half.
#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "perseus/server/background_writer.hpp"
#include "perseus/server/job_store.hpp"
#include "perseus/server/metrics.hpp"
#include "perseus/server/power_budget.hpp"
#include "perseus/server/wire.hpp"
#include "perseus/server/scheduler.hpp"
#include "perseus/server/settings.hpp"
#include "perseus/server/store_committer.hpp"

namespace perseus::server {

class JobManager {
 public:
  // A schedule request's answer: the schedule (no refusal), or why it is refused and the detail.
  // Called exactly once per schedule request, now or later.
  using Reply = std::function<void(std::optional<Refusal>, const nlohmann::json&)>;
  // How a request that changes state is answered once that state is durable: nullopt, or why it
  // is refused. Called exactly once, now or later, on the strand.
  using Ack = std::function<void(std::optional<RequestError>)>;

  // `executor` must serialize its handlers (a strand, or a single-threaded io_context's executor).
  JobManager(boost::asio::any_io_executor executor, ServerSettings settings, SchedulerFactory factory);
  ~JobManager();
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  const ServerSettings& settings() const { return settings_; }
  const boost::asio::any_io_executor& executor() const { return executor_; }

  // `secret`: "" none; "new" (protocol::kAskForJobSecret): a random one; else the client's own
  // (protocol::is_job_secret). Every request changing the job must then carry it (authorize;
  // job_secret returns it). A secret a job already has registers nothing: that job's registration
  // comes back (409 when the registration differs in shape). Refused before anything is allocated:
  // 422 above max_world_size or a job id above kMaxJobIdBytes, 503 at max_jobs or max_total_ranks
  // once no ended job is left to forget early.
  // `ack` gets the job's registration (id and secret) once it is stored; a registration the store
  // cannot keep is forgotten and refused (503).
  void register_job(JobInfo info, const std::string& secret,
                    std::function<void(std::optional<RequestError>, const JobInfo&)> ack);
  std::string job_secret(const std::string& job_id);  // "" for a job registered without one
  // May this request change job `job_id`? Yes for the administrator (`admin`: the server's bearer
  // token), for any request to a job registered without a secret, and for one carrying the job's
  // secret; 403 otherwise, 404 for an unknown job.
  void authorize(const std::string& job_id, const std::string& secret, bool admin);
  void register_rank(const std::string& job_id, RankInfo info, Ack ack);
  void request_schedule(const std::string& job_id, int rank, Reply reply);
  void report_result(const std::string& job_id, ProfilingResult result, Ack ack);
  void heartbeat(const std::string& job_id, const Heartbeat& beat);
  // A rank cannot take part: the job ends ([job-failed], naming it) and every rank goes on without perseus.
  void leave(const std::string& job_id, const Leave& leave, Ack ack);

  // POST /straggler/{id} (a notice) and DELETE /straggler/{id} (none): handed to the scheduler,
  // which takes it into account from the next round on. 404 unknown job, 409 not running or a
  // scheduler that does not follow stragglers.
  void straggler(const std::string& job_id, const std::optional<StragglerNotice>& notice);

  // The cluster's power budget (power_budget.hpp): PUT /power_budget (stored first, see
  // power_budget.hpp's store_budget) and GET /power_budget; what a heartbeat is answered (the
  // power limit its rank is to run under now, {"power_limit": W}, or null).
  void set_power_budget(const BudgetRequest& request);
  nlohmann::json power_budget_status() const;
  nlohmann::json heartbeat_reply(const std::string& job_id) const;

  // GET /jobs: one summary per job; GET /jobs/{id}: one job in detail (404 when unknown).
  nlohmann::json jobs_summary() const;
  nlohmann::json job_status(const std::string& job_id) const;
  // GET /jobs/{id}/frontier and /jobs/{id}/timeline.svg: the scheduler's (Scheduler::frontier and
  // timeline), kept after the job ended; 404 for an unknown job or one with no frontier or plan (yet).
  nlohmann::json job_frontier(const std::string& job_id) const;
  std::string job_timeline_svg(const std::string& job_id) const;

  // Answers every waiting request with 503 and `why`; used when the server stops.
  void shutdown(const std::string& why);

  // Waits until every record and store write queued so far is on disk (tests); true when done.
  // Callable from any thread.
  bool flush_records(std::chrono::milliseconds limit) {
    return (!committer_ || committer_->flush(limit)) && (!writer_ || writer_->flush(limit));
  }

  // GET /metrics: every job's status and the server's counters, as Prometheus text.
  std::string metrics_text() const;
  // The HTTP front's counters (updated from every I/O thread; thread-safe). Shared: a session
  // the io_context destroys after the job manager still counts itself closed.
  const std::shared_ptr<HttpMetrics>& http_metrics() const { return http_metrics_; }

  std::size_t job_count() const { return jobs_.size(); }

 private:
  struct Job;
  Job& find(const std::string& job_id) const;  // 404 when unknown
  void make_room(int world_size);              // forgets ended jobs early for max_jobs / max_total_ranks, or 503
  void forget(const std::string& job_id);
  void check_rank(const Job& job, int rank) const;
  std::string same_job(const Job& job, const JobInfo& info) const;  // its id, or 409 when `info` differs in shape
  // What GET /jobs shows of the job (`full`: and GET /jobs/{id}); its scheduler's part is kept
  // after the job ended.
  JobStatus status_of(const Job& job, bool full) const;
  void advance(Job& job);
  void start_rounds(Job& job);
  void send_schedules(Job& job);
  bool next_schedules(Job& job);  // the scheduler's next round into job.current; false: the job ended
  void finish_round(Job& job);
  void run_round_again(Job& job);
  nlohmann::json answer(const Job& job, std::size_t rank) const;  // the rank's schedule, in its dialect
  void end(Job& job, const JobOutcome& outcome);
  void forget_later(Job& job);
  void forget_after(Job& job, double seconds);                                // 0: never
  void answer_waiting(Job& job, Refusal refusal, const std::string& detail);  // every stored schedule request
  void arm_timer(Job& job, const std::string& waiting_for);
  void arm_watchdog(Job& job);
  void check_ranks_alive(Job& job);
  void check_finished(Job& job);  // fails the job when ranks wait for one whose training ended
  static int at_barrier(const Job& job);
  // Record files and store writes go to writer_ (never written on the strand); `bytes`: a size
  // estimate for the writer's queue bound.
  void dump(const Job& job, const std::string& name, nlohmann::json content, std::size_t bytes = 4096) const;
  void record_round(const Job& job, const std::vector<ProfilingResult>& results) const;
  void restore(StoredJob stored);
  // Store writes. keep(): state the server already acts on, written when the store can;
  // durably(): `then(committed)` runs on the strand once the write is committed or refused
  // (at once without a store); after_stored(): `ack` once every write queued so far is committed
  // (at once while the store fails: rounds go on).
  void keep(const Job& job, std::function<void(JobStore&)> write, std::size_t bytes = 1024);
  void durably(std::function<void(JobStore&)> write, std::function<void(bool)> then);
  void after_stored(Ack ack);
  void write_held_jobs_again();  // after the store was recovered from damage
  void name_records_not_resumed() const;
  // A job id no other job has had: make_job_id's, then +2, +3, ... when a job of the same second
  // took it — held now, issued earlier in this second (then forgotten early: --max-jobs), or
  // recorded by an earlier run (its records folder exists).
  std::string new_job_id(const JobInfo& info);

  boost::asio::any_io_executor executor_;
  ServerSettings settings_;
  SchedulerFactory factory_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<StoreCommitter> committer_;  // after store_: destroyed (drained) first
  std::unique_ptr<BackgroundWriter> writer_;   // record files
  std::unique_ptr<PowerBudget> budget_;        // holds the jobs' schedulers: destroyed before jobs_
  std::set<std::string> issued_ids_;           // this second's
  std::chrono::system_clock::time_point issued_second_;
  std::shared_ptr<HttpMetrics> http_metrics_ = std::make_shared<HttpMetrics>();
};

}  // namespace perseus::server
