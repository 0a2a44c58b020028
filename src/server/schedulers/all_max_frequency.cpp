// Every instruction of every rank at the rank's highest power state — top clock (AllMaxFrequency)
// or highest power limit (AllMaxPowerLimit): the baseline, forever, or for num_iters rounds and
// then [profiling-done] (the artifact's argument).
#include <fmt/format.h>

#include <optional>
#include <string>

#include "scheduler_args.hpp"
#include "schedulers.hpp"

namespace perseus::server {
namespace {

class AllMax final : public Scheduler {
 public:
  AllMax(const SchedulerContext& context, std::string name, std::optional<int> rounds)
      : schedules_(top_clock_schedules(context.ranks)), name_(std::move(name)), rounds_(rounds) {}

  std::vector<PowerStateSchedule> next_schedule() override {
    if (rounds_ && round_ >= *rounds_)
      throw SchedulerDone(fmt::format("{} ran its {} rounds (num_iters)", name_, *rounds_));
    return schedules_;
  }
  void observe(const std::vector<ProfilingResult>&) override { ++round_; }
  bool observes_results() const override { return false; }

 private:
  std::vector<PowerStateSchedule> schedules_;
  std::string name_;
  std::optional<int> rounds_;
  int round_ = 0;
};

SchedulerFactory configure_all_max(const char* name, const nlohmann::json& args) {
  SchedulerArgs checked(name, args, {"num_iters"});
  auto rounds = checked.integer("num_iters");
  if (rounds && *rounds < 1) checked.fail("num_iters", "must be at least 1");
  return [name = std::string(name), rounds](const SchedulerContext& context) {
    return std::make_unique<AllMax>(context, name, rounds);
  };
}

}  // namespace

SchedulerFactory configure_all_max_frequency(const nlohmann::json& args) {
  return configure_all_max("AllMaxFrequency", args);
}
SchedulerFactory configure_all_max_power_limit(const nlohmann::json& args) {
  return configure_all_max("AllMaxPowerLimit", args);
}

}  // namespace perseus::server
