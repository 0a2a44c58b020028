// Online profiling: warm-up rounds at the top clock, then one round per clock from high to low
// (down to minimum_power_state) with every instruction at that clock. It averages each stage's
// forward and backward time and energy per clock, dropping the first warmup_step_ratio of each
// round's iterations, and writes the profile CSV `perseus optimize` reads, plus the blocking
// power it measured (profile_info.json) for --p2p-power. Then it says it is done.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "perseus/util/atomic_file.hpp"
#include "perseus/profile/profile.hpp"
#include "scheduler_args.hpp"
#include "schedulers.hpp"

namespace perseus::server {
namespace {

struct ProfilerConfig {
  double warmup_step_ratio = 0.1;
  int minimum_power_state = 850;
  int warmup_rounds = 2;
  std::string profile_path;  // empty: <job_dir>/profile.csv
};

// What the profile CSV holds: the artifact's forwards and backwards, whole.
constexpr InstructionKind kProfiledKinds[] = {InstructionKind::forward, InstructionKind::backward};

using RankKind = std::pair<int, InstructionKind>;

// The CSV's rows by rank, then by the kind's name (backward before forward).
struct CsvOrder {
  bool operator()(const RankKind& a, const RankKind& b) const {
    return std::pair(a.first, to_string(a.second)) < std::pair(b.first, to_string(b.second));
  }
};

struct Measurement {
  double time = 0, energy = 0;
};

class InstructionProfiler final : public Scheduler {
 public:
  InstructionProfiler(const SchedulerContext& context, ProfilerConfig config) : context_(context), config_(config) {
    require_pure_pipeline(context, "InstructionProfiler");
    if (context.settings.mode != PowerMode::frequency)
      throw std::runtime_error("InstructionProfiler profiles clocks; run the server in frequency mode");
    // Clocks every rank supports, high to low.
    std::set<int> common(context.ranks.front().power_state_range.begin(),
                         context.ranks.front().power_state_range.end());
    for (const auto& r : context.ranks) {
      std::set<int> mine(r.power_state_range.begin(), r.power_state_range.end());
      std::set<int> both;
      std::set_intersection(common.begin(), common.end(), mine.begin(), mine.end(), std::inserter(both, both.end()));
      common = both;
    }
    for (auto it = common.rbegin(); it != common.rend(); ++it)
      if (*it >= config_.minimum_power_state) clocks_.push_back(*it);
    if (clocks_.empty())
      throw std::runtime_error(fmt::format("InstructionProfiler: no clock common to all ranks is at least {} MHz",
                                           config_.minimum_power_state));
    path_ =
        config_.profile_path.empty() ? context.job_dir / "profile.csv" : std::filesystem::path(config_.profile_path);
  }

  std::vector<PowerStateSchedule> next_schedule() override {
    if (round_ >= config_.warmup_rounds + static_cast<int>(clocks_.size()))
      throw SchedulerDone(
          fmt::format("InstructionProfiler profiled {} clocks and wrote {}", clocks_.size(), path_.string()));
    if (round_ < config_.warmup_rounds) return top_clock_schedules(context_.ranks);
    int clock = clocks_[round_ - config_.warmup_rounds];
    std::vector<PowerStateSchedule> out;
    for (const auto& r : context_.ranks) out.push_back({r.rank, std::vector<int>(r.pipe_schedule.size(), clock)});
    return out;
  }

  void observe(const std::vector<ProfilingResult>& results) override {
    int round = round_++;
    if (round == config_.warmup_rounds - 1 || (config_.warmup_rounds == 0 && round == 0))
      measure_blocking_power(results);
    if (round < config_.warmup_rounds) return;
    int clock = clocks_[round - config_.warmup_rounds];
    for (const auto& result : results) {
      for (auto kind : kProfiledKinds) {
        table_[{result.rank, kind}][clock] = {average(result, result.time_breakdown, kind),
                                              average(result, result.energy_breakdown, kind)};
      }
    }
    if (round_ == config_.warmup_rounds + static_cast<int>(clocks_.size())) write();
  }

