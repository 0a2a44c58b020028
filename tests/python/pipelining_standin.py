"""A stand-in for torch.distributed.pipelining (PyTorch >= 2.6 is not a Debian package): schedules
with PyTorch's class, attribute and method names whose `pipeline_order` is the compute order PyTorch's
schedule generators give each rank, run by a runtime that executes it the way PyTorch's does.

- `pipeline_order[rank]`: the rank's actions with idle steps (None) and, for the single-stage
  schedules, the gradient reductions (REDUCE_GRAD) PyTorch puts in it.
- Execution: Schedule1F1B and ScheduleGPipe run their own warm-up / steady / cool-down loops (as
  PipelineScheduleSingle does, not from pipeline_order); the multi-stage schedules run the order
  lowered with communication and gradient reductions (as _PipelineScheduleRuntime does): a custom
  function registered for the action's computation type, else an OVERLAP_F_B's sub-actions one after
  the other, else the stage's method for the action.
- Each stage appends what it computes to `ran` ((rank, 'F'|'B'|'I'|'W', stage_index, microbatch)), and
  each runtime appends the compute action it dispatches to `executed`: what a rank really ran.

No numerics: stages compute nothing.
"""
from __future__ import annotations

from collections import Counter, deque
from enum import Enum
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple


class _ComputationType(str, Enum):
    FORWARD = "F"
    BACKWARD_INPUT = "I"
    BACKWARD_WEIGHT = "W"
    UNSHARD = "UNSHARD"
    RESHARD = "RESHARD"
    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"
    FULL_BACKWARD = "B"
    OVERLAP_F_B = "OVERLAP_F_B"
    REDUCE_GRAD = "REDUCE_GRAD"


F = _ComputationType.FORWARD
I = _ComputationType.BACKWARD_INPUT  # noqa: E741  PyTorch's shorthand
W = _ComputationType.BACKWARD_WEIGHT
B = _ComputationType.FULL_BACKWARD
OVERLAP_F_B = _ComputationType.OVERLAP_F_B
REDUCE_GRAD = _ComputationType.REDUCE_GRAD
COMPUTE = (F, I, W, B, OVERLAP_F_B)


class _Action(NamedTuple):
    stage_index: int
    computation_type: _ComputationType
    microbatch_index: Optional[int] = None
    sub_actions: Optional[Tuple["_Action", ...]] = None


class PipelineStage:
    """A stage with _PipelineStageBase's attributes and compute methods; it records each call."""

    def __init__(self, stage_index: int, num_stages: int, group_rank: int, group_size: int, ran: List[Any]):
        self.stage_index, self.num_stages = stage_index, num_stages
        self.group_rank, self.group_size = group_rank, group_size
        self.is_first, self.is_last = stage_index == 0, stage_index == num_stages - 1
        self.ran = ran

    def forward_one_chunk(self, fwd_chunk_id, args, kwargs=None, save_forward_output=True):
        self.ran.append((self.group_rank, "F", self.stage_index, fwd_chunk_id))
        return f"out{fwd_chunk_id}"

    def backward_one_chunk(self, bwd_chunk_id, loss=None, full_backward=True, last_backward=False):
        self.ran.append((self.group_rank, "B" if full_backward else "I", self.stage_index, bwd_chunk_id))

    def backward_weight_one_chunk(self, bwd_chunk_id, last_backward=False):
        self.ran.append((self.group_rank, "W", self.stage_index, bwd_chunk_id))


class _Schedule:
    def __init__(self, n_microbatches: int, loss_fn: Optional[Callable[..., Any]]):
        self._n_microbatches = n_microbatches
        self._loss_fn = loss_fn
        self._has_backward = loss_fn is not None
        self.executed: List[_Action] = []
        self.steps = 0

    def step(self, *args, target=None, losses=None, return_outputs=True, **kwargs):
        self.steps += 1
        self._step_microbatches([args] * self._n_microbatches, [kwargs] * self._n_microbatches)
        return "merged outputs"

    def eval(self, *args, target=None, losses=None, **kwargs):
        had, self._has_backward = self._has_backward, False
        try:
            return self.step(*args, target=target, losses=losses, **kwargs)
        finally:
            self._has_backward = had


# --- single-stage schedules ----------------------------------------------------------------------

