#include "perseus/server/job_manager.hpp"
#include "perseus/server/wire.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <string_view>
#include <map>
#include <chrono>
#include <optional>
#include <random>
#include <set>

#include "perseus/protocol/job_secret.hpp"
#include "perseus/profile/time_energy.hpp"
#include "perseus/protocol/round_mean.hpp"
#include "perseus/server/http_server.hpp"
#include "perseus/util/atomic_file.hpp"
#include "job_manager_job.hpp"

namespace perseus::server {

namespace fs = std::filesystem;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

namespace {

RequestError not_stored(const std::string& what) {
  return RequestError(Refusal::over_capacity,
                      fmt::format("the server cannot store {} now (its job store cannot be written: a full disk?); "
                                  "it was not kept, try again",
                                  what));
}

}  // namespace

JobManager::JobManager(boost::asio::any_io_executor executor, ServerSettings settings, SchedulerFactory factory)
    : executor_(std::move(executor)), settings_(std::move(settings)), factory_(std::move(factory)) {
  budget_ = std::make_unique<PowerBudget>(settings_.power_budget_w);
  if (!settings_.dump_data) return;
  // A budget acknowledged through PUT /power_budget before a restart holds again.
  if (auto stored = stored_budget(fs::path(settings_.dump_dir) / kBudgetFile, settings_.power_budget_w))
    budget_->set(*stored, SteadyClock::now());
  store_ = std::make_unique<JobStore>(fs::path(settings_.dump_dir) / ".perseus.db");  // hidden from dump/* globs
  writer_ = std::make_unique<BackgroundWriter>();
  std::vector<StoredJob> stored;
  try {
    stored = store_->load();
  } catch (const std::exception& e) {
    spdlog::error("could not read the jobs stored in {} ({}); starting without them (they stay in the file)",
                  store_->file().string(), e.what());
  }
  committer_ = std::make_unique<StoreCommitter>(*store_);
  committer_->on_recovered([this] { boost::asio::post(executor_, [this] { write_held_jobs_again(); }); });
  for (auto& job : stored) restore(std::move(job));
  if (!store_->set_aside().empty()) name_records_not_resumed();
}

JobManager::~JobManager() = default;

JobManager::Job& JobManager::find(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) throw RequestError(Refusal::not_found, fmt::format("unknown job '{}'", job_id));
  return *it->second;
}

void JobManager::check_rank(const Job& job, int rank) const {
  if (rank < 0 || rank >= job.info.world_size)
    throw RequestError(Refusal::not_found, fmt::format("rank {} is out of range for job '{}' (world size {})", rank,
                                                       job.info.job_id, job.info.world_size));
}

void JobManager::make_room(int world_size) {
  for (;;) {
    long long ranks = 0;
    const Job* first_ended = nullptr;
    for (const auto& [id, job] : jobs_) {
      ranks += job->info.world_size;
      if (job->phase == Phase::ended && (!first_ended || job->ended_at < first_ended->ended_at))
        first_ended = job.get();
    }
    bool too_many_jobs = settings_.max_jobs > 0 && jobs_.size() >= static_cast<std::size_t>(settings_.max_jobs);
    bool too_many_ranks = settings_.max_total_ranks > 0 && ranks + world_size > settings_.max_total_ranks;
    if (!too_many_jobs && !too_many_ranks) return;
    if (!first_ended) {
      if (too_many_jobs)
        throw RequestError(Refusal::over_capacity,
                           fmt::format("this server already holds {} running jobs, its limit (the server's "
                                       "max_jobs setting); try again when one ended",
                                       jobs_.size()));
      throw RequestError(Refusal::over_capacity,
                         fmt::format("this server's jobs already have {} ranks; {} more would pass its limit of "
                                     "{} (the server's max_total_ranks setting); try again when one ended",
                                     ranks, world_size, settings_.max_total_ranks));
    }
    std::string id = first_ended->info.job_id;  // a copy: forgetting the job frees its own
    spdlog::info("job {}: forgotten early to make room for a new job (its records stay)", id);
    forget(id);
  }
}

void JobManager::forget(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  keep(*it->second, [id](JobStore& store) { store.forget_job(id); });
  budget_->leave(id, SteadyClock::now());  // a job forgotten while it ran (Zeus's client's) leaves the budget
  jobs_.erase(it);
  issued_ids_.insert(id);  // not given again within this second (its folder may not be written yet)
  spdlog::debug("job {}: forgotten", id);
}

