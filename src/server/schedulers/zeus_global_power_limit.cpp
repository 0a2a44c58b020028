// Zeus's JIT power-limit search as the Perseus artifact runs it as a baseline (`--mode 'power
// limit'`): one warm-up round at the highest limit, then one round per limit from high to low
// (the artifact leaves out the lowest), then the limit with the least
// eta*E + (1-eta)*MaxPower*T per iteration, kept for the rest of training. E and T are measured
// over all ranks (energy summed, time the slowest rank's) after dropping each round's first
// warmup_step_ratio of iterations (at least one); MaxPower is the highest limit times the world size.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "perseus/util/atomic_file.hpp"
#include "scheduler_args.hpp"
#include "schedulers.hpp"

namespace perseus::server {
namespace {

struct GlobalConfig {
  double eta = 0.5;
  double warmup_step_ratio = 0.1;
};

class ZeusGlobalPowerLimit final : public Scheduler {
 public:
  ZeusGlobalPowerLimit(const SchedulerContext& context, const GlobalConfig& config)
      : context_(context), config_(config) {
    limits_ = context.ranks.front().power_state_range;  // descending
    for (const auto& r : context.ranks)
      if (r.power_state_range != limits_)
        throw std::runtime_error(
            fmt::format("ZeusGlobalPowerLimit sets one limit for every GPU, but rank {} lists "
                        "other power limits than rank 0",
                        r.rank));
    max_power_ = double(limits_.front()) * context.job.world_size;
    if (limits_.size() > 1) limits_.pop_back();  // as the artifact: the lowest limit is not profiled
  }

  std::vector<PowerStateSchedule> next_schedule() override {
    if (round_ == 0) return everyone_at(limits_.front());  // warm-up
    std::size_t profiled = static_cast<std::size_t>(round_ - 1);
    if (profiled < limits_.size()) return everyone_at(limits_[profiled]);
    return everyone_at(optimal_);
  }

  void observe(const std::vector<ProfilingResult>& results) override {
    // Round 0 warmed up; rounds 1..L profiled limits_[0..L-1]; later rounds ran the optimum.
    std::size_t profiled = static_cast<std::size_t>(round_);
    if (profiled == 0 || profiled > limits_.size()) return (void)++round_;  // warm-up or deployed
    observe(measure_round(results, config_.warmup_step_ratio, "ZeusGlobalPowerLimit"));
  }

  // A profiling round is its job-wide means; other rounds need nothing.
  nlohmann::json round_record(const std::vector<ProfilingResult>& results) const override {
    std::size_t profiled = static_cast<std::size_t>(round_);
    if (profiled == 0 || profiled > limits_.size()) return nlohmann::json::object();
    auto m = measure_round(results, config_.warmup_step_ratio, "ZeusGlobalPowerLimit");
    return {{"time", m.time}, {"energy", m.energy}, {"power", m.power}};
  }
  void replay(const nlohmann::json& record) override {
    if (record.is_array()) return Scheduler::replay(record);  // every rank's results, as older stores kept them
    std::size_t profiled = static_cast<std::size_t>(round_);
    if (profiled == 0 || profiled > limits_.size()) return (void)++round_;
    observe(RoundMeans{record.at("time").get<double>(), record.at("energy").get<double>(),
                       record.at("power").get<double>()});
  }

 private:
  void observe(const RoundMeans& m) {
    std::size_t profiled = static_cast<std::size_t>(round_++);
    measured_[limits_[profiled - 1]] = m;
    if (profiled == limits_.size()) choose();
  }

  std::vector<PowerStateSchedule> everyone_at(int limit) const {
    std::vector<PowerStateSchedule> out;
    for (const auto& r : context_.ranks) out.push_back({r.rank, std::vector<int>(r.pipe_schedule.size(), limit)});
    return out;
  }

  void choose() {
    double best = 0;
    nlohmann::json dumped = nlohmann::json::object();
    for (const auto& [limit, m] : measured_) {
      double cost = config_.eta * m.energy + (1 - config_.eta) * max_power_ * m.time;
      if (optimal_ == 0 || cost < best) best = cost, optimal_ = limit;
      dumped[std::to_string(limit)] = {{"time", m.time}, {"energy", m.energy}, {"cost", cost}};
    }
    if (context_.settings.dump_data)  // as the artifact's ZeusGlobalPowerLimit.json, plus each limit's cost
      write_file_atomic(context_.job_dir / "ZeusGlobalPowerLimit.json",
                        nlohmann::json({{"optimal_power_limit", optimal_},
                                        {"eta_knob", config_.eta},
                                        {"max_power", max_power_},
                                        {"profiling_results", dumped}})
                                .dump(2) +
                            "\n");
  }

  SchedulerContext context_;
  GlobalConfig config_;
  std::vector<int> limits_;
  double max_power_ = 0;
  std::map<int, RoundMeans, std::greater<>> measured_;
  int round_ = 0;
  int optimal_ = 0;
};

}  // namespace

SchedulerFactory configure_zeus_global_power_limit(const nlohmann::json& args) {
  SchedulerArgs checked("ZeusGlobalPowerLimit", args, {"eta_knob", "warmup_step_ratio"});
  GlobalConfig config;
  config.eta = checked.number("eta_knob").value_or(0.5);
  if (config.eta < 0 || config.eta > 1) checked.fail("eta_knob", "must be between 0 and 1");
  config.warmup_step_ratio = checked.number("warmup_step_ratio").value_or(0.1);
  if (config.warmup_step_ratio < 0 || config.warmup_step_ratio >= 1)
    checked.fail("warmup_step_ratio", "must be in [0, 1)");
  return [config](const SchedulerContext& context) { return std::make_unique<ZeusGlobalPowerLimit>(context, config); };
}

}  // namespace perseus::server
