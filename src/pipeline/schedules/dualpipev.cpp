#include <deque>
#include <utility>

#include "schedules.hpp"

namespace perseus::schedules {

// DualPipeV (DeepSeek's DualPipe in a V), in the order PyTorch's ScheduleDualPipeV gives: two chunks
// per stage in a V (chunk 0 = model stage r, chunk 1 = model stage 2S - 1 - r). Eight phases: forwards
// of chunk 0; forwards of both chunks; chunk 1's I, a pending W and a forward; the main phase of
// overlapped pairs (forward of one chunk with the full backward of the other, one instruction);
// chunk 1's backward with a pair; backwards of both chunks, the second half split into I's whose
// W's queue up; chunk 0's backwards after pending W's; the last W's. Needs M >= 2S.
std::vector<Instruction> dualpipev(int r, const ScheduleShape& shape, int) {
  const int S = shape.num_stages, M = shape.num_microbatches;
  std::vector<Instruction> out;
  int forwards[2] = {0, 0}, backwards[2] = {0, 0};  // next microbatch per chunk
  std::deque<std::pair<int, int>> pending_weights;  // (chunk, microbatch) of I's without their W
  auto add = [&](InstructionKind kind, int chunk, int microbatch) {
    out.push_back({r, kind, microbatch, chunk, true});
  };
  auto forward = [&](int c) { add(InstructionKind::forward, c, forwards[c]++); };
  auto backward = [&](int c, bool split) {
    if (split) pending_weights.emplace_back(c, backwards[c]);
    add(split ? InstructionKind::backward_input : InstructionKind::backward, c, backwards[c]++);
  };
  auto pending_weight = [&] {
    if (pending_weights.empty()) return;
    add(InstructionKind::backward_weight, pending_weights.front().first, pending_weights.front().second);
    pending_weights.pop_front();
  };
  auto pair = [&](int forward_chunk, int backward_chunk) {
    Instruction inst{r, InstructionKind::forward_backward, forwards[forward_chunk]++, forward_chunk, true};
    inst.pair_chunk = backward_chunk;
    inst.pair_microbatch = backwards[backward_chunk]++;
    out.push_back(inst);
  };
  for (int i = 0; i < 2 * (S - r - 1); ++i) forward(0);
  for (int i = 0; i < r + 1; ++i) forward(0), forward(1);
  for (int i = 0; i < S - r - 1; ++i) backward(1, true), pending_weight(), forward(1);
  for (int i = 0; i < M - 2 * S + r + 1; ++i) {
    if (i == 0 && r == S - 1) {
      forward(0), backward(1, false);  // not overlapped: a smaller bubble
    } else {
      pair(0, 1);
    }
    pair(1, 0);
  }
  for (int i = 0; i < S - r - 1; ++i) backward(1, false), pair(1, 0);
  bool split = false;
  const int last = r + 1;
  for (int i = 0; i < last; ++i) {
    if (i == last / 2 && r % 2 == 1) split = true;
    backward(1, split);
    if (i == last / 2 && r % 2 == 0) split = true;
    backward(0, split);
  }
  for (int i = 0; i < S - r - 1; ++i) pending_weight(), backward(0, split);
  while (!pending_weights.empty()) pending_weight();
  return out;
}

}  // namespace perseus::schedules