void JobManager::authorize(const std::string& job_id, const std::string& secret, bool admin) {
  const Job& job = find(job_id);
  if (admin || job.info.job_secret.empty() || constant_time_equal(secret, job.info.job_secret)) return;
  throw RequestError(Refusal::forbidden,
                     fmt::format("job '{}' was registered with a secret: this request must carry it (header {}) "
                                 "or the server's bearer token",
                                 job_id, kJobSecretHeader));
}

std::string JobManager::same_job(const Job& job, const JobInfo& info) const {
  const JobInfo& j = job.info;
  if (info.world_size != j.world_size || info.pp_degree != j.pp_degree || info.dp_degree != j.dp_degree ||
      info.tp_degree != j.tp_degree || info.num_microbatches != j.num_microbatches)
    throw RequestError(Refusal::conflict,
                       fmt::format("job '{}' was registered with this secret as world size {} (dp {}, pp {}, tp {}), "
                                   "{} microbatches: this registration differs",
                                   j.job_id, j.world_size, j.dp_degree, j.pp_degree, j.tp_degree, j.num_microbatches));
  return j.job_id;
}

std::string JobManager::job_secret(const std::string& job_id) { return find(job_id).info.job_secret; }

std::string JobManager::new_job_id(const JobInfo& info) {
  auto now = std::chrono::system_clock::now();
  auto second = std::chrono::floor<std::chrono::seconds>(now);
  if (second != issued_second_) issued_ids_.clear(), issued_second_ = second;
  const std::string base = make_job_id(info, settings_.scheduler, now);
  auto taken = [&](const std::string& id) {
    std::error_code ignored;
    return jobs_.count(id) != 0 || issued_ids_.count(id) != 0 ||
           (settings_.dump_data && fs::exists(fs::path(settings_.dump_dir) / records_dir_name(id), ignored));
  };
  std::string id = base;
  for (int n = 2; taken(id); ++n) id = fmt::format("{}+{}", base, n);
  check_job_id_length(id);
  issued_ids_.insert(id);
  return id;
}

void JobManager::register_job(JobInfo info, const std::string& secret,
                              std::function<void(std::optional<RequestError>, const JobInfo&)> ack) {
  // A secret the client brought that a job already has: another rank of that job registered it
  // first (rank 0 could not reach the server at start), or a retry whose answer was lost. Answered
  // once what was asked of the store before is committed, that job's registration among it.
  if (!secret.empty() && secret != protocol::kAskForJobSecret)
    for (const auto& entry : jobs_)
      if (constant_time_equal(secret, entry.second->info.job_secret)) {
        std::string id = same_job(*entry.second, info);
        return durably({}, [this, id, ack = std::move(ack)](bool) {
          auto it = jobs_.find(id);
          if (it == jobs_.end()) return ack(not_stored(fmt::format("job {}'s registration", id)), JobInfo{});
          ack(std::nullopt, it->second->info);
        });
      }
  if (info.world_size > settings_.max_world_size)
    throw RequestError(Refusal::invalid_request,
                       fmt::format("field 'world_size': {} is above this server's limit of {} ranks "
                                   "(the server's max_world_size setting)",
                                   info.world_size, settings_.max_world_size));
  std::string id = new_job_id(info);
  make_room(info.world_size);  // before the job's per-rank state is allocated
  info.job_secret = secret == protocol::kAskForJobSecret ? protocol::new_job_secret() : secret;
  info.job_id = id;
  auto job = std::make_unique<Job>(executor_, info);
  job->dir = fs::path(settings_.dump_dir) / records_dir_name(id);
  Job& ref = *job;
  jobs_.emplace(id, std::move(job));
  arm_timer(ref, "register");
  // Its records folder is made with it: an id whose folder exists is never given again (new_job_id).
  durably(
      [info, dir = ref.dir](JobStore& store) {
        fs::create_directories(dir);
        store.add_job(info);
      },
      [this, info, ack = std::move(ack)](bool stored) {
        auto it = jobs_.find(info.job_id);
        if (!stored) {
          if (it != jobs_.end()) jobs_.erase(it);  // nobody knows its id yet
          spdlog::warn("job {}: registration refused: the job store cannot be written", info.job_id);
          return ack(not_stored(fmt::format("job {}'s registration", info.job_id)), info);
        }
        spdlog::info("job {} registered: world size {}", info.job_id, info.world_size);
        if (it != jobs_.end()) {
          dump(*it->second, "perseus.json", artifact_server_info(settings_));  // what the artifact's load_info() reads
          dump(*it->second, "job.json", {{"server", info_json(settings_)}, {"job", public_json(info)}});
        }
        ack(std::nullopt, info);
      });
}

