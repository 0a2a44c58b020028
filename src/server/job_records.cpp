// The job manager's records and store: what each job's state commits to the job store, the
// per-round record files, and restoring jobs from the store after a restart.
#include "perseus/server/job_manager.hpp"

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <limits>
#include <string_view>

#include "job_manager_job.hpp"
#include "perseus/util/atomic_file.hpp"

namespace perseus::server {

namespace fs = std::filesystem;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

void JobManager::keep(const Job& job, std::function<void(JobStore&)> write, std::size_t bytes) {
  if (committer_) committer_->keep(fmt::format("job {}'s state", job.info.job_id), bytes, std::move(write));
}

void JobManager::durably(std::function<void(JobStore&)> write, std::function<void(bool)> then) {
  if (!committer_) return then(true);
  auto on_strand = [executor = executor_, then](bool committed) {
    boost::asio::post(executor, [then, committed] { then(committed); });
  };
  if (!committer_->submit(std::move(write), on_strand)) then(false);
}

void JobManager::after_stored(Ack ack) {
  if (!committer_ || committer_->failing()) return ack(std::nullopt);
  auto on_strand = [executor = executor_, ack](bool) { boost::asio::post(executor, [ack] { ack(std::nullopt); }); };
  if (!committer_->submit({}, on_strand)) ack(std::nullopt);
}

void JobManager::write_held_jobs_again() {
  for (const auto& [id, job] : jobs_) {
    keep(*job, [info = job->info](JobStore& store) { store.add_job(info); });
    for (const auto& rank : job->ranks)
      if (rank) keep(*job, [id, rank = *rank](JobStore& store) { store.add_rank(id, rank); });
    if (job->phase == Phase::ended)
      keep(*job, [id, detail = to_detail(job->outcome)](JobStore& store) { store.end_job(id, detail); });
  }
}

namespace {

// Rounds a job's records folder holds records of: one past the highest N of its N.prof.json files
// (0 when none).
int rounds_recorded(const fs::path& dir) {
  int rounds = 0;
  std::error_code ec;
  std::size_t looked = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end && looked < 100000; it.increment(ec), ++looked) {
    std::string name = it->path().filename().string();
    constexpr std::string_view kSuffix = ".prof.json";
    if (name.size() <= kSuffix.size() || !name.ends_with(kSuffix)) continue;
    int round = -1;
    const char* last = name.data() + name.size() - kSuffix.size();
    auto [at, error] = std::from_chars(name.data(), last, round);
    if (error == std::errc() && at == last && round >= 0 && round < std::numeric_limits<int>::max())
      rounds = std::max(rounds, round + 1);
  }
  return rounds;
}

}  // namespace

// After a damaged store was set aside: the jobs whose records folders say they existed and that
// were not resumed (ended jobs among them), and the jobs resumed at an earlier round than their
// records reach, named, so that nothing goes missing silently.
void JobManager::name_records_not_resumed() const {
  std::vector<std::string> behind;
  for (const auto& [id, job] : jobs_) {
    if (job->phase == Phase::ended) continue;
    if (int recorded = rounds_recorded(job->dir); recorded > job->round)
      behind.push_back(fmt::format("{} (at round {}, its records reach round {})", id, job->round, recorded - 1));
  }
  if (!behind.empty()) {
    std::string names;
    for (std::size_t i = 0; i < behind.size() && i < 50; ++i) names += (i ? ", " : "") + behind[i];
    if (behind.size() > 50) names += fmt::format(" and {} more", behind.size() - 50);
    spdlog::warn(
        "jobs resumed earlier than their records reach (the job store was damaged; those rounds run again): {}", names);
  }
  std::vector<std::string> missing;
  std::error_code ec;
  std::size_t looked = 0;
  for (fs::directory_iterator it(settings_.dump_dir, ec), end; !ec && it != end && looked < 100000;
       it.increment(ec), ++looked) {
    if (!it->is_directory(ec) || it->path().filename().string().starts_with(".")) continue;
    try {
      json job = json::parse(read_file(it->path() / "job.json"));
      std::string id = job.at("job").at("job_id").get<std::string>();
      if (jobs_.count(id) == 0) missing.push_back(id);
    } catch (const std::exception&) {
      // not a job's records folder
    }
  }
  if (missing.empty()) return;
  std::sort(missing.begin(), missing.end());
  std::string names;
  for (std::size_t i = 0; i < missing.size() && i < 50; ++i) names += (i ? ", " : "") + missing[i];
  if (missing.size() > 50) names += fmt::format(" and {} more", missing.size() - 50);
  spdlog::warn("jobs recorded in {} that are not resumed (the job store was damaged; ended jobs are among them): {}",
               settings_.dump_dir, names);
}

