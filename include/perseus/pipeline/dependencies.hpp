#pragma once
// The data dependencies between instructions, shared by the DAG and the pipeline walk: a forward of
// (model stage k, microbatch m) needs the activation of (k - 1, m); a backward or input-gradient
// backward needs the input gradient of (k + 1, m), or on the last model stage the activation of
// (k, m); a weight-gradient backward needs its own input gradient (k, m). An overlapped pair needs
// and produces what its two parts do.
#include <vector>

#include "perseus/pipeline/schedule.hpp"

namespace perseus {

// One computation inside an instruction: a pair has two (its forward, then its backward).
struct InstructionPart {
  InstructionKind kind = InstructionKind::forward;
  int model_stage = 0;
  int microbatch = 0;
};

std::vector<InstructionPart> instruction_parts(const Instruction& inst, int num_stages);

// Dense ids of the data items instructions produce and need: the activation or the input gradient
// of one (model stage, microbatch).
class DataItems {
 public:
  DataItems(int num_model_stages, int num_microbatches) : K_(num_model_stages), M_(num_microbatches) {}
  int size() const { return 2 * K_ * M_; }
  // Items `inst` produces and needs, appended to the vectors (cleared first).
  void of(const Instruction& inst, int num_stages, std::vector<int>& produces, std::vector<int>& needs) const;
  bool is_gradient(int item) const { return item >= K_ * M_; }
  int model_stage(int item) const { return (item % (K_ * M_)) / M_; }
  int microbatch(int item) const { return item % M_; }

 private:
  int activation(int k, int m) const { return k * M_ + m; }
  int gradient(int k, int m) const { return (K_ + k) * M_ + m; }
  int K_, M_;
};

}  // namespace perseus
