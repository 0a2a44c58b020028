#include "perseus/pipeline/shape.hpp"

namespace perseus {

void PipelineShape::check() const {
  check_schedule_shape(schedule, num_stages, num_microbatches, virtual_stages);
  check_extra_forwards(schedule, extra_forwards, num_stages, num_microbatches);
}

}  // namespace perseus
