#include "perseus/client/client.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <variant>

#include "clock_reset.hpp"
#include "heartbeat.hpp"
#include "iteration_meter.hpp"
#include "perseus/client/http_client.hpp"
#include "perseus/gpu/visible_devices.hpp"
#include "perseus/gpud/client.hpp"
#include "perseus/pipeline/schedule.hpp"
#include "perseus/protocol/job_outcome.hpp"
#include "perseus/protocol/job_secret.hpp"
#include "perseus/protocol/models.hpp"
#include "perseus/protocol/power_mode.hpp"
#include "perseus/protocol/power_state.hpp"
#include "perseus/util/error.hpp"

namespace perseus::client {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

std::vector<std::string> default_pipe_schedule(int pp_rank, int pp_degree, int num_microbatches, ScheduleKind kind,
                                               int virtual_stages) {
  std::vector<std::string> out;
  for (const auto& i : stage_schedule(kind, pp_rank, pp_degree, num_microbatches, 0, virtual_stages))
    out.emplace_back(to_string(i.kind));
  return out;
}

namespace {

struct Event {
  // report: hand the round's measurements to the exchange thread (state 1: stale); restart: drop
  // what the round measured so far (it ran the previous schedule).
  // power_limit: the power budget's backstop (state: the limit in mW; -1: none).
  enum Kind : std::uint8_t { step_begin, step_end, begin, end, flush, reset, report, restart, power_limit } kind;
  int state = -1;  // power state to apply before measuring; -1: keep
  std::string name;
  SteadyClock::time_point time;
};

// Appends one iteration's values per instruction name to a round's breakdown: every name seen in
// the round gets a row per iteration, empty where it did not run.
void append_iteration(protocol::Breakdown& rounds, const std::map<std::string, std::vector<double>>& step,
                      std::size_t iterations_before) {
  for (const auto& [name, values] : step) rounds[name];
  for (auto& [name, rows] : rounds) {
    rows.resize(iterations_before);
    auto it = step.find(name);
    rows.push_back(it != step.end() ? it->second : std::vector<double>{});
  }
}

}  // namespace

struct Client::Impl {
  ClientOptions options;
  std::shared_ptr<gpu::GpuLibrary> gpu;
  std::unique_ptr<HttpClient> http;
  std::string job_id;
  std::string job_secret;  // "" when the job has none (an older server, or joined by id without one)
  protocol::PowerMode mode = protocol::PowerMode::frequency;
  unsigned limit_before_mw = 0;  // power-limit mode: what close() restores
  bool enabled = false;
  bool registered_reset = false;
  // Connecting (see start): the steps done so far, then registered. Until `connected`, written by
  // whichever thread connects (the constructor's, else the exchange thread); read by the training
  // thread only after it saw `connected` (activate).
  bool server_known = false, gpu_ready = false;
  std::vector<int> states;  // the GPU's power states in the server's mode
  std::atomic<bool> connected{false};
  SteadyClock::time_point created = SteadyClock::now();
  // Training thread: the hooks take part (the client is registered and activate() ran).
  bool active = false;
  std::string shown_job_id, shown_job_secret;
  protocol::PowerMode shown_mode = protocol::PowerMode::frequency;
  bool joined_broadcast = false;  // took part in the job-id broadcast (a collective of all ranks)

  // Training thread only.
  std::vector<int> schedule;
  std::vector<std::string> known_names;  // distinct names in pipe_schedule
  std::size_t cursor = 0;
  bool mismatched = false;                 // the order differed once: default clocks from then on
  std::atomic<std::uint64_t> progress{0};  // hooks called: the heartbeat's sign of life
  std::optional<Heartbeat> heartbeat;      // from registration to stop_controller (heartbeat.hpp)
  int iterations = 0;                      // completed in this round
  int round = 0;                           // rounds completed
  // Schedules are numbered as they arrive (1, 2, ...); the server expects one result per schedule.
  std::uint64_t applied_seq = 0;   // the schedule in use
  std::uint64_t round_seq = 0;     // the schedule this round runs from its first measured iteration
  std::uint64_t reported_seq = 0;  // the last schedule a result was sent for

  // Exchange thread: sends results and fetches schedules, so that the hooks never wait on the network.
  std::thread exchange;
  std::mutex exchange_mutex;
  std::condition_variable exchange_wake, exchange_settled;
  std::optional<protocol::ProfilingResult> outbox;  // a round's result to send
  bool want_schedule = false;                       // ask for the next schedule (after sending outbox)
  struct Received {
    std::vector<int> states;
    std::optional<double> power_limit_w;  // the power budget's backstop while it runs
  };
  std::optional<Received> inbox;   // a schedule that arrived and is not in use yet
  std::uint64_t received_seq = 0;  // schedules that arrived
  bool exchange_busy = false, exchange_stop = false;
  std::atomic<bool> exchange_news{false};  // done or failure is set: the training thread acts on it
  std::optional<std::string> done_detail;  // the server says training is done
  std::optional<std::string> failure;      // the exchange gave up: why
  bool failure_unreachable = false;
  std::optional<SteadyClock::time_point> outage_since;  // the server has been unreachable since
  SteadyClock::time_point next_attempt;
  std::chrono::milliseconds retry_delay{500};
  std::minstd_rand random{std::random_device{}()};