class PipelineScheduleSingle(_Schedule):
    def __init__(self, stage: PipelineStage, n_microbatches: int, loss_fn=None, with_pipeline_order=True):
        super().__init__(n_microbatches, loss_fn)
        self._stage = stage
        self._num_stages = stage.num_stages
        # PyTorch 2.6 and 2.7 give single-stage schedules no pipeline_order.
        self.pipeline_order = self._get_pipeline_order() if with_pipeline_order else None

    def _forward(self, mb):
        self.executed.append(_Action(self._stage.stage_index, F, mb))
        self._stage.forward_one_chunk(mb, (), {})

    def _backward(self, mb):
        self.executed.append(_Action(self._stage.stage_index, B, mb))
        self._stage.backward_one_chunk(mb, loss=None, last_backward=mb == self._n_microbatches - 1)

    def _get_pipeline_order(self):
        return {rank: _with_reduce_grad(self._rank_order(rank), self._n_microbatches)
                for rank in range(self._num_stages)}


class Schedule1F1B(PipelineScheduleSingle):
    def _step_microbatches(self, arg_mbs, kwarg_mbs):
        M = self._n_microbatches
        warmup = min(M, self._num_stages - self._stage.stage_index)
        for mb in range(warmup):
            self._forward(mb)
        if not self._has_backward:
            for mb in range(warmup, M):
                self._forward(mb)
            return
        forwards, backwards = warmup, 0
        while True:  # backward first, then forward, while forwards remain
            self._backward(backwards)
            backwards += 1
            if forwards == M:
                break
            self._forward(forwards)
            forwards += 1
        while backwards < M:
            self._backward(backwards)
            backwards += 1

    def _rank_order(self, rank):
        S, M = self._num_stages, self._n_microbatches
        warm = S - 1 - rank
        order = [None] * rank + [_Action(rank, F, mb) for mb in range(warm)] + [None] * (2 * warm)
        for k in range(M - warm):
            order += [_Action(rank, F, warm + k), _Action(rank, B, k)]
        for mb in range(M - warm, M):
            order += [None, _Action(rank, B, mb)]
        return order


class ScheduleGPipe(PipelineScheduleSingle):
    def _step_microbatches(self, arg_mbs, kwarg_mbs):
        for mb in range(self._n_microbatches):
            self._forward(mb)
        if self._has_backward:
            for mb in range(self._n_microbatches):
                self._backward(mb)

    def _rank_order(self, rank):
        S, M = self._num_stages, self._n_microbatches
        return ([None] * rank + [_Action(rank, F, mb) for mb in range(M)] + [None] * (3 * (S - 1 - rank)) +
                [_Action(rank, B, mb) for mb in range(M)])


def _with_reduce_grad(order, microbatches):
    """A REDUCE_GRAD after each stage's last backward-like (B or W) action, as PyTorch adds them."""
    out, seen = [], Counter()
    for action in order:
        if action is None:
            continue
        out.append(action)
        leaves = action.sub_actions if action.computation_type == OVERLAP_F_B else (action,)
        for leaf in leaves:
            if leaf.computation_type in (B, W):
                seen[leaf.stage_index] += 1
                if seen[leaf.stage_index] == microbatches:
                    out.append(_Action(leaf.stage_index, REDUCE_GRAD, None))
    return out


# --- multi-stage schedules on the runtime -------------------------------------------------------

