#pragma once
// The shape of a training pipeline, as the planner, the emulator, frontier records and plans all
// declare it: embedded in each (they derive from it), copied whole and checked in one place.
#include <vector>

#include "perseus/pipeline/schedule.hpp"

namespace perseus {

struct PipelineShape {
  int num_stages = 0;
  int num_microbatches = 0;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  std::vector<int> extra_forwards;  // per stage, 1f1b only (EnvPipe's reordered schedule); empty: none
  int virtual_stages = 1;           // model chunks per stage, interleaved only: the profile has S * V stages

  // Throws Error (ErrorKind::bad_setting) saying what is wrong: check_schedule_shape, then check_extra_forwards.
  void check() const;
  // Model stages (profile stages) the schedule runs: num_stages x its chunks per stage.
  int num_model_stages() const;
  // Per stage, its instructions in the order the schedule runs them (stage_schedule).
  std::vector<std::vector<Instruction>> stage_orders() const;
  PipelineShape& shape() { return *this; }
  const PipelineShape& shape() const { return *this; }
};

}  // namespace perseus
