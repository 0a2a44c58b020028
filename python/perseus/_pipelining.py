"""The hooks of :func:`perseus.torch.instrument_pipelining`: a ``torch.distributed.pipelining``
schedule's actions measured and clocked as perseus instructions.

A schedule runs each rank's actions in the order of ``schedule.pipeline_order_with_comms[rank]``
(the runtime schedules) or its own loop, which ``schedule.pipeline_order[rank]`` describes
(Schedule1F1B, ScheduleGPipe); every compute action ends in one of the stage's methods
(``forward_one_chunk``, ``backward_one_chunk`` with ``full_backward`` True or False,
``backward_weight_one_chunk``), an overlapped pair (``OVERLAP_F_B``) in its sub-actions' methods
one after the other, and an action with a custom function (``register_custom_function``) in that
function. The hooks wrap those methods and functions on this schedule's stages only, and ``step``
as the perseus step, and check every call against the order: internals or an order other than
these (another PyTorch release) turn the hooks off with one warning. Nothing here imports torch:
schedules, stages and actions are used by their attribute names.
"""
from __future__ import annotations

import functools
import inspect
import warnings
from types import TracebackType
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Type

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
    """This rank's compute actions in execution order (idle steps and communication, resharding
    and gradient-reduction actions left out): from the lowered order the runtime schedules execute
    (``pipeline_order_with_comms``), else from ``pipeline_order`` (which describes the loop of
    Schedule1F1B and ScheduleGPipe); None where the schedule has no order for the rank."""
    for attribute in ("pipeline_order_with_comms", "pipeline_order"):
        order = getattr(schedule, attribute, None)
        if isinstance(order, dict) and order.get(rank):
            return [a for a in order[rank] if a is not None and instruction_kind(a.computation_type) is not None]
    return None


