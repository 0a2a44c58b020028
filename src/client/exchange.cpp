#include "exchange.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "perseus/client/http_client.hpp"
#include "perseus/util/error.hpp"

namespace perseus::client {

void Exchange::start(std::function<void()> register_rest) {
  {
    std::lock_guard lock(mutex_);
    want_schedule_ = true;
    if (register_rest) outage_since_ = Clock::now();  // retry_for counts from here
  }
  register_rest_ = std::move(register_rest);
  thread_ = std::thread([this] { run(); });
}

void Exchange::hand_over(protocol::ProfilingResult result) {
  {
    std::lock_guard lock(mutex_);
    if (!outbox_) outbox_ = std::move(result);
    want_schedule_ = true;
  }
  wake_.notify_all();
}

std::optional<Exchange::Arrived> Exchange::take_locked() {
  if (!inbox_) return std::nullopt;
  Arrived arrived{std::move(*inbox_), received_};
  inbox_.reset();
  return arrived;
}

std::optional<Exchange::Arrived> Exchange::take_schedule() {
  std::lock_guard lock(mutex_);
  return take_locked();
}

std::uint64_t Exchange::received() const {
  std::lock_guard lock(mutex_);
  return received_;
}

Exchange::Outcome Exchange::outcome_locked() const { return {done_, failure_, failure_unreachable_}; }

Exchange::Outcome Exchange::outcome() const {
  std::lock_guard lock(mutex_);
  return outcome_locked();
}

bool Exchange::settled_now() const {
  bool work = outbox_ || want_schedule_;
  return !busy_ && (!work || stop_ || done_ || failure_ || Clock::now() < next_attempt_);
}

bool Exchange::wait_settled(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return settled_.wait_for(lock, timeout, [&] { return settled_now(); });
}

std::pair<Exchange::Outcome, std::optional<Exchange::Arrived>> Exchange::wait_first_schedule(
    std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  settled_.wait_for(lock, timeout, [&] { return settled_now(); });
  return {outcome_locked(), take_locked()};
}

void Exchange::stop(std::chrono::milliseconds grace) {
  if (!thread_.joinable()) return;
  {
    std::unique_lock lock(mutex_);
    settled_.wait_for(lock, grace, [&] { return !outbox_ || settled_now(); });
    stop_ = true;
  }
  wake_.notify_all();
  connection_.cancel();
  thread_.join();
}

Exchange::Schedule Exchange::fetch_schedule() {
  const auto target = fmt::format("/schedule/{}?rank={}", encode_path_segment(connection_.job_id()), options_.rank);
  auto schedule = protocol::schedule_from_json(connection_.call("GET", target, nullptr));
  if (schedule.power_states.size() != options_.pipe_schedule.size())
    throw Error(fmt::format("the server sent {} power states for {} instructions", schedule.power_states.size(),
                            options_.pipe_schedule.size()));
  return {std::move(schedule.power_states), schedule.power_limit_w};
}

void Exchange::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    settled_.notify_all();
    wake_.wait(lock, [&] { return stop_ || ((outbox_ || want_schedule_) && !done_ && !failure_); });
    if (stop_) break;
    if (Clock::now() < next_attempt_) {  // backing off: the server is away
      wake_.wait_until(lock, next_attempt_, [&] { return stop_; });
      continue;
    }
    busy_ = true;
    std::optional<protocol::ProfilingResult> result = outbox_;
    lock.unlock();
    try {
      if (register_rest_) {
        register_rest_();
        register_rest_ = nullptr;
        lock.lock();
        outage_since_.reset();
        lock.unlock();
      }
      if (result)
        connection_.call("POST", fmt::format("/result/{}", encode_path_segment(connection_.job_id())),
                         protocol::to_json(*result));
      lock.lock();
      outbox_.reset();
      lock.unlock();
      Schedule schedule = fetch_schedule();
      lock.lock();
      if (outage_since_) {
        spdlog::info("perseus: rank {}: the server is back after {:.1f} s", options_.rank,
                     std::chrono::duration<double>(Clock::now() - *outage_since_).count());
        outage_since_.reset();
      }
      inbox_ = std::move(schedule);
      ++received_;
      want_schedule_ = false;
    } catch (const ProfilingDone& e) {
      if (!lock.owns_lock()) lock.lock();
      done_ = e.what();
      news_ = true;
    } catch (const ServerUnreachable& e) {
      if (!lock.owns_lock()) lock.lock();
      server_unreachable(e);
    } catch (const std::exception& e) {
      if (!lock.owns_lock()) lock.lock();
      failure_ = e.what();
      news_ = true;
    }
    busy_ = false;
  }
  settled_.notify_all();
}

// The server could not be reached or did not answer in time: training goes on at the current
// schedule and the exchange tries again, backing off, until retry_for passed.
void Exchange::server_unreachable(const std::exception& e) {
  auto now = Clock::now();
  if (!outage_since_) {
    outage_since_ = now;
    retry_delay_ = std::chrono::milliseconds(500);
    if (options_.retry_for.count() > 0)
      spdlog::warn(
          "perseus: rank {}: the server is unreachable ({}); training continues at the current clocks, "
          "retrying for up to {} s",
          options_.rank, e.what(), std::chrono::duration_cast<std::chrono::seconds>(options_.retry_for).count());
  }
  if (now - *outage_since_ >= options_.retry_for) {
    failure_ = fmt::format("the server was unreachable for {} s: {}",
                           std::chrono::duration_cast<std::chrono::seconds>(options_.retry_for).count(), e.what());
    failure_unreachable_ = true;
    news_ = true;
    return;
  }
  if (dynamic_cast<const ServerTimeout*>(&e) != nullptr) return;  // it waited its deadline already: ask again now
  auto jitter = std::uniform_real_distribution<double>(0.5, 1.0)(random_);
  next_attempt_ = now + std::chrono::duration_cast<Clock::duration>(retry_delay_ * jitter);
  retry_delay_ = std::min(retry_delay_ * 2, std::chrono::milliseconds(10000));
}

}  // namespace perseus::client
