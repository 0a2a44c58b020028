#pragma once
// Group commit for the job store. Writes queued from the job manager's strand are written on one
// thread of their own, every write that arrived meanwhile in one transaction, and each write's
// `done` runs only once that transaction committed (or failed): a reply sent from `done` stands
// for durable state, and a slow, full or locked disk never holds a job's strand.
//
// Two kinds of writes:
// - acknowledged (submit): done(true) after COMMIT; done(false) when the transaction failed. The
//   write is then given up: the caller refuses the request it stood for (503: the client retries).
// - kept (keep): state the server already acts on (a round's record, a job's end). A failed
//   transaction leaves it queued, in order, and the next transaction writes it again (backoff
//   first_retry doubling to max_retry; an acknowledged write arriving meanwhile goes sooner). Kept
//   writes not yet committed are bounded (max_kept_bytes): beyond, a new one is dropped with an
//   error line, and a restart resumes that job from its last stored round.
// A write that fails on its own (a constraint, a bug; not the disk) is undone alone (a savepoint
// per write) and its done(false) called; the rest of its transaction commits. A file found damaged
// is recovered (JobStore::recover), and on_recovered runs so that what the server holds is written
// again. Nothing waits behind a failing write: each transaction takes whatever is queued.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "perseus/server/job_store.hpp"

namespace perseus::server {

class StoreCommitter {
 public:
  using Write = std::function<void(JobStore&)>;
  using Done = std::function<void(bool committed)>;
  struct Options {
    std::size_t max_waiting = 65536;  // acknowledged writes queued at once; submit() refuses more
    std::size_t max_kept_bytes = std::size_t{64} << 20;
    std::chrono::milliseconds first_retry{50};
    std::chrono::milliseconds max_retry{2000};
    std::chrono::milliseconds drain_limit{5000};  // on destruction: how long a failing store is retried
    std::size_t max_batch = 4096;                 // writes per transaction
  };

  explicit StoreCommitter(JobStore& store);
  StoreCommitter(JobStore& store, Options options);
  // Commits what is queued (retrying a failing store for drain_limit), then stops; writes still
  // not committed then are lost with an error line (acknowledged ones get done(false)).
  ~StoreCommitter();
  StoreCommitter(const StoreCommitter&) = delete;
  StoreCommitter& operator=(const StoreCommitter&) = delete;

  // Returns false (and never calls `done`) when max_waiting acknowledged writes wait already.
  // `write` may be empty: `done` then runs once everything queued before it is committed.
  bool submit(Write write, Done done);
  // `what` names the write in log lines; `bytes` is its size for the bound.
  void keep(std::string what, std::size_t bytes, Write write);
  // Runs on the committer's thread after a damaged file was recovered.
  void on_recovered(std::function<void()> callback);

  // The last transaction failed (and its kept writes wait for the next).
  bool failing() const;
  // Waits until every write queued so far is committed or `limit` passes; true when done.
  bool flush(std::chrono::milliseconds limit);

  std::size_t committed() const;  // writes committed so far
  std::size_t failures() const;   // transactions that failed so far
  std::size_t dropped() const;    // kept writes dropped at the bound or at stop

 private:
  struct Op {
    Write write;
    Done done;
    bool kept = false;
    std::size_t bytes = 0;
    std::string what;
    bool ok = false;
  };
  void run();
  bool commit(std::deque<Op>& batch);  // true when the transaction committed
  void give_up(std::deque<Op>& ops);   // stopping and out of time

  JobStore& store_;
  Options options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<Op> queue_;
  std::size_t waiting_ = 0, kept_bytes_ = 0;
  std::size_t committed_ = 0, failures_ = 0, dropped_ = 0;
  bool busy_ = false, stopping_ = false, failing_ = false, dropping_ = false, recovered_ = false;
  std::chrono::milliseconds delay_;
  std::chrono::steady_clock::time_point retry_at_, failed_at_, stop_by_;
  std::size_t failed_attempts_ = 0;
  std::function<void()> on_recovered_;
  std::thread thread_;
};

}  // namespace perseus::server
