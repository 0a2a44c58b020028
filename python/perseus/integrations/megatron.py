"""Megatron-LM: measure and clock the forward and backward steps of its pipeline schedules. ::

    from megatron.core.pipeline_parallel import schedules
    client = perseus.torch.Client(pp_rank=mpu.get_pipeline_model_parallel_rank(),
                                  pp_degree=mpu.get_pipeline_model_parallel_world_size(),
                                  num_microbatches=get_num_microbatches(), ...)
    perseus.integrations.megatron.attach(client)   # before training starts

Megatron's schedules (``forward_backward_no_pipelining``,
``forward_backward_pipelining_without_interleaving``,
``forward_backward_pipelining_with_interleaving``) run your ``forward_step_func`` through the
module's ``forward_step`` and the gradients through its ``backward_step``, looked up by name at
call time: ``attach`` replaces that pair with measured versions and makes each call of a schedule
function one perseus step. Calls with ``forward_only=True`` (evaluation) are not measured. The
optimizer step runs outside the schedule, so it is outside the measured iteration.
Megatron's non-interleaved 1F1B runs the same order as ``perseus.default_pipe_schedule``; with
virtual pipeline stages, give the client
``pipe_schedule=perseus.default_pipe_schedule(rank, pp, microbatches, "interleaved", virtual_stages)``.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import perseus

from ._hooks import Attachment, StepTracker, wrap_instruction, wrap_step

__all__ = ["attach", "SCHEDULE_FUNCTIONS"]

#: The schedule functions ``get_forward_backward_func`` chooses from; each call is one step.
SCHEDULE_FUNCTIONS = (
    "forward_backward_no_pipelining",
    "forward_backward_pipelining_without_interleaving",
    "forward_backward_pipelining_with_interleaving",
)


def attach(client: perseus.Client, schedules: Optional[Any] = None) -> Attachment:
    """Hooks ``client`` into Megatron-LM's pipeline schedules.

    Args:
        client: this rank's client.
        schedules: the schedules module; default ``megatron.core.pipeline_parallel.schedules``.

    Returns:
        An :class:`~perseus.integrations._hooks.Attachment`; ``detach()`` restores the module.

    Raises:
        TypeError: the module lacks ``forward_step``, ``backward_step`` or every schedule function.
    """
    if schedules is None:
        from megatron.core.pipeline_parallel import schedules as megatron_schedules  # type: ignore[import-untyped]

        schedules = megatron_schedules
    present = [name for name in SCHEDULE_FUNCTIONS if callable(getattr(schedules, name, None))]
    if not callable(getattr(schedules, "forward_step", None)) or \
            not callable(getattr(schedules, "backward_step", None)) or not present:
        raise TypeError(f"perseus: {getattr(schedules, '__name__', schedules)!r} is not Megatron-LM's schedules "
                        "module (it needs forward_step, backward_step and a forward_backward_* function)")

    tracker = StepTracker()
    attachment = Attachment()
    attachment.replace(schedules, "forward_step", wrap_instruction(schedules.forward_step, client, "forward", tracker))
    attachment.replace(schedules, "backward_step",
                       wrap_instruction(schedules.backward_step, client, "backward", tracker))
    for name in present:
        attachment.replace(schedules, name, _training_only(getattr(schedules, name), client, tracker))
    return attachment


def _training_only(function: Callable[..., Any], client: perseus.Client,
                   tracker: StepTracker) -> Callable[..., Any]:
    """A schedule function that is one perseus step, unless it only runs forwards (evaluation)."""
    as_step = wrap_step(function, client, tracker)

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs) if kwargs.get("forward_only", False) else as_step(*args, **kwargs)

    return run
