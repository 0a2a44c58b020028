"""Zeus's power-limit optimizer on perseus (seed ``zeus-power-limit-api.txt``).

:class:`EnergyMonitor` measures GPU time and energy in named windows; :class:`GlobalPowerLimitOptimizer`
finds, while training runs, the one power limit for every GPU that its selector likes best
(:class:`ZeusCost` by default), keeps it, and restores the maximum at the end. Across
data-parallel ranks the measurements are combined (energy summed, time the longest) through
``torch.distributed`` when it is initialised, or through the ``combine`` you pass.
"""
from __future__ import annotations

import atexit
import os
import sys
from typing import Any, Callable, List, Optional, Tuple, Union

from ._perseus import (
    Energy,
    EnergyMonitor as _CompiledMonitor,
    Measurement,
    MaxSlowdownConstraint,
    OptimumSelector,
    PowerLimitMeasurement,
    Time,
    ZeusCost,
    _GlobalPowerLimitOptimizer,
)

__all__ = [
    "Energy",
    "EnergyMonitor",
    "GlobalPowerLimitOptimizer",
    "HFGlobalPowerLimitOptimizer",
    "MaxSlowdownConstraint",
    "Measurement",
    "OptimumSelector",
    "PowerLimitMeasurement",
    "Time",
    "ZeusCost",
]

Combine = Callable[[float, float], Tuple[float, float]]


