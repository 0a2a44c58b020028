#include "perseus/pipeline/shape.hpp"

namespace perseus {

void PipelineShape::check() const {
  check_schedule_shape(schedule, num_stages, num_microbatches, virtual_stages);
  check_extra_forwards(schedule, extra_forwards, num_stages, num_microbatches);
}

int PipelineShape::num_model_stages() const { return num_stages * schedule_virtual_stages(schedule, virtual_stages); }

std::vector<std::vector<Instruction>> PipelineShape::stage_orders() const {
  std::vector<std::vector<Instruction>> orders;
  for (int s = 0; s < num_stages; ++s)
    orders.push_back(stage_schedule(schedule, s, num_stages, num_microbatches,
                                    extra_forwards.empty() ? 0 : extra_forwards[static_cast<std::size_t>(s)],
                                    virtual_stages));
  return orders;
}

}  // namespace perseus
