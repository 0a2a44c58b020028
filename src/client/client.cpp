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
#include <thread>
#include <variant>

#include "clock_reset.hpp"
#include "exchange.hpp"
#include "heartbeat.hpp"
#include "iteration_meter.hpp"
#include "perseus/pipeline/schedule.hpp"
#include "perseus/protocol/models.hpp"
#include "perseus/protocol/power_mode.hpp"
#include "perseus/protocol/power_state.hpp"
#include "registration.hpp"
#include "server_connection.hpp"

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

// The bearer token: the options', else $PERSEUS_TOKEN.
ClientOptions with_token(ClientOptions options) {
  if (options.token.empty())
    if (const char* env = std::getenv("PERSEUS_TOKEN")) options.token = env;
  return options;
}

}  // namespace

struct Client::Impl {
  explicit Impl(ClientOptions o) : options(with_token(std::move(o))) {}

  ClientOptions options;
  // The units that talk to the server (each header says which thread owns what): the connection
  // they share, the registration (which runs on_registered once the server accepted this rank) and
  // the exchange of results and schedules.
  ServerConnection connection{
      Endpoint{options.server_url, options.token, options.request_timeout, options.rank, {}, {}}};
  Registration registration{options, connection, [this] { on_registered(); }};
  Exchange exchange{options, connection};
  bool enabled = false;
  // Set by whichever thread registers (the constructor's, else the exchange thread) once the
  // registration is complete; the training thread reads the registration only after it saw it.
  std::atomic<bool> connected{false};
  // Training thread: the hooks take part (the client is registered and activate() ran).
  bool active = false;
  std::string shown_job_id, shown_job_secret;
  protocol::PowerMode shown_mode = protocol::PowerMode::frequency;

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

  // The registration's GPU: read once it is registered (the controller runs only from then on).
  gpu::GpuLibrary& gpu() const { return *registration.gpu(); }
  unsigned device() const { return registration.device(); }
  protocol::PowerMode mode() const { return registration.mode(); }

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

  double energy_j() { return static_cast<double>(gpu().total_energy_mj(device())) / 1000.0; }