def _synchronize_cuda() -> None:
    """Waits for queued CUDA work, where torch is already imported and CUDA is in use."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class EnergyMonitor(_CompiledMonitor):
    """GPU time and energy in named windows (Zeus's ``ZeusMonitor``), nested or overlapping.

    Args:
        gpu_indices: NVML indices to measure; None: every GPU.
        nvml_library: path of libnvidia-ml ("": ``$PERSEUS_NVML_LIBRARY`` or the driver's).
        gpud_socket: go through ``perseus gpud`` ("": ``$PERSEUS_GPUD_SOCKET``, else NVML directly).
    """

    def begin_window(self, key: str, sync_execution: bool = True) -> None:
        """Opens the window ``key`` (ValueError if it is open); ``sync_execution`` first waits for
        queued CUDA work, as Zeus does."""
        if sync_execution:
            _synchronize_cuda()
        try:
            self._begin_window(key)
        except Exception as error:  # std::invalid_argument
            raise ValueError(str(error)) from None

    def end_window(self, key: str, sync_execution: bool = True, cancel: bool = False) -> Measurement:
        """Closes the window ``key`` and returns its :class:`Measurement` (``cancel``: an empty one)."""
        if sync_execution:
            _synchronize_cuda()
        try:
            return self._end_window(key, cancel)
        except Exception as error:
            raise ValueError(str(error)) from None


def _torch_combine() -> Optional[Combine]:
    """Energy summed and time maximised over ``torch.distributed`` when it runs more than one rank."""
    torch: Any = sys.modules.get("torch")
    if torch is None or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return None
    if torch.distributed.get_world_size() == 1:
        return None
    dist = torch.distributed

    def combine(energy: float, time: float) -> Tuple[float, float]:
        e = torch.tensor([energy], dtype=torch.float64)
        t = torch.tensor([time], dtype=torch.float64)
        dist.all_reduce(e, op=dist.ReduceOp.SUM)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(e.item()), float(t.item())

    return combine


class GlobalPowerLimitOptimizer:
    """One power limit for every GPU of ``monitor``, found by profiling during training.

    Ready -> Warmup -> Profiling for each limit from the GPUs' maximum down in ``pl_step`` W
    (never below their minimum) -> Done with the selector's choice; ``on_epoch_end`` during
    Warmup or Profiling starts that limit over at the next step. The maximum is restored by
    :meth:`close`, at interpreter exit, or when the optimizer is collected.

    Args:
        monitor: the :class:`EnergyMonitor` whose GPUs are optimised.
        optimum_selector: an :class:`OptimumSelector` (default ``ZeusCost(0.5, number of GPUs)``);
            a Python subclass defining ``select(measurements) -> int`` works too.
        wait_steps: steps passed by before anything happens.
        warmup_steps: steps of warm-up at each limit.
        profile_steps: steps measured at each limit.
        pl_step: watts between the limits explored.
        profile_path: an existing file (Zeus's ``{"measurements": [...]}``) is loaded and profiling
            skipped; otherwise the profile is saved there when done.
        combine: ``(energy, time) -> (energy, time)`` over the data-parallel ranks; default: an
            all-reduce over ``torch.distributed`` when it is initialised with several ranks.
    """

    def __init__(self, monitor: EnergyMonitor, optimum_selector: Optional[OptimumSelector] = None,
                 wait_steps: int = 1, warmup_steps: int = 10, profile_steps: int = 40, pl_step: int = 25,
                 profile_path: Union[str, "os.PathLike[str]", None] = None,
                 combine: Optional[Combine] = None) -> None:
        self.monitor = monitor
        self.optimum_selector = optimum_selector
        self._optimizer = _GlobalPowerLimitOptimizer(
            monitor, optimum_selector, wait_steps, warmup_steps, profile_steps, pl_step,
            None if profile_path is None else os.fspath(profile_path), combine or _torch_combine())
        atexit.register(self.close)

    def on_step_begin(self) -> None:
        """Marks the beginning of a training step."""
        self._optimizer.on_step_begin()

    def on_step_end(self) -> None:
        """Marks the end of a training step (nothing to do; kept for Zeus's callback interface)."""
        self._optimizer.on_step_end()

    def on_epoch_end(self) -> None:
        """Marks the end of an epoch: a limit being warmed up or profiled starts over."""
        self._optimizer.on_epoch_end()

    def close(self) -> None:
        """Restores the highest power limit; later hooks do nothing."""
        self._optimizer.close()

    @property
    def state(self) -> str:
        """"Ready", "Warmup", "Profiling" or "Done"."""
        return str(self._optimizer.state)

    @property
    def current_power_limit(self) -> int:
        """The limit set now, in watts."""
        return int(self._optimizer.current_power_limit)

    @property
    def optimal_power_limit(self) -> Optional[int]:
        """The chosen limit (W) once profiling is done."""
        value = self._optimizer.optimal_power_limit
        return None if value is None else int(value)

    @property
    def power_limits(self) -> List[int]:
        """The limits explored, highest first (W)."""
        return list(self._optimizer.power_limits)

    @property
    def measurements(self) -> List[PowerLimitMeasurement]:
        """What each limit measured so far."""
        return list(self._optimizer.measurements)


def _callback_base() -> type:
    """Hugging Face's TrainerCallback where transformers is installed; it is never required."""
    try:
        import importlib

        return getattr(importlib.import_module("transformers"), "TrainerCallback")  # type: ignore[no-any-return]
    except ImportError:
        return object


class HFGlobalPowerLimitOptimizer(_callback_base()):  # type: ignore[misc]
    """:class:`GlobalPowerLimitOptimizer` as a Hugging Face ``TrainerCallback``
    (``trainer.add_callback(...)``); same arguments."""

    def __init__(self, monitor: EnergyMonitor, optimum_selector: Optional[OptimumSelector] = None,
                 wait_steps: int = 1, warmup_steps: int = 10, profile_steps: int = 40, pl_step: int = 25,
                 profile_path: Union[str, "os.PathLike[str]", None] = None,
                 combine: Optional[Combine] = None) -> None:
        self.optimizer = GlobalPowerLimitOptimizer(monitor, optimum_selector, wait_steps, warmup_steps,
                                                   profile_steps, pl_step, profile_path, combine)

    def on_epoch_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        """Marks the end of an epoch."""
        self.optimizer.on_epoch_end()

    def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        """Marks the beginning of a training step."""
        self.optimizer.on_step_begin()