void JobManager::restore(StoredJob stored) {
  std::string id = stored.info.job_id;
  auto job = std::make_unique<Job>(executor_, stored.info);
  job->dir = fs::path(settings_.dump_dir) / records_dir_name(id);
  Job& ref = *job;
  jobs_.emplace(id, std::move(job));
  for (auto& rank : stored.ranks) {
    if (rank.rank < 0 || rank.rank >= ref.info.world_size) continue;
    ref.ranks[static_cast<std::size_t>(rank.rank)] = std::move(rank);
    ++ref.registered;
  }
  if (stored.ended) {
    ref.phase = Phase::ended;
    ref.ended_at = SteadyClock::now();
    ref.outcome = outcome_from_detail(stored.end_detail).value_or(JobOutcome::failed(stored.end_detail));
    spdlog::info("job {} restored (ended: {})", id, stored.end_detail);
    return forget_later(ref);
  }
  if (ref.registered < ref.info.world_size) {
    spdlog::info("job {} restored: {}/{} ranks registered", id, ref.registered, ref.info.world_size);
    return arm_timer(ref, "register");
  }
  start_rounds(ref);
  if (ref.phase == Phase::ended) return;
  // Replay the completed rounds into the new scheduler: its progress comes back as it was.
  int r = 0;
  try {
    for (; r < stored.rounds; ++r) {
      (void)ref.scheduler->next_schedule();
      const json& record = stored.records[static_cast<std::size_t>(r)];
      if (record.is_null()) ref.scheduler->observe({});
      else ref.scheduler->replay(record);
    }
  } catch (const std::exception& e) {
    return end(ref, JobOutcome::failed(
                        fmt::format("could not resume after a server restart (replaying round {}): {}", r, e.what())));
  }
  ref.round = stored.rounds;
  ref.restored = true;
  spdlog::info("job {} restored at round {}", id, ref.round);
}

void JobManager::record_round(const Job& job, const std::vector<ProfilingResult>& results) const {
  if (!settings_.dump_data) return;
  json sched = json::array(), prof = json::array();
  std::size_t values = 0;  // numbers in the results recorded, for the writer's queue bound
  auto count = [&](const ProfilingResult& r) {
    values += r.iter_time.size() + r.iter_energy.size();
    for (const auto* b : {&r.time_breakdown, &r.energy_breakdown})
      for (const auto& [name, iterations] : *b)
        for (const auto& it : iterations) values += it.size();
  };
  if (settings_.record_ranks) {
    for (std::size_t r = 0; r < job.current.size(); ++r) sched.push_back(answer(job, r));
    for (const auto& r : results) prof.push_back(to_json(r)), count(r);
  } else {
    // Each stage's first rank, and every rank whose schedule differs from it (its own plan).
    std::map<int, std::size_t> first;
    for (std::size_t r = 0; r < job.current.size(); ++r) {
      auto [it, fresh] = first.emplace(job.ranks[r]->pp_rank, r);
      const auto& mine = job.current[r];
      const auto& theirs = job.current[it->second];
      if (fresh || mine.power_states != theirs.power_states || mine.instructions != theirs.instructions)
        sched.push_back(answer(job, r));
    }
    std::vector<int> stage_of;
    for (const auto& r : job.ranks) stage_of.push_back(r->pp_rank);
    std::vector<ProfilingResult> folded;
    try {
      folded = fold_stages(results, stage_of);
    } catch (const std::exception& e) {
      // Ranks disagree on what they measured: keep the iterations, without per-instruction detail.
      spdlog::warn("job {}: round {}'s results fold per stage only without their breakdowns: {}", job.info.job_id,
                   job.round, e.what());
      auto bare = results;
      for (auto& r : bare) r.time_breakdown.clear(), r.energy_breakdown.clear();
      folded = fold_stages(bare, stage_of);
    }
    for (const auto& r : folded) prof.push_back(to_json(r)), count(r);
  }
  dump(job, fmt::format("{}.sched.json", job.round), std::move(sched), 4096 + 8 * job.current.size());
  dump(job, fmt::format("{}.prof.json", job.round), std::move(prof), 1024 + 24 * values);
  if (settings_.record_rounds > 0 && job.round >= settings_.record_rounds) {
    int old = job.round - settings_.record_rounds;
    writer_->post(fmt::format("job {}: removing round {}'s records", job.info.job_id, old), 256, [dir = job.dir, old] {
      for (const char* kind : {"sched", "prof"}) fs::remove(dir / fmt::format("{}.{}.json", old, kind));
    });
  }
}

void JobManager::dump(const Job& job, const std::string& name, json content, std::size_t bytes) const {
  if (!settings_.dump_data) return;
  fs::path path = job.dir / name;
  writer_->post(path.string(), bytes, [path, content = std::move(content)] {
    fs::create_directories(path.parent_path());
    write_file_atomic(path, content.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  });
}

}  // namespace perseus::server
