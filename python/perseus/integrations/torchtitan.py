"""torchtitan: perseus on the ``torch.distributed.pipelining`` schedule torchtitan builds for a job.

torchtitan builds its pipeline schedule from the job's configuration
(``parallelism.pipeline_parallel_schedule`` and the microbatch size) in
``torchtitan.distributed.pipeline_parallel._build_pipeline_schedule``. Once perseus is on, every
schedule built there is hooked with :func:`perseus.torch.instrument_pipelining` — each compute
action measured and clocked, each ``schedule.step`` one perseus step — and its client closes when
the process exits. Turn it on from the job's configuration, through torchtitan's overrides:

- on the command line::

      --override.imports 'perseus.integrations.torchtitan.perseus={"server_url": "http://perseus-host:7787"}'

- or in a ``config_registry`` function::

      config.override.imports.append(
          ("perseus.integrations.torchtitan.perseus", {"server_url": "http://perseus-host:7787"}))

  (the entry's keyword arguments are the client's: ``server_url``, ``model_name``, ``token``, ...);

- or with one call before the trainer is built::

      perseus.integrations.torchtitan.enable(server_url="http://perseus-host:7787")

The job's shape comes from torchtitan: the pipeline rank, ranks and microbatches from the schedule;
the ranks of one pipeline stage that compute in lockstep (tensor and context parallelism, the
innermost dimensions of torchtitan's device mesh) are perseus's tensor-parallel ranks, the rest of
the world perseus's data-parallel pipelines. Anything passed explicitly (``dp_rank``, ...) wins.
"""
from __future__ import annotations

import atexit
import functools
import warnings
from typing import Any, Callable, Dict, List, Optional

from perseus.torch import Pipelining, instrument_pipelining

from ._hooks import Attachment

__all__ = ["enable", "disable", "instrumented", "perseus"]

_state: Dict[str, Any] = {"attachment": None, "options": {}, "handles": []}


def _shape(parallelism: Any, options: Dict[str, Any]) -> Dict[str, Any]:
    """The data- and tensor-parallel ranks of this process (see the module's documentation)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return {}
    world, rank = dist.get_world_size(), dist.get_rank()
    pp = max(1, int(getattr(parallelism, "pipeline_parallel_degree", 1)))
    lockstep = max(1, int(getattr(parallelism, "tensor_parallel_degree", 1))) * \
        max(1, int(getattr(parallelism, "context_parallel_degree", 1)))
    if world % (pp * lockstep) != 0:
        return {}
    dp = world // (pp * lockstep)
    shape = {"tp_degree": lockstep, "tp_rank": rank % lockstep, "dp_degree": dp, "dp_rank": (rank // lockstep) % dp}
    return {key: value for key, value in shape.items() if key not in options}


def enable(**client_options: Any) -> None:
    """Hooks every pipeline schedule torchtitan builds from now on.

    Args:
        **client_options: arguments of each schedule's :class:`perseus.torch.Client`
            (``server_url``, ``model_name``, ...); the job's shape comes from torchtitan.

    Without torchtitan's schedule builder (another torchtitan release) it warns once and leaves
    training alone.
    """
    _state["options"] = dict(client_options)
    if _state["attachment"] is not None:
        return
    try:
        from torchtitan.distributed import pipeline_parallel  # type: ignore[import-untyped]
    except ImportError as error:
        warnings.warn(f"perseus: torchtitan's pipeline builder cannot be imported ({error}); perseus stays off",
                      RuntimeWarning, stacklevel=2)
        return
    build = getattr(pipeline_parallel, "_build_pipeline_schedule", None)
    if not callable(build):
        warnings.warn("perseus: this torchtitan has no torchtitan.distributed.pipeline_parallel."
                      "_build_pipeline_schedule; perseus stays off", RuntimeWarning, stacklevel=2)
        return
    attachment = Attachment()
    attachment.replace(pipeline_parallel, "_build_pipeline_schedule", _hooked(build))
    _state["attachment"] = attachment


def _hooked(build: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(build)
    def build_and_hook(*args: Any, **kwargs: Any) -> Any:
        schedule = build(*args, **kwargs)
        options = dict(_state["options"])
        options.update(_shape(kwargs.get("parallelism"), options))
        handle = instrument_pipelining(schedule, **options)
        _state["handles"].append(handle)
        return schedule

    return build_and_hook


def disable() -> None:
    """Puts torchtitan's schedule builder back and closes the clients of the schedules it hooked."""
    attachment = _state["attachment"]
    if attachment is not None:
        attachment.detach()
        _state["attachment"] = None
    _close_all()


def instrumented() -> List[Pipelining]:
    """The handles of the schedules hooked so far (:class:`perseus.torch.Pipelining`)."""
    return list(_state["handles"])


@atexit.register
def _close_all() -> None:
    while _state["handles"]:
        _state["handles"].pop().close()


def _register_override() -> Optional[Callable[..., Any]]:
    """``perseus`` as a torchtitan override (``--override.imports``), where torchtitan has them."""
    try:
        from torchtitan.config import override  # type: ignore[import-untyped]
        from torchtitan.tools.profiler import Profiler  # type: ignore[import-untyped]
    except ImportError:
        return None

    def perseus(config: Any, **client_options: Any) -> Any:
        """torchtitan calls this once at start-up with the override entry's keyword arguments; it
        turns perseus on (:func:`enable`) and leaves the configuration as it is (the profiler's
        configuration is only where torchtitan's overrides attach)."""
        enable(**client_options)
        return config

    register: Callable[[Callable[..., Any]], Any] = override(
        target=Profiler.Config, description="perseus: per-instruction GPU clocks for the pipeline schedule")
    register(perseus)
    return perseus


perseus = _register_override()