  // Shared with the controller thread.
  std::mutex mutex;
  std::condition_variable wake, drained;
  std::deque<Event> queue;
  std::uint64_t enqueued = 0, processed = 0;
  bool stopping = false;
  protocol::ProfilingResult round_data;  // this round's measurements so far
  std::thread controller;

  // Controller thread only.
  int applied = -1;
  bool apply_failed = false;
  // A clock locked for the instruction running now, read back from the GPU when it ends: a GPU
  // applies a locked clock some time after the call, and a change that had not taken effect by
  // then did not do what the plan meant (counted per round, reported with the results).
  std::optional<int> to_check;
  int round_changes = 0, round_late = 0;
  unsigned cap_mw = 0;         // the power budget's limit in force (0: none)
  unsigned before_cap_mw = 0;  // the GPU's limit before it: what lifting it restores
  bool cap_failed = false;
  IterationMeter meter{[this] { return energy_j(); }};

  SteadyClock::time_point now() const { return options.clock ? options.clock() : SteadyClock::now(); }

  void push(Event event) {
    if (options.inline_controller) {
      handle(event);
      return;
    }
    {
      std::lock_guard lock(mutex);
      queue.push_back(std::move(event));
      ++enqueued;
    }
    wake.notify_one();
  }

  double energy_j() { return static_cast<double>(gpu->total_energy_mj(options.device)) / 1000.0; }

  void apply(int state) {
    if (state < 0 || state == applied || clock_reset_started()) return;
    try {
      const auto power_state = protocol::power_state(mode, static_cast<unsigned>(state));
      if (const auto* limit = std::get_if<protocol::Watts>(&power_state)) {
        gpu->set_power_limit_mw(options.device, capped(protocol::to_milliwatts(*limit).value));
      } else {
        const auto clock = std::get<protocol::Megahertz>(power_state);
        gpu->lock_graphics_clock(options.device, clock.value, clock.value);
        to_check = state;
        ++round_changes;
      }
      applied = state;
    } catch (const std::exception& e) {
      if (!apply_failed)
        spdlog::warn("perseus: rank {}: cannot apply power state {}: {}", options.rank, state, e.what());
      apply_failed = true;
    }
  }

  // The power-limit mode's state in force, in the GPU's unit.
  unsigned applied_limit_mw() const {
    return protocol::to_milliwatts(protocol::Watts{static_cast<unsigned>(applied)}).value;
  }

  // A power-limit mode's state under the power budget's limit.
  unsigned capped(unsigned limit_mw) const {
    if (cap_mw == 0) return limit_mw;
    return std::max(std::min(limit_mw, cap_mw), gpu->power_limit_range(options.device).min_mw);
  }

  // The power budget's backstop: the GPU's power limit while the server asks for one (`mw` < 0:
  // none), within what the GPU supports and never above the limit it had (an administrator's cap
  // stays). Lifting it restores that limit.
  void set_power_cap(int mw) {
    if (clock_reset_started() || (mw < 0 && cap_mw == 0)) return;
    const bool power_states = mode == protocol::PowerMode::power_limit;
    try {
      if (mw < 0) {
        gpu->set_power_limit_mw(options.device, power_states && applied >= 0 ? applied_limit_mw() : before_cap_mw);
        cap_mw = 0;
        forget_power_limit(gpu.get(), options.device);
        return;
      }
      if (cap_mw == 0) {
        before_cap_mw = power_states && limit_before_mw != 0 ? limit_before_mw : gpu->power_limit_mw(options.device);
        remember_power_limit(gpu.get(), options.device, before_cap_mw);
      }
      const auto range = gpu->power_limit_range(options.device);
      const unsigned ceiling = std::max(range.min_mw, std::min(range.max_mw, before_cap_mw));
      const unsigned wanted = std::clamp(static_cast<unsigned>(mw), range.min_mw, ceiling);
      if (wanted == cap_mw && !power_states) return;  // in force already: no driver call every round
      cap_mw = wanted;
      gpu->set_power_limit_mw(options.device, power_states && applied >= 0 ? capped(applied_limit_mw()) : cap_mw);
    } catch (const std::exception& ex) {
      if (!cap_failed)
        spdlog::warn("perseus: rank {}: cannot apply the power budget's power limit: {}", options.rank, ex.what());
      cap_failed = true;
    }
  }

