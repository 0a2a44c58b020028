#include "perseus/simulate/cluster.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "perseus/client/client.hpp"
#include "perseus/emulate/cost_tables.hpp"
#include "perseus/pipeline/makespan.hpp"
#include "perseus/pipeline/schedule_profile.hpp"
#include "perseus/simulate/simulated_gpu.hpp"
#include "perseus/util/error.hpp"

namespace perseus::simulate {

namespace {

using SteadyClock = std::chrono::steady_clock;

template <typename T>
std::optional<T> parse_number(std::string_view text) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

using CostTable = CostTables::Table;

struct Rank {
  int rank = 0, dp = 0, pp = 0, tp = 0;
  std::shared_ptr<SimulatedGpu> gpu;
  std::unique_ptr<client::Client> client;
  std::vector<std::string> names;  // the pipe schedule
  double now = 0;                  // simulated seconds
  double last_end = 0;             // when its last instruction ended (energy is charged up to here)
  double iteration_energy_start = 0;
  double speed = 1;  // its GPU's time and energy factor (gpu_speed_spread)
};

class Cluster {
 public:
  friend void perseus::simulate::check_simulation_config(const SimulationConfig& config);
  explicit Cluster(const SimulationConfig& config) : config_(config), rng_(config.seed) {
    check_config(config_);
    orders_ = config_.stage_orders();                // what each rank runs and registers as its pipe schedule
    tables_ = CostTables(config_.profile, config_);  // per model stage, as the emulator reads them
    std::vector<unsigned> clocks;
    for (const auto& row : config_.profile.rows) clocks.push_back(static_cast<unsigned>(row.frequency));
    const gpu::PowerLimitRange limits = power_limit_range(config_);
    const int world = config_.pipelines * config_.num_stages * config_.tensor_parallel;
    ranks_.resize(static_cast<std::size_t>(world));
    std::mt19937_64 speeds(config_.seed ^ 0x5eed5bead5ULL);  // its own stream: the noise stays as it was
    for (int d = 0; d < config_.pipelines; ++d)
      for (int s = 0; s < config_.num_stages; ++s)
        for (int t = 0; t < config_.tensor_parallel; ++t) {
          Rank& r = rank_at(d, s, t);
          r.rank = index(d, s, t);
          r.dp = d, r.pp = s, r.tp = t;
          r.gpu =
              std::make_shared<SimulatedGpu>(fmt::format("simulated GPU ({})", config_.profile.source), clocks, limits);
          if (config_.power_limit > 0)
            r.gpu->set_power_limit_mw(0, static_cast<unsigned>(std::lround(config_.power_limit * 1000)));
          r.speed = speed_factor(speeds);
          if (config_.clock_latency > 0) r.gpu->set_clock_latency([rp = &r] { return rp->now; }, config_.clock_latency);
          for (const auto& inst : orders_[static_cast<std::size_t>(s)]) r.names.emplace_back(to_string(inst.kind));
        }
  }

  SimulationSummary run(const std::function<void(const WindowReport&)>& on_report) {
    SimulationSummary summary;
    summary.ranks = static_cast<int>(ranks_.size());
    start_clients(summary);
    began_ = SteadyClock::now();
    double t = 0;
    Window whole(config_.pipelines), window(config_.pipelines);
    whole.first = window.first = 1;
    summary.ended = fmt::format("ran {} iterations", config_.iterations);
    for (int k = 1; k <= config_.iterations; ++k) {
      if (config_.stop && config_.stop->load()) {
        summary.ended = fmt::format("interrupted after {} iterations", k - 1);
        break;
      }
      std::optional<std::string> done;
      IterationResult it = run_iteration(k, t, done);
      t += it.time;
      whole.add(it), window.add(it);
      summary.iterations = k;
      if (window.count == config_.report_every || k == config_.iterations || done) {
        auto report = window.report(k);
        summary.reports.push_back(report);
        if (on_report) on_report(report);
        window = Window(config_.pipelines);
        window.first = k + 1;
      }
      if (done) {
        summary.ended = fmt::format("the server ended the job after iteration {}: {}", k, *done);
        break;
      }
    }
    if (window.count > 0) {  // interrupted mid-window
      auto report = window.report(summary.iterations);
      summary.reports.push_back(report);
      if (on_report) on_report(report);
    }
    summary.training_seconds = std::chrono::duration<double>(SteadyClock::now() - began_).count();
    if (config_.gpu_speed_spread > 0) summary.gpu_speeds = gpu_speeds();
    // The last round's exchange ends before any rank leaves (a rank that finished while others
    // wait at the barrier would fail the job).
    wait_for_server(std::chrono::seconds(10));
    summary.whole = whole.report(summary.iterations);
    for (auto& r : ranks_) {
      if (r.client && !r.client->enabled()) ++summary.disabled_ranks;
      summary.clock_locks += r.gpu->lock_count();
      if (r.client) r.client->close();  // training is over: resets its GPU's clocks, tells the server
      r.client.reset();
    }
    return summary;
  }