void JobManager::register_rank(const std::string& job_id, RankInfo info, Ack ack) {
  Job& job = find(job_id);
  check_rank(job, info.rank);
  const JobInfo& j = job.info;
  if (info.dp_rank >= j.dp_degree)
    throw RequestError(Refusal::invalid_request,
                       fmt::format("field 'dp_rank': must be below dp_degree {}", j.dp_degree));
  if (info.pp_rank >= j.pp_degree)
    throw RequestError(Refusal::invalid_request,
                       fmt::format("field 'pp_rank': must be below pp_degree {}", j.pp_degree));
  if (info.tp_rank >= j.tp_degree)
    throw RequestError(Refusal::invalid_request,
                       fmt::format("field 'tp_rank': must be below tp_degree {}", j.tp_degree));
  if (info.dialect == Dialect::perseus && info.pipe_schedule.empty())
    throw RequestError(Refusal::invalid_request, "field 'pipe_schedule': must not be empty");
  // What the job's schedules and results will hold if every rank's schedule is this long.
  long long entries = static_cast<long long>(j.world_size) *
                      static_cast<long long>(std::max<std::size_t>(1, info.pipe_schedule.size()));
  if (settings_.max_job_entries > 0 && entries > settings_.max_job_entries)
    throw RequestError(Refusal::invalid_request,
                       fmt::format("field 'pipe_schedule': {} instructions x world size {} = {} is above this "
                                   "server's limit of {} (the server's max_job_entries setting)",
                                   info.pipe_schedule.size(), j.world_size, entries, settings_.max_job_entries));
  info.job_id = job_id;
  auto& slot = job.ranks[static_cast<std::size_t>(info.rank)];
  if (slot) {
    // A retry: answered once the first one's write is committed (or refused, if it was).
    if (*slot == info)
      return durably({}, [this, job_id, info, ack = std::move(ack)](bool) {
        auto it = jobs_.find(job_id);
        const auto* now = it != jobs_.end() ? &it->second->ranks[static_cast<std::size_t>(info.rank)] : nullptr;
        if (now && *now && **now == info) return ack(std::nullopt);
        ack(not_stored(fmt::format("rank {}'s registration", info.rank)));
      });
    throw RequestError(
        Refusal::conflict,
        fmt::format("rank {} is already registered in job '{}' with different information", info.rank, job_id));
  }
  for (const auto& other : job.ranks)
    if (other && other->dp_rank == info.dp_rank && other->pp_rank == info.pp_rank && other->tp_rank == info.tp_rank)
      throw RequestError(Refusal::conflict, fmt::format("rank {} already registered (dp {}, pp {}, tp {})", other->rank,
                                                        info.dp_rank, info.pp_rank, info.tp_rank));
  slot = info;  // taken while it is stored: a different registration for it is a conflict meanwhile
  durably([job_id, info](JobStore& store) { store.add_rank(job_id, info); },
          [this, job_id, info, ack = std::move(ack)](bool stored) {
            auto it = jobs_.find(job_id);
            if (it == jobs_.end())
              return ack(RequestError(Refusal::not_found, fmt::format("job '{}' ended and was forgotten", job_id)));
            Job& job = *it->second;
            auto& slot = job.ranks[static_cast<std::size_t>(info.rank)];
            if (!stored) {
              if (slot && *slot == info) slot.reset();
              return ack(not_stored(fmt::format("rank {}'s registration", info.rank)));
            }
            ++job.registered;
            spdlog::debug("job {}: rank {} registered ({}/{})", job_id, info.rank, job.registered, job.info.world_size);
            ack(std::nullopt);
            if (job.phase != Phase::ended) advance(job);
          });
}

void JobManager::request_schedule(const std::string& job_id, int rank, Reply reply) {
  Job& job = find(job_id);
  check_rank(job, rank);
  auto r = static_cast<std::size_t>(rank);
  if (job.phase == Phase::ended) return reply(Refusal::job_ended, {{"detail", to_detail(job.outcome)}});
  if (!job.ranks[r])
    throw RequestError(Refusal::not_found, fmt::format("rank {} has not registered in job '{}'", rank, job_id));
  // Asking again before reporting this round's result is a retry: the answer to the first request
  // went to a connection the client had given up on. It gets the same schedule again.
  if (job.phase == Phase::running && !job.results[r]) {
    spdlog::debug("job {}: rank {} asked again for round {}'s schedule", job_id, rank, job.round);
    return reply(std::nullopt, answer(job, r));
  }
  job.beats[r].progressed = SteadyClock::now();
  if (job.waiting[r]) {
    job.waiting[r](Refusal::conflict,
                   {{"detail", fmt::format("superseded by a newer schedule request from rank {}", rank)}});
  } else {
    ++job.asked;
  }
  job.waiting[r] = std::move(reply);
  check_finished(job);
  if (job.phase == Phase::ended) return;
  advance(job);
}

