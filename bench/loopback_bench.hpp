#pragma once
// What the two loopback benchmarks (server load and its raw floor) measure the same way.
#include <pthread.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace perseus::bench {

inline double cpu_seconds(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// CPU seconds the calling thread has used so far.
inline double this_thread_cpu_seconds() { return cpu_seconds(CLOCK_THREAD_CPUTIME_ID); }

// CPU seconds a pool of threads has used so far.
inline double cpu_seconds(std::vector<std::thread>& pool) {
  double total = 0;
  for (auto& t : pool) {
    clockid_t clock{};
    if (pthread_getcpuclockid(t.native_handle(), &clock) == 0) total += cpu_seconds(clock);
  }
  return total;
}

inline double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<std::size_t>(p * double(values.size() - 1) + 0.5))];
}

// Both sides of every connection live in one process: two descriptors per simulated rank.
inline void raise_open_file_limit() {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
}

}  // namespace perseus::bench
