#include "heartbeat.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "perseus/client/http_client.hpp"

namespace perseus::client {

Heartbeat::Heartbeat(HeartbeatOptions options, const std::atomic<std::uint64_t>& progress, OnReply on_reply)
    : thread_([this, options = std::move(options), &progress, on_reply = std::move(on_reply)] {
        run(options, progress, on_reply);
      }) {}

Heartbeat::~Heartbeat() { stop(); }

void Heartbeat::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Heartbeat::run(const HeartbeatOptions& options, const std::atomic<std::uint64_t>& progress,
                    const OnReply& on_reply) {
  const Endpoint& endpoint = options.endpoint;
  auto http = endpoint.open();
  const std::string target = fmt::format("/heartbeat/{}", encode_path_segment(endpoint.job_id));
  std::unique_lock lock(mutex_);
  for (;;) {
    nlohmann::json body = {{"rank", endpoint.rank}, {"progress", progress.load(std::memory_order_relaxed)}};
    lock.unlock();
    try {
      auto reply = http->request("POST", target, body.dump(), std::min(endpoint.request_timeout, options.interval * 2));
      if (reply.status == 200 && on_reply) on_reply(reply.body);
    } catch (const std::exception& e) {
      spdlog::debug("perseus: rank {}: heartbeat: {}", endpoint.rank, e.what());  // the round boundary handles outages
    }
    lock.lock();
    if (wake_.wait_for(lock, options.interval, [&] { return stop_; })) break;
  }
}

}  // namespace perseus::client