 private:
  struct IterationResult {
    double time = 0, energy = 0;
    std::vector<double> compute_time, pipeline_energy;
    std::vector<bool> straggling;
  };

  struct Window {
    explicit Window(int pipelines)
        : compute(static_cast<std::size_t>(pipelines)),
          energy(static_cast<std::size_t>(pipelines)),
          straggling(static_cast<std::size_t>(pipelines)) {}
    int first = 1, count = 0;
    double time = 0, total_energy = 0;
    std::vector<double> compute, energy;
    std::vector<bool> straggling;
    void add(const IterationResult& it) {
      ++count;
      time += it.time, total_energy += it.energy;
      for (std::size_t d = 0; d < compute.size(); ++d) {
        compute[d] += it.compute_time[d], energy[d] += it.pipeline_energy[d];
        if (it.straggling[d]) straggling[d] = true;
      }
    }
    WindowReport report(int last) const {
      WindowReport out;
      out.first = first, out.last = last;
      double n = std::max(count, 1);
      out.iteration_time = time / n, out.energy = total_energy / n;
      for (std::size_t d = 0; d < compute.size(); ++d)
        out.pipelines.push_back({static_cast<int>(d), compute[d] / n, energy[d] / n, straggling[d]});
      return out;
    }
  };

  int index(int d, int s, int t) const { return (d * config_.num_stages + s) * config_.tensor_parallel + t; }

  // The power limits the simulated GPUs take (cluster.hpp): from max(P_block + 1, a quarter of the
  // profile's highest power) to that highest power, in whole watts.
  static gpu::PowerLimitRange power_limit_range(const SimulationConfig& c) {
    double highest = 0;
    for (const auto& row : c.profile.rows)
      if (row.time > 0) highest = std::max(highest, row.energy / row.time);
    const double top = std::max(1.0, std::ceil(highest));
    const double bottom = std::min(top, std::ceil(std::max(c.p2p_power + 1, top / 4)));
    return {static_cast<unsigned>(bottom) * 1000u, static_cast<unsigned>(top) * 1000u};
  }
  Rank& rank_at(int d, int s, int t) { return ranks_[static_cast<std::size_t>(index(d, s, t))]; }

  static void check_config(const SimulationConfig& c) {
    auto usage = [](const char* setting, const std::string& what) { throw SettingError(setting, what); };
    if (c.num_stages < 1) usage("num_stages", "num_stages must be at least 1");
    if (c.num_microbatches < 1) usage("num_microbatches", "num_microbatches must be at least 1");
    if (c.pipelines < 1) usage("pipelines", "pipelines must be at least 1");
    if (c.tensor_parallel < 1) usage("tensor_parallel", "tensor_parallel must be at least 1");
    if (static_cast<long long>(c.num_stages) * c.pipelines * c.tensor_parallel > 16384)
      throw SettingError({"num_stages", "pipelines", "tensor_parallel"},
                         "at most 16384 simulated ranks (num_stages x pipelines x tensor_parallel)");
    if (static_cast<long long>(c.num_microbatches) * 2 > 100000)
      usage("num_microbatches", "num_microbatches must be at most 50000");
    if (!(c.p2p_power >= 0) || !std::isfinite(c.p2p_power))
      usage("p2p_power", "p2p_power must be a non-negative number of watts");
    if (c.iterations < 1) usage("iterations", "iterations must be at least 1");
    if (!(c.clock_latency >= 0 && c.clock_latency <= 10))
      usage("clock_latency", "clock_latency must be between 0 and 10 s (10000 ms)");
    if (c.report_every < 1) usage("report_every", "report_every must be at least 1");
    if (c.round_iterations < 1) usage("round_iterations", "round_iterations must be at least 1");
    if (!(c.noise >= 0 && c.noise <= 1)) usage("noise", "noise must be between 0 and 1");
    if (!(c.gpu_speed_spread >= 0 && c.gpu_speed_spread <= 1))
      usage("gpu_speed_spread", "gpu_speed_spread must be between 0 and 1");
    if (!(c.time_scale >= 0 && c.time_scale <= 1000)) usage("time_scale", "time_scale must be between 0 and 1000");
    if (!(c.request_timeout_s >= 0.01 && c.request_timeout_s <= 3600))
      usage("request_timeout", "request_timeout must be between 0.01 and 3600 seconds");
    const auto limits = power_limit_range(c);
    if (c.power_limit != 0 && !(c.power_limit * 1000 >= limits.min_mw && c.power_limit * 1000 <= limits.max_mw))
      usage("power_limit",
            fmt::format("power_limit {} W: the simulated GPUs take {} to {} W (from the profile's powers)",
                        c.power_limit, limits.min_mw / 1000, limits.max_mw / 1000));
    if (c.max_clock < 0) usage("max_clock", "max_clock must be a clock in MHz (0: none)");
    if (!(c.weight > 0 && c.weight <= 1e6)) usage("weight", "weight must be between 0 (excluded) and 1e6");
    for (const auto& s : c.stragglers)
      if (s.pipeline != StragglerSpec::kEveryPipeline && s.pipeline >= c.pipelines)
        usage("straggler", fmt::format("straggler {}:...: there are only {} pipelines (0..{})", s.pipeline, c.pipelines,
                                       c.pipelines - 1));
    c.check();
    profile_for_schedule(by_model_stage(c.profile, c.num_stages), c.schedule, c.num_stages, c.num_model_stages());
  }