class _PipelineScheduleRuntime(_Schedule):
    def __init__(self, stages: List[PipelineStage], n_microbatches: int, loss_fn=None):
        super().__init__(n_microbatches, loss_fn)
        self._stages = stages
        self._num_stages = stages[0].num_stages
        self.pp_group_size = stages[0].group_size
        self.rank = stages[0].group_rank
        self.n_local_stages = len(stages)
        self._comp_type_to_function_map: Dict[_ComputationType, Callable[..., Any]] = {}
        self.pipeline_order = {r: self._calculate_single_rank_operations(r) for r in range(self.pp_group_size)}
        self.pipeline_order_with_comms = {r: _lowered(self.pipeline_order[r], n_microbatches)
                                          for r in range(self.pp_group_size)}

    def register_custom_function(self, computation_type, custom_function):
        self._comp_type_to_function_map[computation_type] = custom_function

    def _step_microbatches(self, arg_mbs, kwarg_mbs):
        by_index = {stage.stage_index: stage for stage in self._stages}
        backwards = Counter()

        def perform(action):
            stage, mb, kind = by_index[action.stage_index], action.microbatch_index, action.computation_type
            if kind == F:
                stage.forward_one_chunk(mb, arg_mbs[mb], kwarg_mbs[mb], save_forward_output=True)
            elif kind in (B, I):
                if kind == B:
                    backwards[action.stage_index] += 1
                stage.backward_one_chunk(mb, loss=None, full_backward=kind == B,
                                         last_backward=kind == B and backwards[action.stage_index] == self._n_microbatches)
            elif kind == W:
                backwards[action.stage_index] += 1
                stage.backward_weight_one_chunk(mb, last_backward=backwards[action.stage_index] == self._n_microbatches)
            # SEND/RECV and REDUCE_GRAD: nothing to compute here

        for action in self.pipeline_order_with_comms[self.rank]:
            if not self._has_backward and action.computation_type != F:
                continue  # evaluation: forwards only
            if action.computation_type in COMPUTE:
                self.executed.append(action)
            if action.computation_type in self._comp_type_to_function_map:
                self._comp_type_to_function_map[action.computation_type](action, {"schedule_ref": self})
            elif action.computation_type == OVERLAP_F_B:
                for sub in action.sub_actions:
                    perform(sub)
            else:
                perform(action)


def _lowered(order, microbatches):
    """A rank's order as the runtime runs it: idle steps dropped, a send after each forward and
    input-gradient backward, and the gradient reductions."""
    out = []
    for action in _with_reduce_grad(order, microbatches):
        out.append(action)
        if action.computation_type == F:
            out.append(_Action(action.stage_index, _ComputationType.SEND_F, action.microbatch_index))
        elif action.computation_type in (I, B):
            out.append(_Action(action.stage_index, _ComputationType.SEND_B, action.microbatch_index))
    return out