void JobManager::report_result(const std::string& job_id, ProfilingResult result, Ack ack) {
  Job& job = find(job_id);
  check_rank(job, result.rank);
  auto r = static_cast<std::size_t>(result.rank);
  if (job.phase == Phase::ended) return ack(std::nullopt);  // nobody waits on it any more
  if (job.restored && job.phase == Phase::asking) {
    spdlog::info("job {}: dropped rank {}'s result of round {}, which the restart interrupted (it runs again)", job_id,
                 result.rank, job.round);
    return ack(std::nullopt);
  }
  if (job.phase == Phase::registering)
    throw RequestError(Refusal::conflict,
                       fmt::format("rank {} reported a result but no schedule is running (round {} has not "
                                   "started)",
                                   result.rank, job.round));
  // A client sends its next result only after asking for (and getting) the next schedule, so a
  // result while the job asks, or a second one for this round, is a retry of one this server has
  // (the answer to the first went to a connection the client had given up on): acknowledged, once
  // the round it completed is stored.
  if (job.phase != Phase::running || job.results[r]) {
    spdlog::debug("job {}: rank {} sent its result of round {} again", job_id, result.rank,
                  job.phase == Phase::running ? job.round : job.round - 1);
    return after_stored(std::move(ack));
  }
  if (std::string why = oversized_result(result, *job.ranks[r]); !why.empty())
    throw RequestError(Refusal::too_large, why);
  if (result.stale) job.stale_round = true;
  if (std::string why = implausible_result(result, max_power_w(*job.ranks[r])); !why.empty()) {
    spdlog::warn("job {}: rank {}'s result of round {} rejected, it is no measurement: {}", job_id, result.rank,
                 job.round, why);
    job.rejected[result.rank] = std::move(why);
  }
  job.results[r] = std::move(result);
  ++job.reported;
  const int round = job.round;
  advance(job);
  // The result that completed the round is answered once the round's record is committed.
  if (job.round != round) return after_stored(std::move(ack));
  ack(std::nullopt);
}

void JobManager::heartbeat(const std::string& job_id, const Heartbeat& beat) {
  Job& job = find(job_id);
  check_rank(job, beat.rank);
  if (job.phase == Phase::ended) throw RequestError(Refusal::job_ended, to_detail(job.outcome));
  if (!job.ranks[static_cast<std::size_t>(beat.rank)])
    throw RequestError(Refusal::not_found, fmt::format("rank {} has not registered in job '{}'", beat.rank, job_id));
  auto& b = job.beats[static_cast<std::size_t>(beat.rank)];
  auto now = SteadyClock::now();
  if (!b.seen || beat.progress != b.progress) b.progressed = now;
  b.seen = true;
  b.progress = beat.progress;
  b.last = now;
  if (settings_.dead_rank_timeout_s > 0 && !job.watchdog_armed) arm_watchdog(job);
}

void JobManager::leave(const std::string& job_id, const Leave& leave, Ack ack) {
  Job& job = find(job_id);
  check_rank(job, leave.rank);
  if (job.phase == Phase::ended) return ack(std::nullopt);
  if (leave.finished) {
    job.finished.insert(leave.rank);
    if (static_cast<int>(job.finished.size()) == job.info.world_size)
      end(job, JobOutcome::done("training finished: every rank closed its client"));
    else check_finished(job);
    if (job.phase != Phase::ended) advance(job);  // the barrier may have all its ranks now
  } else {
    end(job, JobOutcome::failed(fmt::format("rank {} cannot take part{}{}; every rank continues without perseus",
                                            leave.rank, leave.reason.empty() ? "" : ": ", leave.reason)));
  }
  after_stored(std::move(ack));  // the job's end (or the round it completed) is stored before the answer
}

void JobManager::straggler(const std::string& job_id, const std::optional<StragglerNotice>& notice) {
  Job& job = find(job_id);
  if (notice && notice->dp_rank && *notice->dp_rank >= job.info.dp_degree)
    throw RequestError(Refusal::invalid_request,
                       fmt::format("field 'dp_rank': must be below dp_degree {}", job.info.dp_degree));
  if (job.phase == Phase::ended)
    throw RequestError(Refusal::conflict, fmt::format("job '{}' has ended: {}", job_id, to_detail(job.outcome)));
  if (!job.scheduler)
    throw RequestError(Refusal::conflict, fmt::format("job '{}' has not started: not every rank registered", job_id));
  job.scheduler->set_straggler(notice);
  budget_->plans_changed(job_id, SteadyClock::now());
  spdlog::info("job {}: straggler {}", job_id,
               !notice            ? std::string("cleared through the API")
               : notice->slowdown ? fmt::format("slowdown {} told through the API", *notice->slowdown)
                                  : fmt::format("iteration time {} s told through the API", *notice->iteration_time));
}

