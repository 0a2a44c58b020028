// Every instruction of every rank at the rank's highest power state: the baseline, forever.
#include "scheduler_args.hpp"
#include "schedulers.hpp"

namespace perseus::server {
namespace {

class AllMaxFrequency final : public Scheduler {
 public:
  explicit AllMaxFrequency(const SchedulerContext& context) : schedule_(top_clock_schedules(context.ranks)) {}
  std::vector<PowerStateSchedule> next_schedule() override { return schedule_; }
  void observe(const std::vector<ProfilingResult>&) override {}

 private:
  std::vector<PowerStateSchedule> schedule_;
};

}  // namespace

SchedulerFactory configure_all_max_frequency(const nlohmann::json& args) {
  SchedulerArgs checked("AllMaxFrequency", args, {});
  return [](const SchedulerContext& context) { return std::make_unique<AllMaxFrequency>(context); };
}

}  // namespace perseus::server