  // Every rank constructs its client at once, as training processes do: rank 0 registers the job
  // and hands the id to the others (the job-id broadcast), and the first schedule is a barrier.
  void start_clients(SimulationSummary& summary) {
    std::promise<std::string> id_promise;
    std::shared_future<std::string> id = id_promise.get_future().share();
    std::once_flag once;
    std::vector<std::thread> threads;
    for (auto& r : ranks_) {
      threads.emplace_back([&, rp = &r] {
        client::ClientOptions o;
        o.rank = rp->rank, o.dp_rank = rp->dp, o.pp_rank = rp->pp, o.tp_rank = rp->tp;
        o.dp_degree = config_.pipelines, o.pp_degree = config_.num_stages, o.tp_degree = config_.tensor_parallel;
        o.world_size = static_cast<int>(ranks_.size());
        o.server_url = config_.server_url;
        o.token = config_.token;
        o.framework = "perseus-simulate";
        o.model_name = config_.model_name;
        o.num_microbatches = config_.num_microbatches;
        o.pipe_schedule = rp->names;
        o.report_every = config_.round_iterations;
        o.gpu = rp->gpu;
        o.inline_controller = true;
        o.switch_over_iteration = config_.time_scale > 0;  // in simulated time it waits for the server instead
        o.clock = [rp] {
          return SteadyClock::time_point(
              std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(rp->now)));
        };
        o.heartbeat_interval = std::chrono::milliseconds(1000);
        o.weight = config_.weight;
        // Heartbeats run in wall time: in simulated time a power limit they carried would land at a
        // simulated moment nobody chose. Round boundaries carry it too.
        o.power_limit_from_heartbeat = config_.time_scale > 0;
        o.request_timeout = std::chrono::milliseconds(static_cast<long long>(config_.request_timeout_s * 1000));
        o.broadcast_job_id = [&](const std::string& value) {
          if (rp->rank == 0) {
            std::call_once(once, [&] { id_promise.set_value(value); });
            return value;
          }
          return id.get();
        };
        try {
          rp->client = std::make_unique<client::Client>(std::move(o));
        } catch (const std::exception& e) {  // fail_open is on: only ProfilingDone gets here
          spdlog::warn("simulated rank {}: {}", rp->rank, e.what());
        }
        if (rp->rank == 0) std::call_once(once, [&] { id_promise.set_value(""); });
      });
    }
    for (auto& t : threads) t.join();
    if (ranks_.front().client) summary.job_id = ranks_.front().client->job_id();
    if (!summary.job_id.empty() && config_.on_registered)
      config_.on_registered(summary.job_id, ranks_.front().client->job_secret());
  }

  std::vector<std::vector<std::vector<double>>> gpu_speeds() {
    std::vector<std::vector<std::vector<double>>> out(static_cast<std::size_t>(config_.pipelines));
    for (int d = 0; d < config_.pipelines; ++d) {
      auto& stages = out[static_cast<std::size_t>(d)];
      stages.resize(static_cast<std::size_t>(config_.num_stages));
      for (int s = 0; s < config_.num_stages; ++s)
        for (int t = 0; t < config_.tensor_parallel; ++t)
          stages[static_cast<std::size_t>(s)].push_back(rank_at(d, s, t).speed);
    }
    return out;
  }

