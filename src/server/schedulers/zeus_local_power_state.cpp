// Zeus+ (the artifact's ZeusLocalPowerState baseline): per-stage power states — clocks or power
// limits, either mode — that balance the stages' forward (or backward) time. After one warm-up
// round at the top state, for each state of the heaviest stage, from high to low, every other
// stage walks down from there one state per round while its balanced-phase time gets closer to
// the heaviest stage's (and keeps getting slower), stopping at the closest; the balanced
// configuration's throughput, power and energy are recorded, until a stage reaches the lowest
// state. The configuration with the least (eta*P + (1-eta)*MaxState*S) / throughput is kept.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "perseus/util/atomic_file.hpp"
#include "scheduler_args.hpp"
#include "schedulers.hpp"

namespace perseus::server {
namespace {

struct LocalConfig {
  double eta = 0.5;
  InstructionKind phase = InstructionKind::forward;  // forward or backward
  double warmup_step_ratio = 0.1;
};

struct Balanced {
  std::vector<int> states;  // per stage
  double throughput = 0, power = 0, energy = 0;
};

class ZeusLocalPowerState final : public Scheduler {
 public:
  ZeusLocalPowerState(const SchedulerContext& context, const LocalConfig& config) : context_(context), config_(config) {
    require_pure_pipeline(context, "ZeusLocalPowerState");
    ordered_ = context.ranks.front().power_state_range;  // descending
    stages_ = context.ranks.size();
    index_.assign(stages_, 0);
  }

  std::vector<PowerStateSchedule> next_schedule() override {
    if (phase_ == Phase::warmup) return at(std::vector<int>(stages_, ordered_.front()));
    if (phase_ == Phase::done) return at(balanced_.at(optimal_).states);
    std::vector<int> states;
    for (std::size_t i : index_) states.push_back(ordered_[i]);
    return at(states);
  }

  void observe(const std::vector<ProfilingResult>& results) override {
    if (phase_ == Phase::warmup) {
      phase_ = Phase::level_start;
      return;
    }
    if (phase_ == Phase::done) return;
    std::vector<double> now = phase_times(results);
    if (phase_ == Phase::level_start) {
      if (!heaviest_) heaviest_ = static_cast<std::size_t>(std::max_element(now.begin(), now.end()) - now.begin());
      heaviest_time_ = now[*heaviest_];
      previous_time_.assign(stages_, 0.0);
      previous_distance_.assign(stages_, std::numeric_limits<double>::infinity());
      found_.assign(stages_, false);
      found_[*heaviest_] = true;
      phase_ = Phase::balancing;
    }
    if (std::all_of(found_.begin(), found_.end(), [](bool f) { return f; })) return finish_level(results);
    for (std::size_t s = 0; s < stages_; ++s) {
      if (found_[s]) continue;
      double distance = std::abs(now[s] - heaviest_time_);
      if (distance <= previous_distance_[s] || now[s] < previous_time_[s]) {  // still closing in: one state lower
        if (index_[s] + 1 < ordered_.size()) ++index_[s];
        else found_[s] = true;
      } else {  // moving away again: the previous state was the closest
        --index_[s];
        found_[s] = true;
      }
      previous_distance_[s] = distance;
    }
    previous_time_ = now;
  }

 private:
  enum class Phase { warmup, level_start, balancing, done };

  std::vector<PowerStateSchedule> at(const std::vector<int>& per_stage) const {
    std::vector<PowerStateSchedule> out;
    for (const auto& r : context_.ranks) {
      int state = per_stage[static_cast<std::size_t>(r.pp_rank)];
      out.push_back({r.rank, std::vector<int>(r.pipe_schedule.size(), state)});
    }
    return out;
  }

  std::size_t warmup_steps(const ProfilingResult& r) const {
    return std::max<std::size_t>(static_cast<std::size_t>(double(r.iter_time.size()) * config_.warmup_step_ratio), 1);
  }