  void apply(int state) {
    if (state < 0 || state == applied || clock_reset_started()) return;
    try {
      const auto power_state = protocol::power_state(mode(), static_cast<unsigned>(state));
      if (const auto* limit = std::get_if<protocol::Watts>(&power_state)) {
        gpu().set_power_limit_mw(device(), capped(protocol::to_milliwatts(*limit).value));
      } else {
        const auto clock = std::get<protocol::Megahertz>(power_state);
        gpu().lock_graphics_clock(device(), clock.value, clock.value);
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
    return std::max(std::min(limit_mw, cap_mw), gpu().power_limit_range(device()).min_mw);
  }

  // The power budget's backstop: the GPU's power limit while the server asks for one (`mw` < 0:
  // none), within what the GPU supports and never above the limit it had (an administrator's cap
  // stays). Lifting it restores that limit.
  void set_power_cap(int mw) {
    if (clock_reset_started() || (mw < 0 && cap_mw == 0)) return;
    const bool power_states = mode() == protocol::PowerMode::power_limit;
    try {
      if (mw < 0) {
        gpu().set_power_limit_mw(device(), power_states && applied >= 0 ? applied_limit_mw() : before_cap_mw);
        cap_mw = 0;
        forget_power_limit(&gpu(), device());
        return;
      }
      if (cap_mw == 0) {
        before_cap_mw = power_states && registration.limit_before_mw() != 0 ? registration.limit_before_mw()
                                                                            : gpu().power_limit_mw(device());
        remember_power_limit(&gpu(), device(), before_cap_mw);
      }
      const auto range = gpu().power_limit_range(device());
      const unsigned ceiling = std::max(range.min_mw, std::min(range.max_mw, before_cap_mw));
      const unsigned wanted = std::clamp(static_cast<unsigned>(mw), range.min_mw, ceiling);
      if (wanted == cap_mw && !power_states) return;  // in force already: no driver call every round
      cap_mw = wanted;
      gpu().set_power_limit_mw(device(), power_states && applied >= 0 ? capped(applied_limit_mw()) : cap_mw);
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
              if (gpu().current_graphics_clock(device()) != static_cast<unsigned>(*to_check)) ++round_late;
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
          exchange.hand_over(std::move(data));
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
    if (cap_mw != 0 && mode() != protocol::PowerMode::power_limit) set_power_cap(-1);  // the limit it had
    if (cap_mw != 0) forget_power_limit(&gpu(), device());  // power-limit mode restores its own below
    cap_mw = 0;
    try {
      if (mode() == protocol::PowerMode::power_limit) {  // back to the limit the GPU had before (an admin's cap stays)
        gpu().set_power_limit_mw(device(), registration.limit_before_mw() != 0
                                               ? registration.limit_before_mw()
                                               : gpu().power_limit_range(device()).reset_mw());
      } else {
        gpu().reset_graphics_clock(device());
        gpu().reset_memory_clock(device());
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

  // A schedule that arrived takes effect: its clocks from the next instruction, its power limit now.
  void take(Exchange::Arrived arrived) {
    schedule = std::move(arrived.schedule.states);
    applied_seq = arrived.seq;
    push_power_limit(arrived.schedule.power_limit_w);
  }

  void push_power_limit(std::optional<double> watts) {
    const int mw = watts ? static_cast<int>(protocol::to_milliwatts(std::clamp(*watts, 1.0, 2e6)).value) : -1;
    push({Event::power_limit, mw, {}, now()});
  }

  // The registering thread, once the server accepted this rank.
  void on_registered() {
    start_heartbeat();
    connected.store(true, std::memory_order_release);
  }

  void start() {
    const auto& o = options;
    if (o.pipe_schedule.empty())
      options.pipe_schedule = default_pipe_schedule(o.pp_rank, o.pp_degree, o.num_microbatches);
    for (const auto& name : options.pipe_schedule)
      if (std::find(known_names.begin(), known_names.end(), name) == known_names.end()) known_names.push_back(name);
    const auto unreachable = registration.begin();
    if (!o.inline_controller && !unreachable) controller = std::thread([this] { run_controller(); });
    if (unreachable) {
      spdlog::warn(
          "perseus: rank {}: the server does not answer yet ({}); training starts at default clocks and this "
          "rank registers in the background, retrying for up to {} s",
          o.rank, *unreachable, std::chrono::duration_cast<std::chrono::seconds>(options.retry_for).count());
      exchange.start([this] { registration.complete(); });
      return;
    }
    activate();
    exchange.start({});
    // Training has not started: the first schedule is worth a wait, a bounded one. Without it the
    // rank starts at default clocks and takes the schedule at a round boundary once it arrives.
    auto [outcome, first] = exchange.wait_first_schedule(options.request_timeout);
    if (outcome.done) throw ProfilingDone(*outcome.done);
    if (outcome.failure) throw Error(*outcome.failure);
    if (first) take(std::move(*first));
    else spdlog::warn("perseus: rank {}: no schedule from the server yet; training starts at default clocks", o.rank);
  }

  // Training thread, at an iteration's start: once registered, the hooks take part (measure, apply
  // schedules); before that they do nothing. What the accessors show is copied here, so that they
  // never read what the exchange thread is writing.
  bool activate() {
    if (active) return true;
    if (!connected.load(std::memory_order_acquire)) return false;
    if (!options.inline_controller && !controller.joinable()) controller = std::thread([this] { run_controller(); });
    shown_job_id = connection.job_id();
    shown_job_secret = connection.job_secret();
    shown_mode = registration.mode();
    active = true;
    return true;
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
    heartbeat.emplace(HeartbeatOptions{connection.endpoint(), options.heartbeat_interval}, progress,
                      std::move(on_reply));
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
    if (auto arrived = exchange.take_schedule()) take(std::move(*arrived));
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
    const std::uint64_t received = exchange.received();
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
    if (tell_server) registration.leave(why);
  }

  void stop_controller() {
    // Not registered yet: the exchange thread may be connecting (and preparing the GPU): it ends
    // first, so that what it set up is seen and undone here.
    if (!active) exchange.stop(std::chrono::milliseconds(0));
    stop_heartbeat();  // a rank without perseus is not part of the job any more
    if (controller.joinable()) {
      {
        std::lock_guard lock(mutex);
        stopping = true;
      }
      wake.notify_one();
      controller.join();
    } else if (registration.clock_reset_registered()) {
      reset_clocks();
    }
    registration.release_clock_reset();
    // After the controller: it hands the last round's result over on its way out.
    exchange.stop(std::min(options.request_timeout, std::chrono::milliseconds(2000)));
  }
};

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  try {
    impl_->start();
    impl_->enabled = true;
  } catch (const ProfilingDone&) {
    impl_->stop_controller();
    throw;
  } catch (const std::exception& e) {
    impl_->registration.join_broadcast_after_failure();
    if (!impl_->options.fail_open) {
      impl_->stop_controller();
      impl_->registration.leave(e.what());
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
  if (!im.exchange.has_news()) return;
  const auto [done, failure, unreachable] = im.exchange.outcome();
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
    if (!unreachable) im.registration.leave(*failure);
    throw Error(*failure);
  }
  im.disable(*failure, !unreachable);  // an unreachable server: nobody to tell
}

bool Client::wait_for_server(std::chrono::milliseconds timeout) {
  if (!impl_->enabled) return true;
  flush();
  return impl_->exchange.wait_settled(timeout);
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
    impl_->registration.leave(finished ? "training finished" : "training stopped with an error", finished);
}

void Client::flush() {
  if (!impl_->enabled || !impl_->active) return;
  impl_->push({Event::flush, -1, {}, impl_->now()});
  impl_->wait_drained();
}

}  // namespace perseus::client
