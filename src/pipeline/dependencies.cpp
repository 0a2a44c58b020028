#include "perseus/pipeline/dependencies.hpp"

namespace perseus {

std::vector<InstructionPart> instruction_parts(const Instruction& inst, int num_stages) {
  if (inst.kind != InstructionKind::forward_backward)
    return {{inst.kind, model_stage(inst, num_stages), inst.microbatch}};
  return {{InstructionKind::forward, model_stage(inst, num_stages), inst.microbatch},
          {InstructionKind::backward, model_stage_of(inst.stage, inst.pair_chunk, inst.v_placement, num_stages),
           inst.pair_microbatch}};
}

void DataItems::of(const Instruction& inst, int num_stages, std::vector<int>& produces, std::vector<int>& needs) const {
  produces.clear();
  needs.clear();
  for (const auto& part : instruction_parts(inst, num_stages)) {
    const int k = part.model_stage, m = part.microbatch;
    switch (part.kind) {
      case InstructionKind::forward:
        if (k > 0) needs.push_back(activation(k - 1, m));
        produces.push_back(activation(k, m));
        break;
      case InstructionKind::backward:
      case InstructionKind::backward_input:
        needs.push_back(k + 1 < K_ ? gradient(k + 1, m) : activation(k, m));
        produces.push_back(gradient(k, m));
        break;
      case InstructionKind::backward_weight:
        needs.push_back(gradient(k, m));
        break;
      case InstructionKind::forward_backward:  // split above
        break;
    }
  }
}

}  // namespace perseus
