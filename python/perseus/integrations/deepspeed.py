"""DeepSpeed: measure and clock a ``PipelineEngine``'s forwards and backwards. ::

    engine, *_ = deepspeed.initialize(model=pipeline_module, ...)
    client = perseus.torch.Client(pp_rank=engine.stage_id, pp_degree=engine.num_stages,
                                  num_microbatches=engine.micro_batches, ...)
    perseus.integrations.deepspeed.attach(engine, client)
    for _ in range(steps):
        engine.train_batch()   # one perseus step; every ForwardPass / BackwardPass an instruction

It wraps the engine's ``_exec_forward_pass`` and ``_exec_backward_pass`` (where the Zeus docs put
the hooks) — both as instance methods and in the engine's ``_INSTRUCTION_MAP``, through which
``_exec_schedule`` dispatches — and ``train_batch`` as the step. ``eval_batch`` forwards are not
measured. DeepSpeed is not imported; the engine is used by its method names.
"""
from __future__ import annotations

import types
import warnings
from typing import Any

import perseus

from ._hooks import Attachment, StepTracker, wrap_instruction, wrap_step

__all__ = ["attach"]

_WRAPPED = {"_exec_forward_pass": "forward", "_exec_backward_pass": "backward"}


def attach(engine: Any, client: perseus.Client) -> Attachment:
    """Hooks ``client`` into ``engine`` (a DeepSpeed ``PipelineEngine``).

    Args:
        engine: the pipeline engine ``deepspeed.initialize`` returned.
        client: this rank's client; its pipe schedule must be the engine's (the default 1F1B
            schedule with ``num_microbatches=engine.micro_batches`` is DeepSpeed's TrainSchedule).

    Returns:
        An :class:`~perseus.integrations._hooks.Attachment`; ``detach()`` restores the engine.

    Raises:
        TypeError: ``engine`` lacks ``train_batch``, ``_exec_forward_pass`` or ``_exec_backward_pass``.
    """
    cls = type(engine)
    missing = [name for name in ("train_batch", *_WRAPPED) if not callable(getattr(cls, name, None))]
    if missing:
        raise TypeError(f"perseus: {cls.__name__} is not a DeepSpeed PipelineEngine (no {', '.join(missing)})")
    _check_microbatches(engine, client)

    tracker = StepTracker()
    attachment = Attachment()
    replaced = {}
    for method, name in _WRAPPED.items():
        original = getattr(cls, method)
        replaced[original] = wrap_instruction(original, client, name, tracker)
        attachment.replace(engine, method, types.MethodType(replaced[original], engine))
    instruction_map = getattr(cls, "_INSTRUCTION_MAP", None)
    if isinstance(instruction_map, dict):
        attachment.replace(engine, "_INSTRUCTION_MAP",
                           {kind: replaced.get(function, function) for kind, function in instruction_map.items()})
    attachment.replace(engine, "train_batch", types.MethodType(wrap_step(cls.train_batch, client, tracker), engine))
    return attachment


def _check_microbatches(engine: Any, client: perseus.Client) -> None:
    """Warns when the client's schedule cannot be the engine's (a plan would hit the wrong
    instructions)."""
    micro_batches = getattr(engine, "micro_batches", None)
    forwards = sum(1 for name in client.pipe_schedule if name == "forward")
    if client.enabled and isinstance(micro_batches, int) and forwards != micro_batches:
        warnings.warn(f"perseus: the client's pipe schedule has {forwards} forwards per iteration but the engine "
                      f"runs {micro_batches} microbatches; pass num_microbatches=engine.micro_batches", stacklevel=3)