def _rounds(M, S):
    rounds = max(1, M // S)
    return M // rounds


class _Interleaved(_PipelineScheduleRuntime):
    zero_bubble = False

    def _calculate_single_rank_operations(self, rank):
        S, V, M = self.pp_group_size, self.n_local_stages, self._n_microbatches
        per_round = _rounds(M, S)
        hop = 1 if self.zero_bubble else 2
        warmup = min((V - 1) * per_round + hop * (S - 1 - rank), M * V)
        total = M * V
        forwards, backwards = Counter(), Counter()

        def forward(k):
            stage = ((k // per_round) % V) * S + rank
            forwards[stage] += 1
            return _Action(stage, F, forwards[stage] - 1)

        def backward(k):
            stage = (V - 1 - (k // per_round) % V) * S + rank
            backwards[stage] += 1
            return _Action(stage, I if self.zero_bubble else B, backwards[stage] - 1)

        order = [None] * rank + [forward(k) for k in range(warmup)] + [None] * (S - 1 - rank)
        pending = deque()
        for k in range(total):  # the k-th backward, with the forward that comes before it while any remain
            if warmup + k < total:
                order.append(forward(warmup + k))
            elif not self.zero_bubble:
                order.append(None)
            b = backward(k)
            order.append(b)
            if self.zero_bubble:
                pending.append(b)
                if k >= rank:  # stage r holds back its first r weight parts
                    first = pending.popleft()
                    order.append(_Action(first.stage_index, W, first.microbatch_index))
        order += [_Action(p.stage_index, W, p.microbatch_index) for p in pending]
        return order


class ScheduleInterleaved1F1B(_Interleaved):
    pass


class ScheduleInterleavedZeroBubble(_Interleaved):
    zero_bubble = True


class ScheduleZBVZeroBubble(_PipelineScheduleRuntime):
    def _calculate_single_rank_operations(self, rank):
        S, M = self.pp_group_size, self._n_microbatches
        n = max(2 * S - 1, M)
        chunk = {0: rank, 1: 2 * S - 1 - rank}
        f, b = {0: 0, 1: 0}, {0: 0, 1: 0}
        order = [None] * rank

        def fwd(c):
            order.append(_Action(chunk[c], F, f[c]))
            f[c] += 1

        def inp(c, weight_too):
            order.append(_Action(chunk[c], I, b[c]))
            if weight_too:
                order.append(_Action(chunk[c], W, b[c]))
            b[c] += 1

        for _ in range(2 * (S - rank) - 1):
            fwd(0)
        for _ in range(rank):
            fwd(1)
            fwd(0)
        for _ in range(S - rank):
            fwd(1)
            inp(1, True)
        while f[1] < f[0] or f[0] < n:
            if f[0] < n:
                fwd(0)
            inp(0, True)
            fwd(1)
            inp(1, True)
        w = dict(b)
        for _ in range(rank):
            inp(0, False)
            inp(1, False)
        for _ in range(S - rank):
            inp(0, False)
            order.append(_Action(chunk[0], W, w[0]))
            w[0] += 1
        for c in (1, 0):
            while w[c] < b[c]:
                order.append(_Action(chunk[c], W, w[c]))
                w[c] += 1
        return [a if a is not None and a.microbatch_index < M else None for a in order]


class ScheduleDualPipeV(_PipelineScheduleRuntime):
    def _calculate_single_rank_operations(self, rank):
        S, M = self.pp_group_size, self._n_microbatches
        s0, s1 = rank, 2 * S - 1 - rank
        nxt = Counter()            # (stage, 'F' | 'B') -> next microbatch
        weights = deque()          # (stage, microbatch) of I's whose W has not run
        order = []

        def one(stage, kind):
            key = (stage, "F" if kind == F else "B")
            order.append(_Action(stage, kind, nxt[key]))
            if kind == I:
                weights.append((stage, nxt[key]))
            nxt[key] += 1

        def pair(forward_stage, backward_stage):
            subs = (_Action(forward_stage, F, nxt[(forward_stage, "F")]),
                    _Action(backward_stage, B, nxt[(backward_stage, "B")]))
            nxt[(forward_stage, "F")] += 1
            nxt[(backward_stage, "B")] += 1
            order.append(_Action(-1, OVERLAP_F_B, None, subs))

        def weight():
            if weights:
                stage, mb = weights.popleft()
                order.append(_Action(stage, W, mb))

        for _ in range(2 * (S - rank - 1)):
            one(s0, F)
        for _ in range(rank + 1):
            one(s0, F)
            one(s1, F)
        for _ in range(S - rank - 1):
            one(s1, I)
            weight()
            one(s1, F)
        for i in range(M - 2 * S + rank + 1):
            if i == 0 and rank == S - 1:
                one(s0, F)
                one(s1, B)
            else:
                pair(s0, s1)
            pair(s1, s0)
        for _ in range(S - rank - 1):
            one(s1, B)
            pair(s1, s0)
        split = False
        for i in range(rank + 1):
            if i == (rank + 1) // 2 and rank % 2 == 1:
                split = True
            one(s1, I if split else B)
            if i == (rank + 1) // 2 and rank % 2 == 0:
                split = True
            one(s0, I if split else B)
        for _ in range(S - rank - 1):
            weight()
            one(s0, I if split else B)
        for _ in range(rank + 1):
            weight()
        return order


def stage_indices(schedule_class, rank: int, ranks: int, local: int) -> List[int]:
    """The model stages rank `rank` holds: round-robin for the looped schedules, a V for ZBV and
    DualPipeV (rank r: stages r and 2S - 1 - r)."""
    if schedule_class in (ScheduleZBVZeroBubble, ScheduleDualPipeV):
        return [rank, 2 * ranks - 1 - rank]
    return [c * ranks + rank for c in range(local)]


def build(schedule_class, rank: int, ranks: int, microbatches: int, local: int = 1, **options):
    """Rank `rank`'s schedule (and its stages' shared log) as a training script would build it."""
    ran: List[Any] = []
    indices = stage_indices(schedule_class, rank, ranks, local)
    stages = [PipelineStage(i, ranks * len(indices), rank, ranks, ran) for i in indices]
    loss = lambda output, target: 0.0  # noqa: E731
    if issubclass(schedule_class, PipelineScheduleSingle):
        schedule = schedule_class(stages[0], microbatches, loss_fn=loss, **options)
    else:
        schedule = schedule_class(stages, microbatches, loss_fn=loss, **options)
    return schedule, ran
