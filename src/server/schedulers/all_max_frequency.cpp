// Every instruction of every rank at the rank's highest power state: the baseline, forever.
#include "scheduler_args.hpp"
#include "schedulers.hpp"

namespace perseus::server {

SchedulerFactory configure_all_max_frequency(const nlohmann::json& args) {
  SchedulerArgs checked("AllMaxFrequency", args, {});
  return [](const SchedulerContext& context) { return fixed_schedules(top_clock_schedules(context.ranks)); };
}

}  // namespace perseus::server
