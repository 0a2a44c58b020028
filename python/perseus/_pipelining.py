"""The hooks of :func:`perseus.torch.instrument_pipelining`: a ``torch.distributed.pipelining``
schedule's actions measured and clocked as perseus instructions.

A schedule runs each rank's actions in the order of ``schedule.pipeline_order[rank]``; every
compute action ends in one of the stage's methods (``forward_one_chunk``, ``backward_one_chunk``
with ``full_backward`` True or False, ``backward_weight_one_chunk``), an overlapped pair
(``OVERLAP_F_B``) in its sub-actions' methods one after the other, and an action with a custom
function (``register_custom_function``) in that function. The hooks wrap those methods and
functions on this schedule's stages only, and ``step`` as the perseus step. Nothing here imports
torch: schedules, stages and actions are used by their attribute names.
"""
from __future__ import annotations

import functools
import warnings
from types import TracebackType
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type

import perseus

from .integrations._hooks import Attachment

__all__ = ["Pipelining", "instrument_pipelining", "pipe_schedule_of", "perseus_schedule_of"]

# A computation type's instruction, by the enum member's name and by its short value.
_KIND_BY_NAME = {
    "FORWARD": "forward",
    "FULL_BACKWARD": "backward",
    "BACKWARD_INPUT": "backward_input",
    "BACKWARD_WEIGHT": "backward_weight",
    "OVERLAP_F_B": "forward_backward",
}
_KIND_BY_VALUE = {"F": "forward", "B": "backward", "I": "backward_input", "W": "backward_weight",
                  "OVERLAP_F_B": "forward_backward"}

# Signals perseus gives on purpose; every other exception a hook raises is swallowed.
_PASSED_THROUGH: Tuple[Type[BaseException], ...] = (perseus.ProfilingDone, perseus.ScheduleMismatch)


def instruction_kind(computation_type: Any) -> Optional[str]:
    """The perseus instruction of a ``_ComputationType`` (None for communication, resharding,
    gradient reduction)."""
    name = getattr(computation_type, "name", None)
    if isinstance(name, str) and name in _KIND_BY_NAME:
        return _KIND_BY_NAME[name]
    value = getattr(computation_type, "value", computation_type)
    return _KIND_BY_VALUE.get(value) if isinstance(value, str) else None


def _stages(schedule: Any) -> List[Any]:
    stages = getattr(schedule, "_stages", None)
    if stages is None and getattr(schedule, "_stage", None) is not None:
        stages = [schedule._stage]
    if not stages:
        raise TypeError(f"perseus: {type(schedule).__name__} is not a torch.distributed.pipelining schedule "
                        "(it has neither _stage nor _stages)")
    return list(stages)


def _rank_and_degree(schedule: Any) -> Tuple[int, int]:
    """This process's pipeline rank and the number of pipeline ranks."""
    stage = _stages(schedule)[0]
    rank = getattr(schedule, "rank", None)
    if rank is None:
        rank = stage.group_rank
    degree = getattr(schedule, "pp_group_size", None)
    if degree is None:
        degree = stage.group_size
    return int(rank), int(degree)


def _class_names(schedule: Any) -> List[str]:
    return [cls.__name__ for cls in type(schedule).__mro__]


def perseus_schedule_of(schedule: Any) -> Optional[Tuple[str, int]]:
    """The perseus schedule (name, virtual stages) whose order ``default_pipe_schedule`` gives for
    this PyTorch schedule, or None where perseus has none.

    Schedule1F1B: ``1f1b``; ScheduleGPipe: ``gpipe``; ScheduleInterleaved1F1B with microbatches a
    multiple of the ranks: ``interleaved`` with one virtual stage per local stage;
    ScheduleInterleavedZeroBubble with one stage per rank: ``zb-h1``; ScheduleZBVZeroBubble:
    ``zbv``; ScheduleDualPipeV: ``dualpipev``.
    """
    names = _class_names(schedule)
    local = len(_stages(schedule))
    _, degree = _rank_and_degree(schedule)
    microbatches = int(schedule._n_microbatches)
    if "Schedule1F1B" in names:
        return "1f1b", 1
    if "ScheduleGPipe" in names:
        return "gpipe", 1
    if "ScheduleInterleaved1F1B" in names:
        return ("interleaved", local) if local >= 2 and microbatches % degree == 0 else None
    if "ScheduleInterleavedZeroBubble" in names:
        return ("zb-h1", 1) if local == 1 else None
    if "ScheduleZBVZeroBubble" in names:
        return "zbv", 2
    if "ScheduleDualPipeV" in names:
        return "dualpipev", 2
    return None