  double speed_factor(std::mt19937_64& rng) const {
    if (config_.gpu_speed_spread <= 0) return 1;
    return std::lognormal_distribution<double>(0.0, config_.gpu_speed_spread)(rng);
  }

  double noise_factor() {
    if (config_.noise <= 0) return 1;
    return std::lognormal_distribution<double>(0.0, config_.noise)(rng_);
  }

  double straggler_factor(int pipeline, int iteration) const {
    double factor = 1;
    for (const auto& s : config_.stragglers)
      if (s.active(pipeline, iteration)) factor *= s.factor;
    return factor;
  }

  // The whole instruction's time and energy on `gpu` with `clock` in effect: at most the
  // administrator's clock, and under the GPU's power limit at the highest clock whose power fits
  // (cluster.hpp).
  TimeEnergy under_limits(const CostTable& table, const SimulatedGpu& gpu, unsigned clock) const {
    if (config_.max_clock > 0) clock = std::min(clock, static_cast<unsigned>(config_.max_clock));
    std::size_t i = table.at_or_below(static_cast<int>(clock));
    const double limit = gpu.power_limit_w();
    while (i + 1 < table.costs.size() && table.costs[i].energy > limit * table.costs[i].time) ++i;
    const double time = table.costs[i].time, energy = table.costs[i].energy;
    return {energy > limit * time ? energy / limit : time, energy};
  }

  // One instruction on `gpu` from `start`, `f` times its time and energy (under_limits): at the clock
  // in effect, and where a requested clock takes effect while it runs, the rest of its work at that
  // one. Returns its duration and energy.
  TimeEnergy run_on(SimulatedGpu& gpu, const CostTable& table, double start, double f) const {
    double now = start, left = 1, energy = 0;  // left: the share of its work still to do
    for (;;) {
      const auto [time, whole_energy] = under_limits(table, gpu, gpu.clock_at(now));
      const double full = time * f;  // the whole instruction at this clock
      const auto change = gpu.next_change_after(now);
      if (!change || full <= 0 || now + left * full <= *change) {
        energy += left * whole_energy * f;
        return {now + left * full - start, energy};
      }
      const double done = (*change - now) / full;
      energy += done * whole_energy * f;
      left -= done;
      now = *change;
    }
  }

  // One instruction on the tensor-parallel ranks of (pipeline, stage), starting at `start`; returns its end.
  double run_instruction(int d, int s, const Instruction& inst, double start, double slow) {
    const CostTable& table = tables_.of(model_stage(inst, config_.num_stages), inst.kind);
    const char* name = to_string(inst.kind).data();
    const int T = config_.tensor_parallel;
    durations_.assign(static_cast<std::size_t>(T), 0);
    energies_.assign(static_cast<std::size_t>(T), 0);
    double longest = 0;
    for (int t = 0; t < T; ++t) {
      Rank& r = rank_at(d, s, t);
      r.gpu->add_energy(config_.p2p_power * (start - r.last_end));
      r.now = start;
      if (r.client) r.client->on_instruction_begin(name);
      const double f = noise_factor() * slow * r.speed;
      const auto [duration, energy] = run_on(*r.gpu, table, start, f);
      durations_[static_cast<std::size_t>(t)] = duration;
      energies_[static_cast<std::size_t>(t)] = energy;
      longest = std::max(longest, duration);
    }
    double end = start + longest;
    for (int t = 0; t < T; ++t) {
      Rank& r = rank_at(d, s, t);
      auto ti = static_cast<std::size_t>(t);
      r.gpu->add_energy(energies_[ti] + config_.p2p_power * (longest - durations_[ti]));
      r.now = end;
      r.last_end = end;
      if (r.client) r.client->on_instruction_end(name);
    }
    return end;
  }

  double run_pipeline_iteration(int d, double t0, double slow) {
    return run_pipeline(orders_, config_.num_microbatches, t0, [&](int s, std::size_t slot, double start) {
      return run_instruction(d, s, orders_[static_cast<std::size_t>(s)][slot], start, slow);
    });
  }