  void handle(const Event& e) {
    try {
      switch (e.kind) {
        case Event::step_begin:
          meter.step_begin(e.time);
          break;
        case Event::begin:
          apply(e.state);
          meter.begin(e.name, e.time);
          break;
        case Event::end: {
          meter.end(e.name, e.time);
          if (to_check) {
            try {
              if (gpu->current_graphics_clock(options.device) != static_cast<unsigned>(*to_check)) ++round_late;
            } catch (const std::exception&) {  // not readable (gpud restarting): not counted either way
            }
            to_check.reset();
          }
          break;
        }
        case Event::step_end: {
          auto iteration = meter.step_end(e.time);
          if (!iteration) break;
          std::lock_guard lock(mutex);
          append_iteration(round_data.time_breakdown, iteration->time_breakdown, round_data.iter_time.size());
          append_iteration(round_data.energy_breakdown, iteration->energy_breakdown, round_data.iter_time.size());
          round_data.iter_time.push_back(iteration->time_s);
          round_data.iter_energy.push_back(iteration->energy_j);
          break;
        }
        case Event::flush:
          break;
        case Event::power_limit:
          set_power_cap(e.state);
          break;
        case Event::reset:
          reset_clocks();
          break;
        case Event::restart: {
          std::lock_guard lock(mutex);
          round_data = {};
          round_changes = round_late = 0;
          break;
        }
        case Event::report: {
          protocol::ProfilingResult data;
          {
            std::lock_guard lock(mutex);
            data = std::move(round_data);
            round_data = {};
          }
          data.rank = options.rank;
          data.stale = e.state == 1;
          data.clock_changes = round_changes;
          data.clocks_late = round_late;
          round_changes = round_late = 0;
          hand_over(std::move(data));
          break;
        }
      }
    } catch (const std::exception& ex) {
      if (!apply_failed) spdlog::warn("perseus: rank {}: GPU measurement failed: {}", options.rank, ex.what());
      apply_failed = true;
      meter.read_failed();
    }
  }

