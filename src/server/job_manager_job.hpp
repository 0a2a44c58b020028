#pragma once
// The job manager's state of one job (job_manager.hpp), shared by the files the job manager is
// written in: the rounds (job_manager.cpp), the records and the store (job_records.cpp), and
// what GET /jobs, GET /jobs/{id} and the metrics show (job_status_views.cpp).
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "perseus/server/job_manager.hpp"
#include "perseus/server/wire.hpp"

namespace perseus::server {

enum class Phase { registering, asking, running, ended };

struct JobManager::Job {
  Job(const boost::asio::any_io_executor& executor, JobInfo job_info)
      : info(std::move(job_info)),
        ranks(static_cast<std::size_t>(info.world_size)),
        waiting(ranks.size()),
        results(ranks.size()),
        beats(ranks.size()),
        timer(executor),
        watchdog(executor) {}

  JobInfo info;
  std::filesystem::path dir;
  std::vector<std::optional<RankInfo>> ranks;
  int registered = 0;  // ranks whose registration is stored (a slot is taken while its write commits)
  std::unique_ptr<Scheduler> scheduler;
  Phase phase = Phase::registering;
  int round = 0;
  std::vector<Reply> waiting;  // schedule requests not yet answered, per rank
  int asked = 0;
  std::vector<std::optional<ProfilingResult>> results;  // this round's, per rank
  std::map<int, std::string> rejected;                  // this round's results that are no measurement: rank -> why
  int rejected_rounds = 0;                              // rounds in a row run again because of them
  int reported = 0;
  std::vector<PowerStateSchedule> current;  // this round's schedules, by rank
  JobOutcome outcome;                       // once ended
  bool restored = false;                    // restored from the store and the interrupted round has not restarted yet
  bool stale_round = false;                 // a rank ran this round with a stale schedule: its results are not used
  bool repeat = false;                      // the next round runs the current schedules again
  std::chrono::steady_clock::time_point watched;  // the watchdog's last look
  struct Beat {
    bool seen = false;  // this rank sends heartbeats (the artifact's client does not)
    std::uint64_t progress = 0;
    std::chrono::steady_clock::time_point last, progressed;
  };
  std::vector<Beat> beats;
  bool watchdog_armed = false;
  std::optional<std::chrono::steady_clock::time_point> round_started;
  double typical_round_s = 0;                       // moving average of the time between round starts
  std::optional<RoundMeasuredStatus> measured;      // the last finished round, per iteration
  std::optional<SchedulerStatus> scheduler_status;  // the scheduler's own status when the job ended
  nlohmann::json frontier_at_end = nullptr;         // and its frontier and timeline (Scheduler::frontier, timeline)
  std::function<std::string()> timeline_at_end;
  std::set<int> finished;                          // ranks whose training ended (POST /leave with finished)
  std::set<int> unsupported_warned;                // power states a scheduler gave that some rank lacks, warned of once
  std::vector<PipelineStatus> pipelines;           // the same per data-parallel pipeline
  std::chrono::steady_clock::time_point ended_at;  // which ended job goes first when room is needed
  boost::asio::steady_timer timer;
  boost::asio::steady_timer watchdog;
};

// A job as the server shows it (GET /jobs/{id}, job.json): without its secret.
inline nlohmann::json public_json(const JobInfo& info) {
  nlohmann::json out = to_json(info);
  out.erase("job_secret");
  return out;
}

}  // namespace perseus::server