  IterationResult run_iteration(int k, double t0, std::optional<std::string>& done) {
    IterationResult out;
    for (auto& r : ranks_) {
      r.now = t0;
      r.last_end = t0;
      r.iteration_energy_start = r.gpu->energy();
      if (r.client) r.client->on_step_begin();
    }
    double t1 = t0;
    for (int d = 0; d < config_.pipelines; ++d) {
      double slow = straggler_factor(d, k);
      double end = run_pipeline_iteration(d, t0, slow);
      out.compute_time.push_back(end - t0);
      out.straggling.push_back(slow != 1);
      t1 = std::max(t1, end);
    }
    out.time = t1 - t0;          // the gradient synchronisation: everybody waits for the slowest pipeline
    if (config_.time_scale > 0)  // keep pace with wall time
      std::this_thread::sleep_until(began_ + std::chrono::duration_cast<SteadyClock::duration>(
                                                 std::chrono::duration<double>(config_.time_scale * t1)));
    out.pipeline_energy.assign(static_cast<std::size_t>(config_.pipelines), 0);
    for (auto& r : ranks_) {
      r.gpu->add_energy(config_.p2p_power * (t1 - r.last_end));
      r.now = t1;
      r.last_end = t1;
      double e = r.gpu->energy() - r.iteration_energy_start;
      out.pipeline_energy[static_cast<std::size_t>(r.dp)] += e;
      out.energy += e;
    }
    step_end_all(k, done);
    return out;
  }

  // on_step_end on every rank (it never waits on the server). In simulated time the network takes
  // no time: at a round boundary the simulation waits for every rank's exchange with the server.
  void step_end_all(int k, std::optional<std::string>& done) {
    for (auto& r : ranks_) {
      if (!r.client) continue;
      try {
        r.client->on_step_end();
      } catch (const client::ProfilingDone& e) {
        if (!done) done = e.what();
      } catch (const std::exception& e) {
        spdlog::warn("simulated rank {}: {}", r.rank, e.what());
      }
    }
    if (config_.time_scale <= 0 && k % config_.round_iterations == 0) wait_for_server(std::chrono::seconds(60));
  }

  void wait_for_server(std::chrono::milliseconds timeout) {
    auto until = SteadyClock::now() + timeout;
    for (auto& r : ranks_) {
      if (!r.client) continue;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - SteadyClock::now());
      if (left.count() <= 0 || !r.client->wait_for_server(left)) break;
    }
  }

  const SimulationConfig& config_;
  SteadyClock::time_point began_;  // the first iteration's start in wall time
  std::mt19937_64 rng_;
  CostTables tables_;
  std::vector<Rank> ranks_;
  std::vector<std::vector<Instruction>> orders_;
  std::vector<double> durations_, energies_;
};

}  // namespace

StragglerSpec parse_straggler(std::string_view text) {
  auto fail = [&](const std::string& why) -> StragglerSpec {
    throw SettingError(
        "straggler",
        fmt::format(
            "straggler '{}': {} (expected PIPELINE:FACTOR[@ITERATION[-UNTIL]], e.g. 1:1.2@100 or all:1.1@500-650)",
            text, why));
  };
  StragglerSpec spec;
  auto colon = text.find(':');
  if (colon == std::string_view::npos) return fail("no ':'");
  std::string_view who = text.substr(0, colon);
  if (who == "all" || who == "*") {
    spec.pipeline = StragglerSpec::kEveryPipeline;
  } else {
    auto pipeline = parse_number<int>(who);
    if (!pipeline || *pipeline < 0) return fail("PIPELINE must be a data-parallel rank (0, 1, ...) or all");
    spec.pipeline = *pipeline;
  }
  std::string_view rest = text.substr(colon + 1);
  auto at = rest.find('@');
  std::string factor_text(rest.substr(0, at));
  char* end = nullptr;
  double factor = std::strtod(factor_text.c_str(), &end);
  if (factor_text.empty() || end != factor_text.c_str() + factor_text.size() || !(factor >= 1) ||
      !std::isfinite(factor) || factor > 100)
    return fail("FACTOR must be a number from 1 to 100");
  spec.factor = factor;
  if (at != std::string_view::npos) {
    std::string_view when = rest.substr(at + 1);
    auto dash = when.find('-');
    auto from = parse_number<int>(when.substr(0, dash));
    if (!from || *from < 1) return fail("ITERATION must be 1 or more");
    spec.from = *from;
    if (dash != std::string_view::npos) {
      auto until = parse_number<int>(when.substr(dash + 1));
      if (!until || *until < spec.from) return fail("UNTIL must be an iteration at or after ITERATION");
      spec.until = *until;
    }
  }
  return spec;
}

void check_simulation_config(const SimulationConfig& config) { Cluster::check_config(config); }

SimulationSummary simulate_cluster(const SimulationConfig& config,
                                   const std::function<void(const WindowReport&)>& on_report) {
  Cluster cluster(config);
  return cluster.run(on_report);
}

}  // namespace perseus::simulate