  void run_controller() {
    std::unique_lock lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty() && stopping) break;
      Event e = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      handle(e);
      lock.lock();
      ++processed;
      if (processed == enqueued) drained.notify_all();
    }
    lock.unlock();
    reset_clocks();
  }

  void reset_clocks() {
    if (cap_mw != 0 && mode != protocol::PowerMode::power_limit) set_power_cap(-1);  // the limit it had
    if (cap_mw != 0) forget_power_limit(gpu.get(), options.device);  // power-limit mode restores its own below
    cap_mw = 0;
    try {
      if (mode == protocol::PowerMode::power_limit) {  // back to the limit the GPU had before (an admin's cap stays)
        gpu->set_power_limit_mw(
            options.device, limit_before_mw != 0 ? limit_before_mw : gpu->power_limit_range(options.device).reset_mw());
      } else {
        gpu->reset_graphics_clock(options.device);
        gpu->reset_memory_clock(options.device);
      }
    } catch (const std::exception& e) {
      spdlog::warn("perseus: rank {}: could not reset clocks: {}", options.rank, e.what());
    }
    applied = -1;
  }

  void wait_drained() {
    std::unique_lock lock(mutex);
    drained.wait(lock, [&] { return processed == enqueued; });
  }

  // JSON from the server; 500 "[profiling-done]" becomes ProfilingDone, any other failure Error.
  json call(const std::string& method, const std::string& target, const json& body) {
    auto reply = http->request(method, target, body.is_null() ? "" : body.dump(), options.request_timeout);
    json parsed;
    try {
      parsed = json::parse(reply.body);
    } catch (const json::parse_error&) {
      throw Error(
          fmt::format("{} {}: the server answered {} with a body that is not JSON", method, target, reply.status));
    }
    if (reply.status == 503)  // the server is stopping: it may be back soon
      throw ServerUnreachable(fmt::format("{} {}: HTTP 503: {}", method, target, reply.body));
    // A schedule request this client gave up on, reaching a server that was paused, superseded the
    // one it asked again with: ask again.
    if (reply.status == 409 && method == "GET")
      throw ServerTimeout(fmt::format("{} {}: HTTP 409: {}", method, target, reply.body));
    if (reply.status != 200) {
      std::string detail = parsed.is_object() && parsed.contains("detail") && parsed["detail"].is_string()
                               ? parsed["detail"].get<std::string>()
                               : reply.body;
      if (protocol::says_done(detail)) throw ProfilingDone(detail);
      throw Error(fmt::format("{} {}: HTTP {}: {}", method, target, reply.status, detail));
    }
    return parsed;
  }

  // Exchange thread only: the next round's schedule (the server's barrier: it answers once every
  // rank asked), with a deadline like every request.
  Received fetch_schedule() {
    json reply = call("GET", fmt::format("/schedule/{}?rank={}", encode_path_segment(job_id), options.rank), nullptr);
    auto schedule = protocol::schedule_from_json(reply);
    if (schedule.power_states.size() != options.pipe_schedule.size())
      throw Error(fmt::format("the server sent {} power states for {} instructions", schedule.power_states.size(),
                              options.pipe_schedule.size()));
    return {std::move(schedule.power_states), schedule.power_limit_w};
  }

  // A schedule that arrived takes effect: its clocks from the next instruction, its power limit now.
  void take(Received received) {
    schedule = std::move(received.states);
    push_power_limit(received.power_limit_w);
  }

  void push_power_limit(std::optional<double> watts) {
    const int mw = watts ? static_cast<int>(protocol::to_milliwatts(std::clamp(*watts, 1.0, 2e6)).value) : -1;
    push({Event::power_limit, mw, {}, now()});
  }

  // A round's result for the exchange thread, which then asks for the next schedule. A result still
  // waiting to go out (the server is away) is kept: it answers the schedule the server runs.
  void hand_over(protocol::ProfilingResult data) {
    {
      std::lock_guard lock(exchange_mutex);
      if (!outbox) outbox = std::move(data);
      want_schedule = true;
    }
    exchange_wake.notify_all();
  }

  bool exchange_settled_now() const {  // exchange_mutex held
    bool work = outbox || want_schedule;
    return !exchange_busy && (!work || exchange_stop || done_detail || failure || SteadyClock::now() < next_attempt);
  }

  void run_exchange() {
    std::unique_lock lock(exchange_mutex);
    for (;;) {
      exchange_settled.notify_all();
      exchange_wake.wait(lock,
                         [&] { return exchange_stop || ((outbox || want_schedule) && !done_detail && !failure); });
      if (exchange_stop) break;
      if (SteadyClock::now() < next_attempt) {  // backing off: the server is away
        exchange_wake.wait_until(lock, next_attempt, [&] { return exchange_stop; });
        continue;
      }
      exchange_busy = true;
      std::optional<protocol::ProfilingResult> result = outbox;
      lock.unlock();
      std::optional<Received> schedule;
      try {
        if (!connected.load(std::memory_order_acquire)) {
          connect_rest();
          lock.lock();
          outage_since.reset();
          lock.unlock();
        }
        if (result) call("POST", fmt::format("/result/{}", encode_path_segment(job_id)), protocol::to_json(*result));
        lock.lock();
        outbox.reset();
        lock.unlock();
        schedule = fetch_schedule();
        lock.lock();
        if (outage_since) {
          spdlog::info("perseus: rank {}: the server is back after {:.1f} s", options.rank,
                       std::chrono::duration<double>(SteadyClock::now() - *outage_since).count());
          outage_since.reset();
        }
        inbox = std::move(schedule);
        ++received_seq;
        want_schedule = false;
      } catch (const ProfilingDone& e) {
        if (!lock.owns_lock()) lock.lock();
        done_detail = e.what();
        exchange_news = true;
      } catch (const ServerUnreachable& e) {
        if (!lock.owns_lock()) lock.lock();
        server_unreachable(e);
      } catch (const std::exception& e) {
        if (!lock.owns_lock()) lock.lock();
        failure = e.what();
        exchange_news = true;
      }
      exchange_busy = false;
    }
    exchange_settled.notify_all();
  }

  // exchange_mutex held. The server could not be reached or did not answer in time: training goes
  // on at the current schedule and the exchange tries again, backing off, until retry_for passed.
  void server_unreachable(const std::exception& e) {
    auto now = SteadyClock::now();
    if (!outage_since) {
      outage_since = now;
      retry_delay = std::chrono::milliseconds(500);
      if (options.retry_for.count() > 0)
        spdlog::warn(
            "perseus: rank {}: the server is unreachable ({}); training continues at the current clocks, "
            "retrying for up to {} s",
            options.rank, e.what(), std::chrono::duration_cast<std::chrono::seconds>(options.retry_for).count());
    }
    if (now - *outage_since >= options.retry_for) {
      failure = fmt::format("the server was unreachable for {} s: {}",
                            std::chrono::duration_cast<std::chrono::seconds>(options.retry_for).count(), e.what());
      failure_unreachable = true;
      exchange_news = true;
      return;
    }
    if (dynamic_cast<const ServerTimeout*>(&e) != nullptr) return;  // it waited its deadline already: ask again now
    // Jittered, so that a job's ranks do not all knock at once on a server coming back.
    auto jitter = std::uniform_real_distribution<double>(0.5, 1.0)(random);
    next_attempt = now + std::chrono::duration_cast<SteadyClock::duration>(retry_delay * jitter);
    retry_delay = std::min(retry_delay * 2, std::chrono::milliseconds(10000));
  }

  void start_exchange() {
    {
      std::lock_guard lock(exchange_mutex);
      want_schedule = true;
    }
    exchange = std::thread([this] { run_exchange(); });
  }

  // Waits up to `timeout` for the exchange to settle; true when it did.
  bool wait_exchange(std::chrono::milliseconds timeout) {
    std::unique_lock lock(exchange_mutex);
    return exchange_settled.wait_for(lock, timeout, [&] { return exchange_settled_now(); });
  }

  // Gives a result still going out a moment (`grace`) to reach the server, then ends the exchange,
  // cutting short a request in progress (a schedule request may wait at the barrier).
  void stop_exchange(std::chrono::milliseconds grace) {
    if (!exchange.joinable()) return;
    {
      std::unique_lock lock(exchange_mutex);
      exchange_settled.wait_for(lock, grace, [&] { return !outbox || exchange_settled_now(); });
      exchange_stop = true;
    }
    exchange_wake.notify_all();
    http->cancel();
    exchange.join();
  }

  // Connecting: what the server says of itself (GET /info: the mode), the GPU's power states for
  // that mode, the job (rank 0 registers it, or any rank holding the secret rank 0 shared when rank
  // 0 could not reach the server), then this rank. The constructor runs these steps while the
  // server answers; the ones left when it does not run on the exchange thread (connect_rest).
  void learn_server() {
    json info = call("GET", "/info", nullptr);
    mode = protocol::parse_power_mode(info.value("mode", std::string("frequency")))
               .value_or(protocol::PowerMode::frequency);
    server_known = true;
  }

  void prepare_gpu() {
    const auto& o = options;
    gpu = o.gpu ? o.gpu : std::shared_ptr<gpu::GpuLibrary>(gpud::open_gpu_library(o.gpud_socket, o.nvml_library));
    options.device = gpu::nvml_index(*gpu, o.device, o.cuda_visible_devices);  // from here on NVML's index
    states.clear();
    if (mode == protocol::PowerMode::power_limit) {
      limit_before_mw = gpu->power_limit_mw(o.device);
      auto range = gpu->power_limit_range(o.device);
      const auto top = protocol::watts_at_most({range.max_mw}), bottom = protocol::watts_at_least({range.min_mw});
      for (unsigned w = top.value; w >= bottom.value && w > 0; w -= std::min(w, 25u))
        states.push_back(static_cast<int>(w));
    } else {
      auto memory = gpu->supported_memory_clocks(o.device);
      if (memory.empty()) throw Error(fmt::format("GPU {} lists no memory clocks", o.device));
      unsigned top_memory = *std::max_element(memory.begin(), memory.end());
      for (unsigned c : gpu->supported_graphics_clocks(o.device, top_memory)) states.push_back(static_cast<int>(c));
      register_clock_reset(gpu.get(), o.device);
      registered_reset = true;
      gpu->lock_memory_clock(o.device, top_memory, top_memory);
    }
    gpu_ready = true;
  }

  // Registers the job with job_secret (made here, or shared by rank 0): every rank holding it gets
  // the one job, whichever registers first.
  void register_job() {
    const auto& o = options;
    protocol::JobInfo job{"",          o.pp_degree,  o.dp_degree,        o.tp_degree,       o.world_size,
                          o.framework, o.model_name, o.partition_method, o.microbatch_size, o.num_microbatches};
    job.weight = o.weight;
    std::string id = call("POST", "/register_job", protocol::to_json(job)).get<std::string>();
    std::string secret = http->received_job_secret();  // "" from a server that keeps no secrets
    if (secret != job_secret) use_job_secret(std::move(secret));
    job_id = std::move(id);
  }

  void register_rank() {
    const auto& o = options;
    protocol::RankInfo rank{job_id, o.rank, o.dp_rank, o.pp_rank, o.tp_rank, options.pipe_schedule, states};
    try {  // the bound on what this rank may measure (physical_bounds.hpp), and what a power budget may ask
      const auto range = gpu->power_limit_range(o.device);
      rank.max_power_w = protocol::to_watts({range.max_mw});
      if (range.min_mw > 0) rank.min_power_w = protocol::to_watts({range.min_mw});
    } catch (const std::exception&) {}
    call("POST", "/register_rank", protocol::to_json(rank));
    start_heartbeat();
    connected.store(true, std::memory_order_release);
  }

  // Exchange thread: the steps the constructor could not take because the server did not answer.
  void connect_rest() {
    if (!server_known) learn_server();
    if (!gpu_ready) prepare_gpu();
    if (job_id.empty()) register_job();
    register_rank();
    spdlog::info(
        "perseus: rank {}: registered with the server {:.1f} s after it started (job {}); perseus takes "
        "part from the next iteration",
        options.rank, std::chrono::duration<double>(SteadyClock::now() - created).count(), job_id);
  }

  void start() {
    const auto& o = options;
    if (o.pipe_schedule.empty())
      options.pipe_schedule = default_pipe_schedule(o.pp_rank, o.pp_degree, o.num_microbatches);
    if (options.token.empty())
      if (const char* env = std::getenv("PERSEUS_TOKEN")) options.token = env;
    for (const auto& name : options.pipe_schedule)
      if (std::find(known_names.begin(), known_names.end(), name) == known_names.end()) known_names.push_back(name);
    http = std::make_unique<HttpClient>(o.server_url, options.token);
    // A server that does not answer yet (started after training, restarting) is no reason to give
    // up: the steps left are taken in the background, for retry_for, while training runs.
    std::optional<std::string> unreachable;
    auto step = [&](auto&& action) {
      if (unreachable) return;
      try {
        action();
      } catch (const ServerUnreachable& e) {
        if (options.retry_for.count() <= 0) throw;
        unreachable = e.what();
      }
    };
    step([&] { learn_server(); });
    if (server_known) prepare_gpu();  // its power states depend on the server's mode

    if (!o.job_id.empty()) {
      job_id = o.job_id;
      use_job_secret(o.job_secret.empty() && std::getenv("PERSEUS_JOB_SECRET") ? std::getenv("PERSEUS_JOB_SECRET")
                                                                               : o.job_secret);
    } else if (o.rank == 0) {
      use_job_secret(protocol::new_job_secret());
      step([&] { register_job(); });
      joined_broadcast = true;  // the id is "" while the job is not registered: the others register it too
      if (o.broadcast_job_id) o.broadcast_job_id(job_secret.empty() ? job_id : job_id + '\n' + job_secret);
    } else {
      if (!o.broadcast_job_id) throw Error("ranks other than 0 need broadcast_job_id (or job_id) to learn the job id");
      joined_broadcast = true;
      receive_job_id(o.broadcast_job_id(""));
      if (job_id.empty() && job_secret.empty())
        throw Error("rank 0 could not start perseus, so there is no job to join");
    }
    step([&] {
      if (job_id.empty()) register_job();
      register_rank();
    });
    if (!o.inline_controller && !unreachable) controller = std::thread([this] { run_controller(); });
    if (unreachable) {
      outage_since = SteadyClock::now();  // retry_for counts from here
      spdlog::warn(
          "perseus: rank {}: the server does not answer yet ({}); training starts at default clocks and this "
          "rank registers in the background, retrying for up to {} s",
          o.rank, *unreachable, std::chrono::duration_cast<std::chrono::seconds>(options.retry_for).count());
      start_exchange();
      return;
    }
    activate();
    start_exchange();
    // Training has not started: the first schedule is worth a wait, a bounded one. Without it the
    // rank starts at default clocks and takes the schedule at a round boundary once it arrives.
    std::unique_lock lock(exchange_mutex);
    exchange_settled.wait_for(lock, options.request_timeout, [&] { return exchange_settled_now(); });
    if (done_detail) throw ProfilingDone(*done_detail);
    if (failure) throw Error(*failure);
    if (inbox) {
      take(std::move(*inbox));
      inbox.reset();
      applied_seq = received_seq;
    } else {
      spdlog::warn("perseus: rank {}: no schedule from the server yet; training starts at default clocks", o.rank);
    }
  }

  // Training thread, at an iteration's start: once registered, the hooks take part (measure, apply
  // schedules); before that they do nothing. What the accessors show is copied here, so that they
  // never read what the exchange thread is writing.
  bool activate() {
    if (active) return true;
    if (!connected.load(std::memory_order_acquire)) return false;
    if (!options.inline_controller && !controller.joinable()) controller = std::thread([this] { run_controller(); });
    shown_job_id = job_id;
    shown_job_secret = job_secret;
    shown_mode = mode;
    active = true;
    return true;
  }

  void use_job_secret(std::string secret) {
    job_secret = std::move(secret);
    if (http) http->set_job_secret(job_secret);
  }

  // What rank 0 broadcast: the job id, then its secret after a newline when it has one.
  void receive_job_id(const std::string& shared) {
    auto newline = shared.find('\n');
    job_id = shared.substr(0, newline);
    use_job_secret(newline == std::string::npos ? "" : shared.substr(newline + 1));
  }

  // A rank that fails before the job-id broadcast still takes part in it, or every other rank
  // would wait in it forever: rank 0 sends "" (no job), the others receive and drop what comes.
  void join_broadcast_after_failure() {
    const auto& o = options;
    if (joined_broadcast || !o.job_id.empty() || !o.broadcast_job_id) return;
    joined_broadcast = true;
    try {
      std::string id = o.broadcast_job_id("");
      if (o.rank != 0 && job_id.empty()) receive_job_id(id);  // so that this rank can tell the job it is out
    } catch (const std::exception& e) {
      spdlog::warn("perseus: rank {}: the job-id broadcast failed: {}", o.rank, e.what());
    }
  }

  // The rank ran something other than its registered schedule; `what` says where.
  void schedule_mismatch(const std::string& what) {
    const auto& names = options.pipe_schedule;
    std::size_t shown = std::min<std::size_t>(names.size(), 16);
    std::string message = fmt::format(
        "rank {}: iteration {} does not follow the registered pipe_schedule: {} (registered: {}{}). Its clocks would "
        "land on the wrong instructions; pass the order your framework runs as pipe_schedule (see "
        "default_pipe_schedule)",
        options.rank, round * options.report_every + iterations + 1, what,
        fmt::join(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(shown), ","),
        shown < names.size() ? ",..." : "");
    mismatched = true;
    if (options.strict_schedule) {
      enabled = false;
      stop_controller();
      throw ScheduleMismatch(message);
    }
    spdlog::warn(
        "perseus: {}. This rank stays at default clocks and keeps taking part in every round "
        "(strict_schedule makes this an error)",
        message);
    push({Event::reset, -1, {}, now()});
  }

  void start_heartbeat() {
    if (options.heartbeat_interval.count() <= 0) return;
    // An inline controller runs on the training thread: nothing else may hand it events.
    const bool from_heartbeat = options.power_limit_from_heartbeat && !options.inline_controller;
    Heartbeat::OnReply on_reply;
    if (from_heartbeat) on_reply = [this](const std::string& body) { heartbeat_power_limit(body); };
    heartbeat.emplace(HeartbeatOptions{options.server_url, options.token, job_secret, job_id, options.rank,
                                       options.heartbeat_interval, options.request_timeout},
                      progress, std::move(on_reply));
  }

  // A heartbeat's answer: the power budget's limit for this rank now ({"power_limit": W}), or none
  // (null). Acted on at once: the budget may have to hold sooner than the round ends.
  void heartbeat_power_limit(const std::string& body) {
    try {
      json reply = json::parse(body);
      if (reply.is_object() && reply.contains("power_limit") && reply["power_limit"].is_number())
        push_power_limit(reply["power_limit"].get<double>());
      else if (reply.is_null()) push_power_limit(std::nullopt);
    } catch (const json::exception&) {}  // an answer this client does not know: nothing to do
  }

  void stop_heartbeat() { heartbeat.reset(); }

  // Iterations in this round: a round after the first begins with a switch-over iteration (see
  // ClientOptions::switch_over_iteration).
  int round_length() const { return options.report_every + (switch_over() ? 1 : 0); }
  bool switch_over() const { return options.switch_over_iteration && round > 0; }

  // A schedule that arrived takes effect at the next iteration that begins; the round runs the one
  // in effect at its first measured iteration (the first, or the second after a switch-over).
  void begin_iteration() {
    if (iterations > 1) return;
    {
      std::lock_guard lock(exchange_mutex);
      if (inbox) {
        take(std::move(*inbox));
        inbox.reset();
        applied_seq = received_seq;
      }
    }
    if (iterations == (switch_over() ? 1 : 0)) {
      round_seq = applied_seq;
      if (iterations == 1) push({Event::restart, -1, {}, now()});  // the switch-over is not measured
    }
  }

  // At a round boundary the round's result goes to the exchange thread when the server waits for
  // one, marked stale when the round did not run the schedule it answers; otherwise it is dropped.
  void end_round() {
    const bool had_switch_over = switch_over();
    iterations = 0;
    ++round;
    std::uint64_t received;
    {
      std::lock_guard lock(exchange_mutex);
      received = received_seq;
    }
    bool stale = round_seq != received;
    // Nobody to report to (the schedule asked for has not come), or, in a round without a
    // switch-over, a schedule that came too late: the next round runs it.
    if (received <= reported_seq || (stale && !had_switch_over)) {
      push({Event::restart, -1, {}, now()});
      return;
    }
    reported_seq = received;
    push({Event::report, stale ? 1 : 0, {}, now()});
  }

  void disable(const std::string& why, bool tell_server = true) {
    spdlog::warn("perseus: rank {}: disabled, training continues at default clocks: {}", options.rank, why);
    enabled = false;
    stop_controller();
    if (tell_server) leave(why);
  }

  // Tells the server this rank is out, so that the others are not held at the barrier waiting for
  // it (the job ends and every rank goes on without perseus). Best effort, briefly.
  void leave(const std::string& why, bool finished = false) {
    if (job_id.empty() || options.server_url.empty()) return;
    try {
      HttpClient once(options.server_url, options.token);
      once.set_job_secret(job_secret);
      json body = {{"rank", options.rank}, {"reason", why.substr(0, 500)}, {"finished", finished}};
      once.request("POST", fmt::format("/leave/{}", encode_path_segment(job_id)), body.dump(),
                   std::min(options.request_timeout, std::chrono::milliseconds(5000)));
    } catch (const std::exception& e) {
      spdlog::debug("perseus: rank {}: could not tell the server it left: {}", options.rank, e.what());
    }
  }

  void stop_controller() {
    // Not registered yet: the exchange thread may be connecting (and preparing the GPU): it ends
    // first, so that what it set up is seen and undone here.
    if (!active) stop_exchange(std::chrono::milliseconds(0));
    stop_heartbeat();  // a rank without perseus is not part of the job any more
    if (controller.joinable()) {
      {
        std::lock_guard lock(mutex);
        stopping = true;
      }
      wake.notify_one();
      controller.join();
    } else if (gpu && registered_reset) {
      reset_clocks();
    }
    if (registered_reset) unregister_clock_reset(gpu.get(), options.device);
    registered_reset = false;
    // After the controller: it hands the last round's result over on its way out.
    stop_exchange(std::min(options.request_timeout, std::chrono::milliseconds(2000)));
  }
};

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  try {
    impl_->start();
    impl_->enabled = true;
  } catch (const ProfilingDone&) {
    impl_->stop_controller();
    throw;
  } catch (const std::exception& e) {
    impl_->join_broadcast_after_failure();
    if (!impl_->options.fail_open) {
      impl_->stop_controller();
      impl_->leave(e.what());
      throw;
    }
    impl_->disable(e.what());
  }
}

