// Every instruction of every rank at the rank's highest power state: the baseline, forever, or
// for num_iters rounds and then [profiling-done] (the artifact's argument).
#include <fmt/format.h>

#include <optional>

#include "scheduler_args.hpp"
#include "schedulers.hpp"

namespace perseus::server {
namespace {

class AllMaxFrequency final : public Scheduler {
 public:
  AllMaxFrequency(const SchedulerContext& context, std::optional<int> rounds)
      : schedules_(top_clock_schedules(context.ranks)), rounds_(rounds) {}

  std::vector<PowerStateSchedule> next_schedule() override {
    if (rounds_ && round_ >= *rounds_) throw SchedulerDone(fmt::format("AllMaxFrequency ran its {} rounds (num_iters)", *rounds_));
    return schedules_;
  }
  void observe(const std::vector<ProfilingResult>&) override { ++round_; }
  bool observes_results() const override { return false; }

 private:
  std::vector<PowerStateSchedule> schedules_;
  std::optional<int> rounds_;
  int round_ = 0;
};

}  // namespace

SchedulerFactory configure_all_max_frequency(const nlohmann::json& args) {
  SchedulerArgs checked("AllMaxFrequency", args, {"num_iters"});
  auto rounds = checked.integer("num_iters");
  if (rounds && *rounds < 1) checked.fail("num_iters", "must be at least 1");
  return [rounds](const SchedulerContext& context) { return std::make_unique<AllMaxFrequency>(context, rounds); };
}

}  // namespace perseus::server