def _compute_actions(schedule: Any, rank: int) -> Optional[List[Any]]:
    """This rank's compute actions in execution order, from the schedule's ``pipeline_order``
    (idle steps and communication, resharding and gradient-reduction actions left out); None
    where the schedule has no order for the rank."""
    for attribute in ("pipeline_order", "pipeline_order_with_comms"):
        order = getattr(schedule, attribute, None)
        if isinstance(order, dict) and order.get(rank):
            return [a for a in order[rank] if a is not None and instruction_kind(a.computation_type) is not None]
    return None


def pipe_schedule_of(schedule: Any) -> List[str]:
    """This rank's instruction names, in the order ``schedule`` runs them: what to register as the
    client's ``pipe_schedule``.

    Taken from ``schedule.pipeline_order`` (F: ``forward``, B: ``backward``, I:
    ``backward_input``, W: ``backward_weight``, OVERLAP_F_B: ``forward_backward``). A
    single-stage schedule without one (Schedule1F1B and ScheduleGPipe before PyTorch gave them
    one) gets :func:`perseus.default_pipe_schedule`'s ``1f1b`` or ``gpipe`` order, which is theirs.

    Raises:
        TypeError: ``schedule`` is not a pipelining schedule, or has no order perseus can know.
    """
    rank, degree = _rank_and_degree(schedule)
    actions = _compute_actions(schedule, rank)
    if actions is not None:
        return [str(instruction_kind(a.computation_type)) for a in actions]
    known = perseus_schedule_of(schedule)
    if known is not None and known[0] in ("1f1b", "gpipe"):
        return list(perseus.default_pipe_schedule(rank, degree, int(schedule._n_microbatches), known[0]))
    raise TypeError(f"perseus: {type(schedule).__name__} has no pipeline_order for rank {rank}; pass a client "
                    "whose pipe_schedule is the order this rank runs")


def _microbatch(args: Sequence[Any], kwargs: Dict[str, Any], keyword: str) -> Any:
    return args[0] if args else kwargs.get(keyword)