Client::~Client() { impl_->stop_controller(); }

void Client::on_step_begin() {
  if (!impl_->enabled || !impl_->activate()) return;
  impl_->progress.fetch_add(1, std::memory_order_relaxed);
  impl_->cursor = 0;
  impl_->begin_iteration();
  impl_->push({Event::step_begin, -1, {}, impl_->now()});
}

void Client::on_instruction_begin(std::string_view name) {
  if (!impl_->enabled || !impl_->active) return;
  auto& im = *impl_;
  im.progress.fetch_add(1, std::memory_order_relaxed);
  const auto& names = im.options.pipe_schedule;
  int state = -1;
  if (im.cursor < names.size() && names[im.cursor] == name) {
    if (!im.mismatched && im.cursor < im.schedule.size()) state = im.schedule[im.cursor];
    ++im.cursor;
  } else if (!im.mismatched && std::find(im.known_names.begin(), im.known_names.end(), name) != im.known_names.end()) {
    im.schedule_mismatch(
        im.cursor < names.size()
            ? fmt::format("instruction {} is '{}' where '{}' was registered", im.cursor + 1, name, names[im.cursor])
            : fmt::format("instruction {} is '{}', past the {} registered", im.cursor + 1, name, names.size()));
  }
  im.push({Event::begin, state, std::string(name), im.now()});
}