void JobManager::check_finished(Job& job) {
  // A rank that finished never asks or reports again. At the barrier that is no loss (at_barrier:
  // its peers may still run the round), but a running round it has not reported never ends, and
  // ranks waiting for the next one would wait forever. So ranks closing their clients one after
  // another at the end of training end the job done, and a rank that finished while its peers train
  // on fails it for them (they continue without perseus) within a round.
  if (job.finished.empty() || job.asked == 0 || job.phase != Phase::running) return;
  std::vector<int> holding, waiting;
  for (int r : job.finished)
    if (!job.results[static_cast<std::size_t>(r)]) holding.push_back(r);
  if (holding.empty()) return;
  for (std::size_t r = 0; r < job.waiting.size(); ++r)
    if (job.waiting[r] && !job.finished.contains(static_cast<int>(r))) waiting.push_back(static_cast<int>(r));
  if (waiting.empty()) return;
  end(job, JobOutcome::failed(fmt::format("ranks [{}] finished training while ranks [{}] wait for the next round; they "
                                          "continue without perseus",
                                          fmt::join(holding, ", "), fmt::join(waiting, ", "))));
}

// The ranks the barrier has: those that asked for the next round, and those whose training
// finished (they will never ask).
int JobManager::at_barrier(const Job& job) {
  int count = job.asked;
  for (int r : job.finished)
    if (!job.waiting[static_cast<std::size_t>(r)]) ++count;
  return count;
}

void JobManager::arm_watchdog(Job& job) {
  job.watchdog_armed = true;
  double period = std::clamp(settings_.dead_rank_timeout_s / 4, 0.05, 5.0);
  auto now = SteadyClock::now();
  if (job.watched != SteadyClock::time_point{} && now - job.watched > std::chrono::duration<double>(2 * period + 1)) {
    // This server was not running (SIGSTOP, a stalled machine): the ranks' silence was its own.
    for (auto& b : job.beats) b.last = b.progressed = now;
  }
  job.watched = now;
  job.watchdog.expires_after(std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(period)));
  job.watchdog.async_wait([this, id = job.info.job_id](const boost::system::error_code& ec) {
    if (ec) return;
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second->phase == Phase::ended) return;
    check_ranks_alive(*it->second);
    if (it->second->phase != Phase::ended) arm_watchdog(*it->second);
  });
}

void JobManager::check_ranks_alive(Job& job) {
  double bound = std::max(settings_.dead_rank_timeout_s, 3 * job.typical_round_s);
  auto now = SteadyClock::now();
  auto seconds = [&](SteadyClock::time_point since) { return std::chrono::duration<double>(now - since).count(); };
  std::vector<int> waiting;
  for (std::size_t r = 0; r < job.waiting.size(); ++r)
    if (job.waiting[r]) waiting.push_back(static_cast<int>(r));
  for (std::size_t r = 0; r < job.beats.size(); ++r) {
    const auto& b = job.beats[r];
    if (!b.seen || !job.ranks[r] || job.finished.contains(static_cast<int>(r))) continue;  // finished: gone on purpose
    const RankInfo& info = *job.ranks[r];
    std::string who = fmt::format("rank {} (dp {}, pp {}, tp {})", r, info.dp_rank, info.pp_rank, info.tp_rank);
    if (seconds(b.last) > bound)
      return end(job, JobOutcome::failed(fmt::format("{} stopped: no heartbeat for {:.0f} s (the process is gone or "
                                                     "unreachable); the other ranks continue without perseus",
                                                     who, seconds(b.last))));
    bool others_wait = !waiting.empty() && !job.waiting[r];
    if (others_wait && seconds(b.progressed) > bound)
      return end(job,
                 JobOutcome::failed(fmt::format("{} made no progress for {:.0f} s while ranks [{}] wait for it at "
                                                "the round barrier (hung?); the other ranks continue without perseus",
                                                who, seconds(b.progressed), fmt::join(waiting, ", "))));
  }
}