class _Hooks:
    """The state the wrapped methods share: where this rank is in its order within a step."""

    def __init__(self, client: Any, expected: Optional[List[Any]]) -> None:
        self.client = client
        self.expected = expected or []
        self.active = False       # a training step runs
        self.cursor = 0           # the next expected compute action
        self.pair_left = 0        # sub-actions of an overlapped pair still to run
        self.inside_custom = False
        self.broken = False       # a hook failed: perseus stands aside, training goes on

    # --- calls into the client, fail-open -------------------------------------------------
    def _call(self, what: str, *args: Any) -> None:
        if self.broken:
            return
        try:
            synchronize = getattr(self.client, "synchronize", None)
            if what != "on_step_begin" and what != "on_step_end" and synchronize is not None:
                synchronize()
            getattr(self.client, what)(*args)
        except _PASSED_THROUGH:
            raise
        except Exception as error:  # noqa: BLE001  whatever perseus does wrong, training goes on
            self.broken = True
            warnings.warn(f"perseus: {what} failed ({type(error).__name__}: {error}); the pipelining hooks stand "
                          "aside for the rest of the run, training goes on", RuntimeWarning, stacklevel=2)

    def begin(self, name: str) -> None:
        self._call("on_instruction_begin", name)

    def end(self, name: str) -> None:
        self._call("on_instruction_end", name)

    # --- matching a stage method call with the order ----------------------------------------
    def _starts_pair(self, stage_index: Any, kind: str, microbatch: Any) -> int:
        """Sub-actions of the overlapped pair this call starts (0: it starts none)."""
        try:
            if self.cursor >= len(self.expected):
                return 0
            action = self.expected[self.cursor]
            if instruction_kind(action.computation_type) != "forward_backward" or not action.sub_actions:
                return 0
            first = action.sub_actions[0]
            if (first.stage_index, instruction_kind(first.computation_type), first.microbatch_index) != \
                    (stage_index, kind, microbatch):
                return 0
            return len(action.sub_actions)
        except Exception:  # noqa: BLE001  an action of another shape: measure the call as it is
            return 0

    def run_stage_method(self, function: Callable[..., Any], stage: Any, kind: str, microbatch: Any,
                         args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
        if not self.active or self.inside_custom:
            return function(*args, **kwargs)
        if self.pair_left > 0:  # a later part of an overlapped pair
            self.pair_left -= 1
            try:
                return function(*args, **kwargs)
            finally:
                if self.pair_left == 0:
                    self.end("forward_backward")
        parts = self._starts_pair(getattr(stage, "stage_index", None), kind, microbatch)
        self.cursor += 1
        if parts > 0:
            self.begin("forward_backward")
            self.pair_left = parts - 1
            try:
                return function(*args, **kwargs)
            finally:
                if self.pair_left == 0:
                    self.end("forward_backward")
        self.begin(kind)
        try:
            return function(*args, **kwargs)
        finally:
            self.end(kind)

    def run_custom(self, function: Callable[..., Any], action: Any, ctx: Any) -> Any:
        kind = instruction_kind(getattr(action, "computation_type", None))
        if not self.active or self.inside_custom or kind is None:
            return function(action, ctx)
        self.cursor += 1
        self.begin(kind)
        self.inside_custom = True  # stage methods it calls are part of this one instruction
        try:
            return function(action, ctx)
        finally:
            self.inside_custom = False
            self.end(kind)


def _wrap_stage(attachment: Attachment, stage: Any, hooks: _Hooks) -> None:
    def wrap(method: str, keyword: str, kind_of: Callable[[Sequence[Any], Dict[str, Any]], str]) -> None:
        original = getattr(stage, method)

        @functools.wraps(original)
        def measured(*args: Any, **kwargs: Any) -> Any:
            return hooks.run_stage_method(original, stage, kind_of(args, kwargs), _microbatch(args, kwargs, keyword),
                                          args, kwargs)

        attachment.replace(stage, method, measured)

    def backward_kind(args: Sequence[Any], kwargs: Dict[str, Any]) -> str:
        full = kwargs.get("full_backward", args[2] if len(args) > 2 else True)
        return "backward" if full else "backward_input"

    wrap("forward_one_chunk", "fwd_chunk_id", lambda args, kwargs: "forward")
    wrap("backward_one_chunk", "bwd_chunk_id", backward_kind)
    if callable(getattr(stage, "backward_weight_one_chunk", None)):
        wrap("backward_weight_one_chunk", "bwd_chunk_id", lambda args, kwargs: "backward_weight")


def _wrap_custom_functions(attachment: Attachment, schedule: Any, hooks: _Hooks) -> Callable[[], None]:
    """Actions the runtime hands to a registered custom function: the ones registered now and
    the ones ``register_custom_function`` registers later. Returns what unwraps them again (the
    map itself stays the schedule's, so later registrations survive a detach)."""
    found = getattr(schedule, "_comp_type_to_function_map", None)
    if not isinstance(found, dict):
        return lambda: None
    functions: Dict[Any, Callable[..., Any]] = found

    def measured(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def run(action: Any, ctx: Any) -> Any:
            return hooks.run_custom(function, action, ctx)

        setattr(run, "_perseus_original", function)
        return run

    for kind, function in list(functions.items()):
        if instruction_kind(kind) is not None:
            functions[kind] = measured(function)
    register_found = getattr(schedule, "register_custom_function", None)
    if callable(register_found):
        register: Callable[..., Any] = register_found

        @functools.wraps(register)
        def register_measured(computation_type: Any, custom_function: Callable[..., Any]) -> Any:
            if instruction_kind(computation_type) is not None:
                custom_function = measured(custom_function)
            return register(computation_type, custom_function)

        attachment.replace(schedule, "register_custom_function", register_measured)

    def unwrap() -> None:
        for kind, function in list(functions.items()):
            functions[kind] = getattr(function, "_perseus_original", function)

    return unwrap


def _wrap_step(attachment: Attachment, schedule: Any, hooks: _Hooks) -> None:
    original = schedule.step

    @functools.wraps(original)
    def step(*args: Any, **kwargs: Any) -> Any:
        # eval() runs step() with _has_backward off: forwards only, not an iteration of the order.
        if hooks.active or not getattr(schedule, "_has_backward", True):
            return original(*args, **kwargs)
        hooks._call("on_step_begin")
        hooks.active, hooks.cursor, hooks.pair_left, hooks.inside_custom = True, 0, 0, False
        try:
            result = original(*args, **kwargs)
        finally:
            hooks.active = False
        hooks._call("on_step_end")  # may raise perseus.ProfilingDone: training should stop
        return result

    attachment.replace(schedule, "step", step)


class Pipelining:
    """What :func:`instrument_pipelining` returns: the client and the order it registered.

    ``with`` it around training, or call :meth:`close` at the end, to put the schedule back and
    close the client (which resets the GPU's clocks).
    """

    def __init__(self, client: Any, pipe_schedule: List[str], perseus_schedule: Optional[Tuple[str, int]],
                 attachment: Attachment, unwrap: Callable[[], None]) -> None:
        #: This rank's perseus client.
        self.client = client
        #: This rank's instruction names in the order the schedule runs them.
        self.pipe_schedule = pipe_schedule
        #: The perseus schedule (name, virtual stages) of the same order, or None.
        self.perseus_schedule = perseus_schedule
        self._attachment = attachment
        self._unwrap = unwrap

    def detach(self) -> None:
        """Puts the schedule's ``step``, its stages' methods and its custom functions back."""
        self._attachment.detach()
        self._unwrap()

    def close(self, finished: bool = True) -> None:
        """:meth:`detach`, then closes the client (``finished=False``: training stopped by an error)."""
        self.detach()
        self.client.close(finished)

    def __enter__(self) -> "Pipelining":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        self.close(finished=exc_type is None)


def instrument_pipelining(schedule: Any, client: Optional[Any] = None,
                          client_factory: Optional[Callable[..., Any]] = None, **client_options: Any) -> Pipelining:
    """See :func:`perseus.torch.instrument_pipelining` (which passes perseus.torch.Client as the factory)."""
    rank, degree = _rank_and_degree(schedule)
    expected = _compute_actions(schedule, rank)
    known = perseus_schedule_of(schedule)
    if client is None:
        order = pipe_schedule_of(schedule)
        if client_factory is None:
            raise TypeError("perseus: instrument_pipelining needs a client or a client factory")
        options = {"pp_rank": rank, "pp_degree": degree, "num_microbatches": int(schedule._n_microbatches),
                   "pipe_schedule": order}
        options.update(client_options)
        client = client_factory(**options)
    else:
        if client_options:
            raise TypeError(f"perseus: client options ({', '.join(sorted(client_options))}) given with a client")
        try:
            order = pipe_schedule_of(schedule)
        except TypeError:
            order = list(client.pipe_schedule)  # the schedule has no order: the client's is taken as it
        registered = list(client.pipe_schedule)
        if getattr(client, "enabled", True) and registered != order:
            at = next((i for i, (a, b) in enumerate(zip(registered, order)) if a != b), min(len(registered), len(order)))
            warnings.warn(f"perseus: the client's pipe_schedule is not the order {type(schedule).__name__} runs on "
                          f"rank {rank} (first difference at instruction {at}: "
                          f"{registered[at] if at < len(registered) else 'nothing'} registered, "
                          f"{order[at] if at < len(order) else 'nothing'} run); its clocks would land on the wrong "
                          "instructions: pass pipe_schedule=perseus.torch.pipe_schedule_of(schedule)", stacklevel=3)
    hooks = _Hooks(client, expected)
    attachment = Attachment()
    for stage in _stages(schedule):
        _wrap_stage(attachment, stage, hooks)
    unwrap = _wrap_custom_functions(attachment, schedule, hooks)
    _wrap_step(attachment, schedule, hooks)
    return Pipelining(client, order, known, attachment, unwrap)