void Client::on_instruction_end(std::string_view name) {
  if (!impl_->enabled || !impl_->active) return;
  impl_->push({Event::end, -1, std::string(name), impl_->now()});
}

void Client::on_step_end() {
  if (!impl_->enabled) return;
  auto& im = *impl_;
  if (im.active) {  // before the client registered, the iteration was not measured
    if (im.cursor != im.options.pipe_schedule.size() && !im.mismatched)
      im.schedule_mismatch(
          fmt::format("it ran {} of the {} registered instructions", im.cursor, im.options.pipe_schedule.size()));
    im.push({Event::step_end, -1, {}, im.now()});
    if (++im.iterations >= im.round_length()) im.end_round();
  }
  if (!im.exchange_news.load()) return;
  std::optional<std::string> done, failure;
  bool unreachable = false;
  {
    std::lock_guard lock(im.exchange_mutex);
    done = im.done_detail, failure = im.failure;
    unreachable = im.failure_unreachable;
  }
  if (done) {
    spdlog::info("perseus: rank {}: the server says training is done: {}", im.options.rank, *done);
    im.enabled = false;
    im.stop_controller();
    if (im.options.stop_on_done) throw ProfilingDone(*done);
    return;
  }
  if (!im.options.fail_open) {
    im.enabled = false;
    im.stop_controller();
    if (!unreachable) im.leave(*failure);
    throw Error(*failure);
  }
  im.disable(*failure, !unreachable);  // an unreachable server: nobody to tell
}

bool Client::wait_for_server(std::chrono::milliseconds timeout) {
  if (!impl_->enabled) return true;
  flush();
  return impl_->wait_exchange(timeout);
}

bool Client::enabled() const { return impl_->enabled; }
const std::string& Client::job_id() const { return impl_->shown_job_id; }
const std::string& Client::job_secret() const { return impl_->shown_job_secret; }
int Client::round() const { return impl_->round; }
std::vector<int> Client::schedule() const { return impl_->schedule; }
const std::vector<std::string>& Client::pipe_schedule() const { return impl_->options.pipe_schedule; }
std::string Client::mode() const { return std::string(protocol::to_string(impl_->shown_mode)); }

void Client::close(bool finished) {
  const bool was_enabled = impl_->enabled;
  impl_->enabled = false;
  impl_->stop_controller();
  if (was_enabled)  // finished: once every rank did, the job is done
    impl_->leave(finished ? "training finished" : "training stopped with an error", finished);
}

void Client::flush() {
  if (!impl_->enabled || !impl_->active) return;
  impl_->push({Event::flush, -1, {}, impl_->now()});
  impl_->wait_drained();
}

}  // namespace perseus::client