  // Per stage, the mean balanced-phase instruction time over the round's iterations after warm-up.
  std::vector<double> phase_times(const std::vector<ProfilingResult>& results) const {
    std::vector<double> out(stages_, 0.0);
    for (const auto& r : results) {
      auto it = r.time_breakdown.find(std::string(to_string(config_.phase)));
      if (it == r.time_breakdown.end())
        throw std::runtime_error(fmt::format("rank {} reported no '{}' times", r.rank, to_string(config_.phase)));
      double sum = 0;
      std::size_t n = 0;
      for (std::size_t i = warmup_steps(r); i < it->second.size(); ++i)
        for (double t : it->second[i]) sum += t, ++n;
      if (n == 0)
        throw std::runtime_error(
            fmt::format("rank {} reported too few iterations: ZeusLocalPowerState needs at least 3 "
                        "per round",
                        r.rank));
      out[static_cast<std::size_t>(r.rank)] = sum / double(n);
    }
    return out;
  }

  void finish_level(const std::vector<ProfilingResult>& results) {
    Balanced b;
    for (std::size_t i : index_) b.states.push_back(ordered_[i]);
    const RoundMeans m = measure_round(results, config_.warmup_step_ratio, "ZeusLocalPowerState");
    b.energy = m.energy;
    b.power = m.power;
    b.throughput = m.time > 0 ? 1.0 / m.time : 0;
    int heaviest_state = ordered_[level_];
    balanced_[heaviest_state] = b;
    bool floor = std::any_of(b.states.begin(), b.states.end(), [&](int s) { return s == ordered_.back(); });
    if (floor || ++level_ >= ordered_.size()) return choose();
    for (auto& i : index_) i = std::max(i, level_);
    phase_ = Phase::level_start;
  }

  void choose() {
    double max_state = ordered_.front(), best = 0;
    nlohmann::json dumped = nlohmann::json::object();
    for (const auto& [state, b] : balanced_) {
      double cost = b.throughput > 0
                        ? (config_.eta * b.power + (1 - config_.eta) * max_state * double(stages_)) / b.throughput
                        : std::numeric_limits<double>::infinity();
      if (optimal_ == 0 || cost < best) best = cost, optimal_ = state;
      dumped[std::to_string(state)] = {{"balanced_power_states", b.states},
                                       {"throughput", b.throughput},
                                       {"power", b.power},
                                       {"time", b.throughput > 0 ? 1.0 / b.throughput : 0.0},
                                       {"energy", b.energy},
                                       {"cost", cost}};
    }
    phase_ = Phase::done;
    if (context_.settings.dump_data)
      write_file_atomic(context_.job_dir / "ZeusLocalPowerState.json",
                        nlohmann::json({{"heaviest_stage", *heaviest_},
                                        {"optimal_heaviest_stage_power_state", optimal_},
                                        {"optimal_power_states", balanced_.at(optimal_).states},
                                        {"profiling_results", dumped}})
                                .dump(2) +
                            "\n");
  }

  SchedulerContext context_;
  LocalConfig config_;
  std::vector<int> ordered_;
  std::size_t stages_ = 0, level_ = 0;
  Phase phase_ = Phase::warmup;
  std::vector<std::size_t> index_;
  std::optional<std::size_t> heaviest_;
  double heaviest_time_ = 0;
  std::vector<double> previous_time_, previous_distance_;
  std::vector<bool> found_;
  std::map<int, Balanced, std::greater<>> balanced_;
  int optimal_ = 0;
};

}  // namespace

SchedulerFactory configure_zeus_local_power_state(const nlohmann::json& args) {
  SchedulerArgs checked("ZeusLocalPowerState", args, {"eta_knob", "balanced_phase", "warmup_step_ratio"});
  LocalConfig config;
  config.eta = checked.number("eta_knob").value_or(0.5);
  if (config.eta < 0 || config.eta > 1) checked.fail("eta_knob", "must be between 0 and 1");
  const auto phase = parse_instruction_kind(checked.string("balanced_phase").value_or("forward"));
  if (phase != InstructionKind::forward && phase != InstructionKind::backward)
    checked.fail("balanced_phase", "must be \"forward\" or \"backward\"");
  config.phase = *phase;
  config.warmup_step_ratio = checked.number("warmup_step_ratio").value_or(0.1);
  if (config.warmup_step_ratio < 0 || config.warmup_step_ratio >= 1)
    checked.fail("warmup_step_ratio", "must be in [0, 1)");
  return [config](const SchedulerContext& context) { return std::make_unique<ZeusLocalPowerState>(context, config); };
}

}  // namespace perseus::server
