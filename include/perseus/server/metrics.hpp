#pragma once
// What `GET /metrics` exposes, in Prometheus' text format (0.0.4): per job, what its status says
// (phase, round, ranks, baseline and measured time and energy, saving and slowdown with their
// intervals, the energy saved so far, the straggler's slowdown, step-ups), and per server, its
// requests by route and status, their latency, the jobs by phase, the store's writes and the open
// connections. Names follow Prometheus' conventions: `perseus_` prefix, base units in the name,
// counters ending in `_total`. Label values are bounded: routes are a fixed set and jobs leave
// when the server forgets them (job_retention_s after they end).
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "perseus/server/job_status.hpp"

namespace perseus::server {

// The route a request path belongs to: a name of route_table.hpp's (by the path's first segment),
// "page" or "other", so that no client can grow the metrics with paths of its own.
std::string_view route_of(std::string_view path);

// Request latency bucket bounds, seconds (a schedule request waits at its round's barrier, so the
// buckets reach to minutes).
inline constexpr std::array<double, 12> kLatencyBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                           0.05,   0.1,   0.5,    2.5,   10,   60};

// The HTTP front's counters; safe to update from every I/O thread.
class HttpMetrics {
 public:
  void connection_opened() { ++open_connections_; }
  void connection_closed() { --open_connections_; }
  void request_done(std::string_view route, int status, double seconds);

  struct Latency {
    std::array<std::uint64_t, kLatencyBuckets.size()> buckets{};  // not cumulative
    std::uint64_t count = 0;
    double sum = 0;
  };
  struct Snapshot {
    std::map<std::pair<std::string, int>, std::uint64_t> requests;  // (route, status) -> count
    std::map<std::string, Latency> latency;                         // route -> histogram
    long long open_connections = 0;
  };
  Snapshot snapshot() const;

 private:
  std::atomic<long long> open_connections_{0};
  mutable std::mutex mutex_;
  Snapshot counts_;
};

struct StoreCounters {
  std::uint64_t writes = 0, failures = 0, dropped = 0;
};

// The exposition text: `jobs` the jobs' statuses (GET /jobs/{job_id}'s), `budget` the cluster's
// power budget (GET /power_budget's; none: not shown).
std::string render_metrics(const std::vector<JobStatus>& jobs, const HttpMetrics::Snapshot& http,
                           const StoreCounters& store, const std::string& version,
                           const std::optional<PowerBudgetStatus>& budget = std::nullopt);

// The content type of the exposition text.
inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace perseus::server