void JobManager::advance(Job& job) {
  // Each step may make the next one possible (results complete and every rank already asked).
  for (;;) {
    if (job.phase == Phase::registering && job.registered == job.info.world_size) {
      start_rounds(job);
    } else if (job.phase == Phase::asking && at_barrier(job) == job.info.world_size && job.scheduler->ready()) {
      send_schedules(job);
    } else if (job.phase == Phase::running && job.reported == job.info.world_size) {
      finish_round(job);
    } else {
      return;
    }
  }
}

void JobManager::start_rounds(Job& job) {
  SchedulerContext context{job.info, {}, settings_, job.dir};
  context.wake = [this, executor = executor_, id = job.info.job_id] {
    boost::asio::post(executor, [this, id] {
      auto it = jobs_.find(id);
      if (it != jobs_.end() && it->second->phase != Phase::ended) advance(*it->second);
    });
  };
  for (auto& r : job.ranks) context.ranks.push_back(*r);
  json ranks = json::array();
  for (const auto& r : context.ranks) ranks.push_back(to_json(r));
  std::size_t bytes = 512 * ranks.size();
  dump(job, "ranks.json", std::move(ranks), bytes);
  try {
    job.scheduler = factory_(context);
  } catch (const std::exception& e) {
    return end(job, JobOutcome::failed(fmt::format("scheduler {} could not start: {}", settings_.scheduler, e.what())));
  }
  budget_->join(job.info.job_id, *job.scheduler, job.info, context.ranks, SteadyClock::now());
  job.phase = Phase::asking;
  arm_timer(job, "ask for the schedule");
}

json JobManager::answer(const Job& job, std::size_t rank) const {
  const auto& schedule = job.current[rank];
  if (job.ranks[rank] && job.ranks[rank]->dialect == Dialect::zeus) return to_zeus_json(schedule);
  json out = to_json(schedule);
  // The power budget's backstop (perseus's client applies it; the artifact's ignores the field).
  if (auto limit = budget_->power_limit(job.info.job_id)) out["power_limit"] = *limit;
  return out;
}

bool JobManager::next_schedules(Job& job) {
  auto fail = [&](const JobOutcome& outcome) {
    end(job, outcome);
    return false;
  };
  std::vector<PowerStateSchedule> schedules;
  try {
    schedules = job.scheduler->next_schedule();
  } catch (const SchedulerDone& e) {
    return fail(JobOutcome::done(e.what()));
  } catch (const std::exception& e) {
    return fail(JobOutcome::failed(
        fmt::format("scheduler {} failed in round {}: {}", settings_.scheduler, job.round, e.what())));
  }
  // A scheduler bug must not reach a GPU: one schedule per rank, one supported state per entry.
  std::vector<std::optional<PowerStateSchedule>> by_rank(job.ranks.size());
  for (auto& s : schedules) {
    if (s.rank < 0 || s.rank >= job.info.world_size || by_rank[static_cast<std::size_t>(s.rank)])
      return fail(JobOutcome::failed(
          fmt::format("scheduler {} gave a bad or duplicate schedule for rank {}", settings_.scheduler, s.rank)));
    const RankInfo& info = *job.ranks[static_cast<std::size_t>(s.rank)];
    if (info.pipe_schedule.empty()) {  // Zeus's client: the scheduler names each instruction
      bool named = !s.power_states.empty() && s.instructions.size() == s.power_states.size() &&
                   std::all_of(s.instructions.begin(), s.instructions.end(), is_compute_instruction);
      if (!named)
        return fail(
            JobOutcome::failed(fmt::format("scheduler {} cannot serve rank {}: Zeus's client does not send its "
                                           "instruction order, so only a scheduler that takes it from a plan can "
                                           "(PointSolution, PointSolution3D)",
                                           settings_.scheduler, s.rank)));
    } else if (s.power_states.size() != info.pipe_schedule.size())
      return fail(JobOutcome::failed(fmt::format("scheduler {} gave rank {} {} power states for {} instructions",
                                                 settings_.scheduler, s.rank, s.power_states.size(),
                                                 info.pipe_schedule.size())));
    // A state the rank's GPU lacks (a plan made on another GPU model; Zeus serves it as it is):
    // the nearest supported one below it, or the lowest the GPU has.
    for (int& state : s.power_states) {
      const auto& range = info.power_state_range;  // descending
      if (std::find(range.begin(), range.end(), state) != range.end()) continue;
      auto below = std::find_if(range.begin(), range.end(), [state](int s) { return s < state; });
      int served = below != range.end() ? *below : range.back();
      if (job.unsupported_warned.insert(state).second)
        spdlog::warn(
            "job {}: scheduler {} gave rank {} power state {}, which its GPU does not support; serving {} "
            "(the nearest below it) wherever a rank lacks it",
            job.info.job_id, settings_.scheduler, s.rank, state, served);
      state = served;
    }
    by_rank[static_cast<std::size_t>(s.rank)] = std::move(s);
  }
  job.current.clear();
  for (auto& s : by_rank) {
    if (!s)
      return fail(JobOutcome::failed(fmt::format("scheduler {} gave no schedule for some rank", settings_.scheduler)));
    job.current.push_back(std::move(*s));
  }
  return true;
}