 private:
  // Mean over occurrences of the kept iterations.
  double average(const ProfilingResult& result, const Breakdown& breakdown, InstructionKind kind) const {
    auto it = breakdown.find(std::string(to_string(kind)));
    if (it == breakdown.end() || it->second.empty())
      throw std::runtime_error(
          fmt::format("InstructionProfiler: rank {} reported no '{}' measurements; wrap "
                      "forward and backward with on_instruction_begin/end",
                      result.rank, to_string(kind)));
    const auto& iterations = it->second;
    auto drop = static_cast<std::size_t>(std::ceil(config_.warmup_step_ratio * double(iterations.size())));
    drop = std::min(drop, iterations.size() - 1);
    double sum = 0;
    std::size_t n = 0;
    for (std::size_t i = drop; i < iterations.size(); ++i)
      for (double v : iterations[i]) sum += v, ++n;
    if (n == 0)
      throw std::runtime_error(fmt::format("InstructionProfiler: rank {} ran no '{}'", result.rank, to_string(kind)));
    return sum / double(n);
  }

  // Blocking power: what a stage draws outside its forwards and backwards, per second.
  void measure_blocking_power(const std::vector<ProfilingResult>& results) {
    double idle_energy = 0, idle_time = 0;
    for (const auto& r : results) {
      std::size_t iterations = std::min(r.iter_time.size(), r.iter_energy.size());
      for (std::size_t i = 0; i < iterations; ++i) {
        double busy_time = 0, busy_energy = 0;
        for (auto kind : kProfiledKinds) {
          const std::string name(to_string(kind));
          auto t = r.time_breakdown.find(name);
          auto e = r.energy_breakdown.find(name);
          if (t != r.time_breakdown.end() && i < t->second.size())
            for (double v : t->second[i]) busy_time += v;
          if (e != r.energy_breakdown.end() && i < e->second.size())
            for (double v : e->second[i]) busy_energy += v;
        }
        if (r.iter_time[i] > busy_time) {
          idle_time += r.iter_time[i] - busy_time;
          idle_energy += std::max(0.0, r.iter_energy[i] - busy_energy);
        }
      }
    }
    if (idle_time > 0) p_block_ = idle_energy / idle_time;
  }

  void write() {
    Profile profile;
    for (const auto& [key, per_clock] : table_)
      for (auto it = per_clock.rbegin(); it != per_clock.rend(); ++it)
        profile.rows.push_back({key.first, key.second, it->first, it->second.time, it->second.energy, 0});
    std::filesystem::create_directories(path_.parent_path().empty() ? "." : path_.parent_path());
    write_file_atomic(path_, profile_csv(profile));
    nlohmann::json info = {{"profile", path_.string()},
                           {"stages", context_.job.pp_degree},
                           {"num_microbatches", context_.job.num_microbatches},
                           {"clocks", clocks_},
                           {"p_block_watts", p_block_ ? nlohmann::json(*p_block_) : nlohmann::json(nullptr)}};
    write_file_atomic(path_.parent_path() / "profile_info.json", info.dump(2) + "\n");
  }

  SchedulerContext context_;
  ProfilerConfig config_;
  std::vector<int> clocks_;
  std::filesystem::path path_;
  int round_ = 0;
  std::map<RankKind, std::map<int, Measurement>, CsvOrder> table_;  // per (rank, kind), clock
  std::optional<double> p_block_;
};

}  // namespace

SchedulerFactory configure_instruction_profiler(const nlohmann::json& args) {
  SchedulerArgs checked("InstructionProfiler", args,
                        {"warmup_step_ratio", "minimum_power_state", "warmup_rounds", "profile_path"});
  ProfilerConfig config;
  config.warmup_step_ratio = checked.number("warmup_step_ratio").value_or(config.warmup_step_ratio);
  if (!(config.warmup_step_ratio >= 0 && config.warmup_step_ratio < 1))
    checked.fail("warmup_step_ratio", "must be in [0, 1)");
  config.minimum_power_state = checked.integer("minimum_power_state").value_or(config.minimum_power_state);
  if (config.minimum_power_state <= 0) checked.fail("minimum_power_state", "must be positive");
  config.warmup_rounds = checked.integer("warmup_rounds").value_or(config.warmup_rounds);
  if (config.warmup_rounds < 0) checked.fail("warmup_rounds", "must be at least 0");
  config.profile_path = checked.string("profile_path").value_or("");
  return [config](const SchedulerContext& context) { return std::make_unique<InstructionProfiler>(context, config); };
}

}  // namespace perseus::server
