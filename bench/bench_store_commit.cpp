// The job store under a burst of registrations: C clients each register jobs (one job, then its
// ranks) as fast as their acknowledgements come back, for S seconds, through the StoreCommitter,
// which acknowledges a write only after the transaction holding it committed. Four ways:
//   group commit, synchronous=FULL    every write queued meanwhile in one transaction (perseus serve)
//   group commit, synchronous=NORMAL  the same, the commit not waiting for the disk
//   one write per transaction, FULL   what acknowledging after COMMIT costs without grouping
//   one write per transaction, NORMAL the rate at which a writer thread that commits each write
//                                     alone drains its queue
// Prints acknowledged writes per second and the p50/p99/max of a write's acknowledgement.
//
//   perseus_bench_store_commit [--clients 32] [--seconds 3] [--ranks 8] [--dir DIR]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "perseus/server/job_store.hpp"
#include "perseus/server/store_committer.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace perseus::server;

namespace {

struct Result {
  double writes_per_s = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
};

// Submits `write` and waits for its acknowledgement; the wait in milliseconds.
double acknowledged(StoreCommitter& committer, StoreCommitter::Write write) {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  auto start = Clock::now();
  while (!committer.submit(write, [&](bool) {
    std::lock_guard lock(mutex);
    done = true;
    done_cv.notify_one();
  }))
    std::this_thread::yield();
  std::unique_lock lock(mutex);
  done_cv.wait(lock, [&] { return done; });
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

Result run(const fs::path& dir, StoreSync sync, std::size_t max_batch, int clients, double seconds, int ranks) {
  fs::remove_all(dir);
  JobStore store(dir / ".perseus.db", sync);
  StoreCommitter::Options options;
  options.max_batch = max_batch;
  StoreCommitter committer(store, options);
  JobInfo job;
  job.world_size = ranks;
  job.pp_degree = ranks;
  job.framework = "bench", job.model_name = "model", job.partition_method = "uniform";
  RankInfo rank;
  rank.pipe_schedule = {"forward", "backward"};
  rank.power_state_range = {1410, 1200};
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::vector<double> waits;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      std::vector<double> mine;
      for (int n = 0; !stop.load(); ++n) {
        JobInfo info = job;
        info.job_id = fmt::format("client{}-job{}", c, n);
        mine.push_back(acknowledged(committer, [info](JobStore& s) { s.add_job(info); }));
        for (int r = 0; r < ranks && !stop.load(); ++r) {
          RankInfo one = rank;
          one.rank = r, one.pp_rank = r, one.job_id = info.job_id;
          mine.push_back(acknowledged(committer, [id = info.job_id, one](JobStore& s) { s.add_rank(id, one); }));
        }
      }
      std::lock_guard lock(mutex);
      waits.insert(waits.end(), mine.begin(), mine.end());
    });
  auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  double took = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(waits.begin(), waits.end());
  Result out;
  out.writes_per_s = static_cast<double>(waits.size()) / took;
  if (!waits.empty()) {
    out.p50_ms = waits[waits.size() / 2];
    out.p99_ms = waits[std::min(waits.size() - 1, waits.size() * 99 / 100)];
    out.max_ms = waits.back();
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int clients = 32, ranks = 8;
  double seconds = 3;
  fs::path dir = fs::temp_directory_path() / "perseus-bench-store";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--clients") clients = std::atoi(argv[i + 1]);
    else if (flag == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (flag == "--ranks") ranks = std::atoi(argv[i + 1]);
    else if (flag == "--dir") dir = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 64;
    }
  }
  spdlog::set_level(spdlog::level::warn);
  std::printf("%d clients, each registering a job and its %d ranks, acknowledged after COMMIT, for %.0f s (%s)\n",
              clients, ranks, seconds, dir.c_str());
  std::printf("%-36s %14s %9s %9s %9s\n", "", "writes/s", "p50 ms", "p99 ms", "max ms");
  struct Way {
    const char* name;
    StoreSync sync;
    std::size_t batch;
  };
  for (Way way : {Way{"group commit, synchronous=FULL", StoreSync::full, 4096},
                  Way{"group commit, synchronous=NORMAL", StoreSync::normal, 4096},
                  Way{"one write per transaction, FULL", StoreSync::full, 1},
                  Way{"one write per transaction, NORMAL", StoreSync::normal, 1}}) {
    Result r = run(dir, way.sync, way.batch, clients, seconds, ranks);
    std::printf("%-36s %14.0f %9.2f %9.2f %9.2f\n", way.name, r.writes_per_s, r.p50_ms, r.p99_ms, r.max_ms);
    std::fflush(stdout);
  }
  fs::remove_all(dir);
  return 0;
}