def pipe_schedule_of(schedule: Any) -> List[str]:
    """This rank's instruction names, in the order ``schedule`` runs them: what to register as the
    client's ``pipe_schedule``.

    Taken from the schedule's order (``pipeline_order_with_comms``, else ``pipeline_order``; F:
    ``forward``, B: ``backward``, I: ``backward_input``, W: ``backward_weight``, OVERLAP_F_B:
    ``forward_backward``). A single-stage schedule without one (Schedule1F1B and ScheduleGPipe
    before PyTorch gave them one) gets :func:`perseus.default_pipe_schedule`'s ``1f1b`` or
    ``gpipe`` order, which is theirs.

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


# --- what the hooks rely on --------------------------------------------------------------------
# The stage methods the hooks wrap, with the arguments they read by position and name: the
# microbatch, and whether a backward is full (B) or the input half (I).
_STAGE_METHODS = {
    "forward_one_chunk": ("fwd_chunk_id",),
    "backward_one_chunk": ("bwd_chunk_id", "loss", "full_backward"),
    "backward_weight_one_chunk": ("bwd_chunk_id",),
}


def _is_pipelining_schedule(schedule: Any) -> bool:
    return any(cls.__module__.startswith("torch.distributed.pipelining") for cls in type(schedule).__mro__)


def _leading_parameters(method: Any) -> Optional[Tuple[List[str], str]]:
    """The names of a method's leading positional parameters, and its signature as text."""
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):
        return None
    names = [p.name for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names, str(signature)


class _Planned(NamedTuple):
    """A compute action of a single-stage schedule's own loop (what ``_Action`` would say)."""

    stage_index: int
    computation_type: str
    microbatch_index: int
    sub_actions: Optional[Tuple[Any, ...]] = None

    def __repr__(self) -> str:
        return f"{self.stage_index}{self.computation_type}{self.microbatch_index}"


_LETTER = {kind: letter for letter, kind in _KIND_BY_VALUE.items()}


def _expected_actions(schedule: Any, rank: int) -> Optional[List[Any]]:
    """The compute actions the hooks will see on this rank, in order. The runtime schedules run
    their lowered order; Schedule1F1B and ScheduleGPipe run their own loop over their one stage,
    forwards and backwards each in microbatch order, in the order their ``pipeline_order``
    describes (whose microbatch numbers are not the loop's everywhere: PyTorch 2.15 numbers the
    last rank's 1F1B forwards from 1) or perseus's own."""
    order = getattr(schedule, "pipeline_order_with_comms", None)
    if isinstance(order, dict) and order.get(rank):
        return _compute_actions(schedule, rank)
    if getattr(schedule, "_stage", None) is not None and not getattr(schedule, "_stages", None):
        seen: Dict[str, int] = {}
        planned = []
        for kind in pipe_schedule_of(schedule):
            planned.append(_Planned(schedule._stage.stage_index, _LETTER[kind], seen.get(kind, 0)))
            seen[kind] = seen.get(kind, 0) + 1
        return planned
    return _compute_actions(schedule, rank)


def _unrecognised(schedule: Any) -> Optional[str]:
    """What in ``schedule`` is not the way the hooks know PyTorch's pipelining (None: all is),
    checked before anything is wrapped: its stages and step, the stage methods' arguments, and
    its order of compute actions for this rank."""
    try:
        stages = _stages(schedule)
        rank, _ = _rank_and_degree(schedule)
        if not callable(getattr(schedule, "step", None)) or not isinstance(getattr(schedule, "_n_microbatches", None),
                                                                          int):
            return "the schedule has no step() or no _n_microbatches"
        actions = _expected_actions(schedule, rank)
        kinds = {instruction_kind(a.computation_type) for a in actions or ()}
        needed = ["forward_one_chunk", "backward_one_chunk"]
        if "backward_weight" in kinds:
            needed.append("backward_weight_one_chunk")
        for stage in stages:
            for method in needed:
                found = getattr(stage, method, None)
                parameters = _leading_parameters(found) if callable(found) else None
                if parameters is None:
                    return f"its stages have no {method}()"
                if parameters[0][:len(_STAGE_METHODS[method])] != list(_STAGE_METHODS[method]):
                    return (f"{type(stage).__name__}.{method} takes {parameters[1]}, not "
                            f"({', '.join(_STAGE_METHODS[method])}, ...)")
            if not isinstance(getattr(stage, "stage_index", None), int):
                return "its stages have no stage_index"
        if actions is None:  # (a single-stage schedule always has one: its loop's)
            return f"{type(schedule).__name__} has no order of actions for rank {rank}"
        local = {stage.stage_index for stage in stages}
        for action in actions:
            parts = action.sub_actions if instruction_kind(action.computation_type) == "forward_backward" \
                else (action,)
            if not parts:
                return f"its order has an overlapped action without sub-actions ({action!r})"
            for part in parts:
                if instruction_kind(part.computation_type) not in ("forward", "backward", "backward_input",
                                                                  "backward_weight") \
                        or part.stage_index not in local or not isinstance(part.microbatch_index, int):
                    return f"its order for rank {rank} has an action perseus cannot place ({part!r})"
    except Exception as error:  # noqa: BLE001  any shape the hooks do not know
        return f"{type(error).__name__}: {error}"
    return None


def _microbatch(args: Sequence[Any], kwargs: Dict[str, Any], keyword: str) -> Any:
    return args[0] if args else kwargs.get(keyword)


def _describe(stage_index: Any, kind: str, microbatch: Any) -> str:
    return f"{kind} of microbatch {microbatch} on stage {stage_index}"


def _part(action: Any) -> Tuple[Any, Optional[str], Any]:
    return action.stage_index, instruction_kind(action.computation_type), action.microbatch_index


class _Hooks:
    """The state the wrapped methods share: where this rank is in its order within a step."""

    def __init__(self, client: Any, expected: Optional[List[Any]], schedule_name: str) -> None:
        self.client = client
        self.expected = expected  # None: an order perseus could not read (the call is the truth)
        self.schedule_name = schedule_name
        self.active = False       # a training step runs
        self.cursor = 0           # the next expected compute action
        self.pair: List[Any] = []  # sub-actions of an overlapped pair still to run
        self.inside_custom = False
        self.broken = False       # perseus stands aside, training goes on

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
            self.stand_aside(f"{what} failed ({type(error).__name__}: {error})")

    def stand_aside(self, why: str) -> None:
        """One warning; the hooks do nothing more, and the client closes (its GPU back at default
        clocks; the server hears this rank left, so its peers do not wait for it)."""
        if self.broken:
            return
        self.broken = True
        warnings.warn(f"perseus: {why}; the pipelining hooks stand aside for the rest of the run, training goes on",
                      RuntimeWarning, stacklevel=4)
        try:
            self.client.close(False)
        except Exception:  # noqa: BLE001  a client that cannot close is no reason to stop training
            pass

    def begin(self, name: str) -> None:
        self._call("on_instruction_begin", name)

    def end(self, name: str) -> None:
        self._call("on_instruction_end", name)

    # --- matching a stage method call with the order ----------------------------------------
    def _match(self, call: Tuple[Any, str, Any]) -> Optional[str]:
        """The instruction a stage method call starts, from the next action of the order; None
        (and the hooks stand aside) when the call is not that action."""
        if self.expected is None:
            return call[1]
        if self.cursor >= len(self.expected):
            self.stand_aside(f"{self.schedule_name} ran {_describe(*call)} after the {len(self.expected)} compute "
                             "actions of its order")
            return None
        action = self.expected[self.cursor]
        if instruction_kind(action.computation_type) == "forward_backward":
            if _part(action.sub_actions[0]) == call:
                self.pair = list(action.sub_actions[1:])
                return "forward_backward"
        elif _part(action) == call:
            return call[1]
        self.stand_aside(f"{self.schedule_name} ran {_describe(*call)} where its order has {action!r} (compute action "
                         f"{self.cursor + 1}): not the order perseus registered")
        return None

    def run_stage_method(self, function: Callable[..., Any], stage: Any, kind: str, microbatch: Any,
                         args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
        if not self.active or self.inside_custom or self.broken:
            return function(*args, **kwargs)
        call = (getattr(stage, "stage_index", None), kind, microbatch)
        if self.pair:  # a later part of an overlapped pair
            part = self.pair.pop(0)
            if _part(part) != call:
                self.stand_aside(f"{self.schedule_name} ran {_describe(*call)} inside an overlapped pair whose next "
                                 f"part is {part!r}")
                return function(*args, **kwargs)
            try:
                return function(*args, **kwargs)
            finally:
                if not self.pair:
                    self.end("forward_backward")
        name = self._match(call)
        if name is None:
            return function(*args, **kwargs)
        self.cursor += 1
        self.begin(name)
        try:
            return function(*args, **kwargs)
        finally:
            if name != "forward_backward" or not self.pair:
                self.end(name)

    def run_custom(self, function: Callable[..., Any], action: Any, ctx: Any) -> Any:
        kind = instruction_kind(getattr(action, "computation_type", None))
        if not self.active or self.inside_custom or kind is None or self.broken:
            return function(action, ctx)
        if self.expected is not None and (self.cursor >= len(self.expected) or self.expected[self.cursor] != action):
            at = repr(self.expected[self.cursor]) if self.cursor < len(self.expected) else "nothing more"
            self.stand_aside(f"{self.schedule_name} ran {action!r} through a custom function where its order has {at}")
            return function(action, ctx)
        self.cursor += 1
        self.begin(kind)
        self.inside_custom = True  # stage methods it calls are part of this one instruction
        try:
            return function(action, ctx)
        finally:
            self.inside_custom = False
            self.end(kind)

    def step_done(self) -> None:
        """At a step's end: every compute action of the order ran through the hooks."""
        if self.broken or self.expected is None:
            return
        if self.cursor != len(self.expected) or self.pair:
            self.stand_aside(f"{self.schedule_name} ran {self.cursor} of the {len(self.expected)} compute actions of its "
                             "order through the methods perseus hooks")


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
        if hooks.active or hooks.broken or not getattr(schedule, "_has_backward", True):
            return original(*args, **kwargs)
        hooks._call("on_step_begin")
        hooks.active, hooks.cursor, hooks.pair, hooks.inside_custom = True, 0, [], False
        try:
            result = original(*args, **kwargs)
        finally:
            hooks.active = False
        hooks.step_done()
        hooks._call("on_step_end")  # may raise perseus.ProfilingDone: training should stop
        return result

    attachment.replace(schedule, "step", step)


class Pipelining:
    """What :func:`instrument_pipelining` returns: the client and the order it registered.

    ``with`` it around training, or call :meth:`close` at the end, to put the schedule back and
    close the client (which resets the GPU's clocks).
    """

    def __init__(self, client: Any, pipe_schedule: List[str], perseus_schedule: Optional[Tuple[str, int]],
                 attachment: Attachment, unwrap: Callable[[], None], hooks: Optional[_Hooks]) -> None:
        #: This rank's perseus client.
        self.client = client
        #: This rank's instruction names in the order the schedule runs them.
        self.pipe_schedule = pipe_schedule
        #: The perseus schedule (name, virtual stages) of the same order, or None.
        self.perseus_schedule = perseus_schedule
        self._attachment = attachment
        self._unwrap = unwrap
        self._hooks = hooks

    @property
    def enabled(self) -> bool:
        """Whether the hooks measure and clock: False when PyTorch's internals were not the way
        perseus knows them, after a hook stood aside, and after :meth:`detach`."""
        return self._hooks is not None and not self._hooks.broken

    def detach(self) -> None:
        """Puts the schedule's ``step``, its stages' methods and its custom functions back."""
        self._attachment.detach()
        self._unwrap()
        self._hooks = None

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
    if not _is_pipelining_schedule(schedule):
        _stages(schedule)  # raises the TypeError that says what is not a schedule
    if client is not None and client_options:
        raise TypeError(f"perseus: client options ({', '.join(sorted(client_options))}) given with a client")
    unknown = _unrecognised(schedule)
    if unknown is not None:
        return _without_hooks(schedule, client, client_factory, client_options, unknown)
    rank, degree = _rank_and_degree(schedule)
    expected = _expected_actions(schedule, rank)
    known = perseus_schedule_of(schedule)
    order = pipe_schedule_of(schedule)
    if client is None:
        if client_factory is None:
            raise TypeError("perseus: instrument_pipelining needs a client or a client factory")
        options = {"pp_rank": rank, "pp_degree": degree, "num_microbatches": int(schedule._n_microbatches),
                   "pipe_schedule": order}
        options.update(client_options)
        client = client_factory(**options)
    else:
        registered = list(client.pipe_schedule)
        if getattr(client, "enabled", True) and registered != order:
            at = next((i for i, (a, b) in enumerate(zip(registered, order)) if a != b), min(len(registered), len(order)))
            warnings.warn(f"perseus: the client's pipe_schedule is not the order {type(schedule).__name__} runs on "
                          f"rank {rank} (first difference at instruction {at}: "
                          f"{registered[at] if at < len(registered) else 'nothing'} registered, "
                          f"{order[at] if at < len(order) else 'nothing'} run); its clocks would land on the wrong "
                          "instructions: pass pipe_schedule=perseus.torch.pipe_schedule_of(schedule)", stacklevel=3)
    hooks = _Hooks(client, expected, type(schedule).__name__)
    attachment = Attachment()
    for stage in _stages(schedule):
        _wrap_stage(attachment, stage, hooks)
    unwrap = _wrap_custom_functions(attachment, schedule, hooks)
    _wrap_step(attachment, schedule, hooks)
    return Pipelining(client, order, known, attachment, unwrap, hooks)


def _without_hooks(schedule: Any, client: Optional[Any], client_factory: Optional[Callable[..., Any]],
                   client_options: Dict[str, Any], why: str) -> Pipelining:
    """PyTorch's pipelining is not what the hooks know: one warning, nothing wrapped. The client is
    still made (so that every rank takes part in the job-id broadcast, whatever the others found)
    and closed at once: its GPU stays at default clocks and the server hears the rank left."""
    try:
        import torch

        version = f"PyTorch {torch.__version__}"
    except ImportError:  # a schedule without torch: a stand-in
        version = "this PyTorch"
    warnings.warn(f"perseus: {version}'s torch.distributed.pipelining is not the way perseus knows it ({why}); the "
                  f"pipelining hooks are off and {type(schedule).__name__} trains without perseus", RuntimeWarning,
                  stacklevel=3)
    if client is None:
        if client_factory is None:
            raise TypeError("perseus: instrument_pipelining needs a client or a client factory")
        options: Dict[str, Any] = {"pipe_schedule": []}
        try:
            rank, degree = _rank_and_degree(schedule)
            options.update(pp_rank=rank, pp_degree=degree, num_microbatches=int(schedule._n_microbatches))
        except Exception:  # noqa: BLE001  the shape is what is not known
            pass
        options.update(client_options)
        client = client_factory(**options)
    try:
        client.close(False)
    except Exception:  # noqa: BLE001  fail-open: training goes on without it
        pass
    return Pipelining(client, [], None, Attachment(), lambda: None, None)