void JobManager::send_schedules(Job& job) {
  if (!job.repeat && !next_schedules(job)) return;
  job.repeat = false;
  auto now = SteadyClock::now();
  if (job.round_started) {
    double took = std::chrono::duration<double>(now - *job.round_started).count();
    job.typical_round_s = job.typical_round_s == 0 ? took : 0.8 * job.typical_round_s + 0.2 * took;
  }
  job.round_started = now;
  for (auto& b : job.beats) b.progressed = now;  // waiting at the barrier was not a stall
  job.phase = Phase::running;
  job.restored = false;
  job.asked = 0;
  for (auto& r : job.results) r.reset();
  job.reported = 0;
  // Zeus's client asks once and never reports: its job is deployed, not waiting for results.
  bool zeus =
      std::any_of(job.ranks.begin(), job.ranks.end(), [](const auto& r) { return r && r->dialect == Dialect::zeus; });
  if (zeus) forget_after(job, settings_.max_job_idle_s);
  else arm_timer(job, "report results");
  for (std::size_t r = 0; r < job.waiting.size(); ++r) {
    Reply reply = std::move(job.waiting[r]);
    job.waiting[r] = nullptr;
    if (reply) reply(std::nullopt, answer(job, r));  // none: a rank that finished before it asked
  }
  spdlog::debug("job {}: round {} started", job.info.job_id, job.round);
}

// The round's schedules run again under the same number; nothing of this run is used.
void JobManager::run_round_again(Job& job) {
  job.stale_round = false;
  job.repeat = true;
  job.phase = Phase::asking;
  for (auto& r : job.results) r.reset();
  job.reported = 0;
  arm_timer(job, "ask for the schedule");
}

void JobManager::finish_round(Job& job) {
  // A round with a rejected result is run again, unobserved and unrecorded, so that no scheduler
  // decides on it and no profile holds it; a few in a row end the job saying why.
  if (!job.rejected.empty() && job.scheduler->observes_results()) {
    const auto& [rank, why] = *job.rejected.begin();
    if (++job.rejected_rounds > kMaxRejectedRounds)
      return end(job,
                 JobOutcome::failed(fmt::format("round {} was rejected {} times in a row: rank {}'s results are no "
                                                "measurement ({})",
                                                job.round, job.rejected_rounds, rank, why)));
    spdlog::warn("job {}: round {} runs again: {} rank(s) sent results that are no measurement", job.info.job_id,
                 job.round, job.rejected.size());
    job.rejected.clear();
    return run_round_again(job);
  }
  job.rejected.clear();
  job.rejected_rounds = 0;
  if (job.stale_round) {  // measurements of mixed schedules: the round runs again, under its number
    std::vector<int> stale;
    for (const auto& r : job.results)
      if (r && r->stale) stale.push_back(r->rank);
    spdlog::info("job {}: round {} runs again: ranks [{}] had not received its schedule when it began", job.info.job_id,
                 job.round, fmt::join(stale, ", "));
    return run_round_again(job);
  }
  std::vector<ProfilingResult> results;
  for (auto& r : job.results) results.push_back(std::move(*r));
  // What the round measured: time the slowest rank's, energy every rank's; the same per pipeline.
  std::map<int, TimeEnergy> by_pipeline;
  double time = 0, energy = 0;
  for (const auto& r : results) {
    double t = protocol::round_mean(r.iter_time), e = protocol::round_mean(r.iter_energy);
    auto& p = by_pipeline[job.ranks[static_cast<std::size_t>(r.rank)]->dp_rank];
    p.time = std::max(p.time, t), p.energy += e;
    time = std::max(time, t), energy += e;
  }
  job.measured = RoundMeasuredStatus{job.round, time, energy};
  job.pipelines.clear();
  for (const auto& [dp, p] : by_pipeline)
    job.pipelines.push_back({static_cast<std::size_t>(dp), p.time, p.energy, std::nullopt, std::nullopt});
  record_round(job, results);
  spdlog::info("job {}: round {} done", job.info.job_id, job.round);
  if (store_) {
    json record;  // null: the scheduler resumes without this round's results
    try {
      if (job.scheduler->observes_results()) record = job.scheduler->round_record(results);
    } catch (const std::exception&) {
      // observe() meets the same problem below and ends the job, which is what a restart restores.
    }
    std::size_t bytes = 1024 + (record.is_null() ? 0 : 32 * record.size());
    keep(
        job,
        [id = job.info.job_id, round = job.round, record = std::move(record)](JobStore& store) {
          store.add_round(id, round, record);
        },
        bytes);
  }
  ++job.round;
  job.phase = Phase::asking;
  for (auto& r : job.results) r.reset();
  job.reported = 0;
  try {
    job.scheduler->observe(results);
  } catch (const SchedulerDone& e) {
    return end(job, JobOutcome::done(e.what()));
  } catch (const std::exception& e) {
    return end(job, JobOutcome::failed(fmt::format("scheduler {} failed observing round {}: {}", settings_.scheduler,
                                                   job.round - 1, e.what())));
  }
  budget_->round(job.info.job_id,
                 {time, energy, job.scheduler->phase().value_or(JobPhase::running), job.typical_round_s},
                 SteadyClock::now());
  arm_timer(job, "ask for the schedule");
}

