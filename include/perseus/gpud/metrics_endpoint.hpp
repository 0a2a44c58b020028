#pragma once
// `perseus gpud --metrics-address`: the daemon's state in the Prometheus text exposition format
// 0.0.4, served at GET /metrics by a small HTTP listener on the daemon's io_context. Per GPU
// (labels `gpu`, the NVML index, and `uuid`): the SM clock a client locked it to, its power limit,
// power draw and energy counter, whether a client owns it and how many resets the daemon did for
// its clients. Scraping only reads: it never changes a GPU. Owners' pids and uids are not labels
// (one series per process would grow without bound); the daemon logs them when a GPU is claimed.
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "perseus/gpu/gpu.hpp"
#include "perseus/gpud/daemon.hpp"

namespace perseus::gpud {

inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

struct MetricsAddress {
  std::string host;  // an IP address: the listener does no name lookup
  unsigned short port = 0;
};

// "PORT" (on 127.0.0.1), "HOST:PORT" or "[IPV6]:PORT". Throws perseus::Error (usage) naming
// --metrics-address.
MetricsAddress parse_metrics_address(std::string_view text);
bool is_loopback(const std::string& host);

// What a scraper can make the listener hold.
struct MetricsLimits {
  std::size_t max_connections = 8;                                    // more are closed at once
  std::size_t max_request_bytes = 8192;                               // request line and headers
  std::size_t max_body_bytes = 1024;                                  // a body is never needed
  std::chrono::milliseconds idle_timeout = std::chrono::seconds(10);  // per request read and reply write
};

// The GPU reads that failed, so each failure is logged once (and its recovery once) rather than
// on every scrape.
struct ReadFailures {
  std::set<std::string> failing;  // "GPU 1 power" ...
  std::uint64_t total = 0;        // failed reads since the daemon started
};

// The exposition text for `stats`, reading the live values through `gpu`; `labels[d]` is GPU d's
// label set. A read that fails leaves that one sample out.
std::string render_metrics(const DaemonStats& stats, gpu::GpuLibrary& gpu, const std::vector<std::string>& labels,
                           ReadFailures& failures);

// The label set of each GPU: gpu="INDEX",uuid="UUID" (the GPU's name when the library has no UUID).
std::vector<std::string> gpu_labels(gpu::GpuLibrary& gpu, unsigned device_count);

class MetricsEndpoint {
 public:
  // Listens on `address` at once (port 0: any free port); throws perseus::Error when it cannot.
  // `daemon` and `gpu` must outlive the endpoint; serves on `io`, the daemon's (one thread).
  MetricsEndpoint(boost::asio::io_context& io, const Daemon& daemon, std::shared_ptr<gpu::GpuLibrary> gpu,
                  const MetricsAddress& address, MetricsLimits limits = {});
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  unsigned short port() const;
  // Closes the listener and every connection. Call on io's thread (or with io stopped).
  void stop();

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace perseus::gpud