void JobManager::end(Job& job, const JobOutcome& outcome) {
  job.phase = Phase::ended;
  job.ended_at = SteadyClock::now();
  job.outcome = outcome;
  const std::string detail = to_detail(outcome);
  job.timer.cancel();
  job.watchdog.cancel();
  if (job.scheduler) {
    try {
      job.scheduler_status = job.scheduler->status();
      job.frontier_at_end = job.scheduler->frontier();
      job.timeline_at_end = job.scheduler->timeline();
    } catch (const std::exception&) {}
  }
  budget_->leave(job.info.job_id, job.ended_at);  // a job that ended, crashed or not, frees its share at once
  job.scheduler.reset();
  // What the rounds held goes now (the job's summary and end detail stay until it is forgotten).
  for (auto& r : job.results) r.reset();
  job.current = {};
  keep(job, [id = job.info.job_id, detail](JobStore& store) { store.end_job(id, detail); });
  // Without the wire marker: "[profiling-done]" ends every job that ended well, profiled or not.
  if (outcome.is_done()) spdlog::info("job {} done: {}", job.info.job_id, outcome.why);
  else spdlog::error("job {}: {}", job.info.job_id, detail);
  answer_waiting(job, Refusal::job_ended, detail);
  forget_later(job);
}

void JobManager::forget_later(Job& job) {
  // Late ranks still get the job's end detail for a while; then its memory goes (records stay on disk).
  forget_after(job, settings_.job_retention_s);
}

void JobManager::forget_after(Job& job, double seconds) {
  job.timer.cancel();
  if (seconds <= 0) return;
  job.timer.expires_after(clamped_duration(seconds));
  job.timer.async_wait([this, id = job.info.job_id](const boost::system::error_code& ec) {
    if (ec) return;  // the server is stopping
    forget(id);
  });
}

void JobManager::arm_timer(Job& job, const std::string& waiting_for) {
  job.timer.cancel();
  if (settings_.round_timeout_s <= 0) return;
  job.timer.expires_after(clamped_duration(settings_.round_timeout_s));
  std::string id = job.info.job_id;
  int round = job.round;
  job.timer.async_wait([this, id, round, waiting_for](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: the job moved on
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second->phase == Phase::ended) return;
    Job& job = *it->second;
    std::vector<int> missing;
    for (int r = 0; r < job.info.world_size; ++r) {
      auto i = static_cast<std::size_t>(r);
      bool done = job.phase == Phase::registering ? job.ranks[i].has_value()
                  : job.phase == Phase::asking    ? job.waiting[i] || job.finished.contains(r)
                                                  : job.results[i].has_value();
      if (!done) missing.push_back(r);
    }
    end(job, JobOutcome::failed(fmt::format("round {} timed out after {} s: ranks [{}] did not {}", round,
                                            settings_.round_timeout_s, fmt::join(missing, ", "), waiting_for)));
  });
}

void JobManager::answer_waiting(Job& job, Refusal refusal, const std::string& detail) {
  for (auto& reply : job.waiting) {
    if (!reply) continue;
    Reply r = std::move(reply);
    reply = nullptr;
    r(refusal, {{"detail", detail}});
  }
  job.asked = 0;
}

void JobManager::shutdown(const std::string& why) {
  for (auto& [id, job] : jobs_) {
    job->timer.cancel();
    job->watchdog.cancel();
    answer_waiting(*job, Refusal::server_stopping, why);
  }
}

}  // namespace perseus::server
