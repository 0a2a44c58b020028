"""Zeus's power-limit optimizer on perseus, with Zeus's names, units and behaviour.

:class:`EnergyMonitor` measures GPU time and energy in named windows; :class:`GlobalPowerLimitOptimizer`
finds, while training runs, the one power limit for every GPU that its selector likes best
(:class:`ZeusCost` by default), keeps it, and restores the maximum at the end. Power limits are in
milliwatts on the optimizer and its states, in watts in :class:`PowerLimitMeasurement` and in what
selectors return, as in Zeus. Across data-parallel ranks the measurements are combined (energy
summed, time the longest) through ``torch.distributed`` when it is initialised, or through the
``combine`` you pass.

One deliberate difference from Zeus: where the GPUs refuse power limits (no permission, no NVML),
the optimizer warns once and does nothing more, so training goes on (``fail_open=False``: Zeus's
``RuntimeError`` instead).
"""
from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import weakref
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple, Union

from ._callback import Callback
from ._perseus import EnergyMonitor as _CompiledMonitor
from ._perseus import Measurement, _Gpus

# Zeus writes its models against pydantic 1's interface, which pydantic 2 keeps as pydantic.v1.
if TYPE_CHECKING:
    from pydantic import BaseModel, PositiveFloat, PositiveInt, ValidationError
else:
    try:
        from pydantic.v1 import BaseModel, PositiveFloat, PositiveInt, ValidationError
    except ImportError:  # pydantic 1 (Debian's python3-pydantic)
        from pydantic import BaseModel, PositiveFloat, PositiveInt, ValidationError

__all__ = [
    "Done",
    "Energy",
    "EnergyMonitor",
    "GlobalPowerLimitOptimizer",
    "HFGlobalPowerLimitOptimizer",
    "MaxSlowdownConstraint",
    "Measurement",
    "OptimumSelector",
    "PowerLimitMeasurement",
    "Profiling",
    "Ready",
    "Time",
    "Warmup",
    "ZeusCost",
]

Combine = Callable[[float, float], Tuple[float, float]]
_log = logging.getLogger("perseus.power_limit")


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


class OptimumSelector(ABC):
    """Base class of optimum power limit selectors: override ``select``. Subclasses need not call
    ``__init__`` of this class."""

    @abstractmethod
    def select(self, measurements: List["PowerLimitMeasurement"]) -> int:
        """The optimal power limit (W) among ``measurements`` (never empty)."""


class Energy(OptimumSelector):
    """The power limit with the least energy."""

    def select(self, measurements: List["PowerLimitMeasurement"]) -> int:
        return min(measurements, key=lambda m: m.energy).power_limit


class Time(OptimumSelector):
    """The power limit with the least time (not always the highest: close times are noisy)."""

    def select(self, measurements: List["PowerLimitMeasurement"]) -> int:
        return min(measurements, key=lambda m: m.time).power_limit


class ZeusCost(OptimumSelector):
    """The power limit with the least ``eta·Energy + (1 − eta)·MaxPower·Time``, MaxPower being the
    highest limit measured × ``world_size``.

    Args:
        eta_knob: the weight of energy, 0 ≤ eta ≤ 1.
        world_size: the GPUs in the training job.
    """

    def __init__(self, eta_knob: float, world_size: int = 1) -> None:
        if eta_knob < 0 or eta_knob > 1:
            raise ValueError("eta_knob must be between 0 and 1, inclusive both sides.")
        if world_size < 1:
            raise ValueError("world_size must be greater than or equal to 1.")
        self.eta_knob = eta_knob
        self.world_size = world_size

    def select(self, measurements: List["PowerLimitMeasurement"]) -> int:
        max_power = max(m.power_limit for m in measurements) * self.world_size
        eta = self.eta_knob
        return min(measurements, key=lambda m: eta * m.energy + (1 - eta) * max_power * m.time).power_limit


class MaxSlowdownConstraint(OptimumSelector):
    """The lowest power limit whose time is within ``factor`` × the highest limit's.

    Args:
        factor: the slowdown allowed, at least 1.
    """

    def __init__(self, factor: float) -> None:
        if factor < 1.0:
            raise ValueError(f"max_slowdown_factor must be greater than or equal to 1.0. Got {factor}.")
        self.factor = factor

    def select(self, measurements: List["PowerLimitMeasurement"]) -> int:
        top = max(measurements, key=lambda m: m.power_limit)
        return min(m.power_limit for m in measurements if m.time <= self.factor * top.time)


class Ready(BaseModel):
    """Waiting to measure ``next_power_limit`` (mW): -> :class:`Warmup` at the ``steps``'th
    ``on_step_begin``. The first state unless a profile was loaded."""

    next_power_limit: PositiveInt
    steps: PositiveInt


class Warmup(BaseModel):
    """Warming up at ``current_power_limit`` (mW): -> :class:`Profiling` at the ``steps``'th
    ``on_step_begin``; -> :class:`Ready` at an ``on_epoch_end`` before that."""

    current_power_limit: PositiveInt
    steps: PositiveInt


class Profiling(BaseModel):
    """Measuring ``current_power_limit`` (mW): at the ``steps``'th ``on_step_begin`` -> :class:`Warmup`
    of the next limit, or :class:`Done` after the last; -> :class:`Ready` at an ``on_epoch_end``
    before that."""

    current_power_limit: PositiveInt
    steps: PositiveInt


class Done(BaseModel):
    """``optimal_power_limit`` (mW) is set for the rest of training. The first state when a
    profile was loaded; the last in any case."""

    optimal_power_limit: PositiveInt


class PowerLimitMeasurement(BaseModel):
    """Energy (J, every GPU and rank) and time (s) over the profiled steps at one power limit (W)."""

    power_limit: PositiveInt
    energy: PositiveFloat
    time: PositiveFloat


class _PowerLimitMeasurementList(BaseModel):
    """Zeus's profile file: ``{"measurements": [{"power_limit", "energy", "time"}, ...]}``."""

    measurements: List[PowerLimitMeasurement]


def read_profile(path: Union[str, "os.PathLike[str]"]) -> List[PowerLimitMeasurement]:
    """The measurements of a Zeus power-limit profile; ValueError naming the file and field."""
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except (OSError, ValueError) as error:
        raise ValueError(f"{os.fspath(path)}: not a readable JSON power limit profile ({error})") from None
    try:
        measurements = _PowerLimitMeasurementList.parse_obj(document).measurements
    except ValidationError as error:
        where = "; ".join(".".join(str(part) for part in e["loc"]) + ": " + e["msg"] for e in error.errors())
        raise ValueError(f"{os.fspath(path)}: {where}") from None
    if not measurements:
        raise ValueError(f"{os.fspath(path)}: measurements: is empty")
    return measurements


def write_profile(path: Union[str, "os.PathLike[str]"], measurements: Sequence[PowerLimitMeasurement]) -> None:
    """Writes Zeus's profile format atomically (a reader never sees half a file)."""
    text = _PowerLimitMeasurementList(measurements=list(measurements)).json(indent=4)
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".profile-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _nvml_indices(monitor: Any) -> List[int]:
    """The NVML indices of the monitor's GPUs: its ``nvml_gpu_indices`` where it has them, else
    its ``gpu_indices`` (CUDA's numbering) mapped through ``CUDA_VISIBLE_DEVICES``."""
    indices = getattr(monitor, "nvml_gpu_indices", None)
    if indices is not None:
        return [int(i) for i in indices]
    from .torch import nvml_device_index

    return [nvml_device_index(int(i)) for i in monitor.gpu_indices]


def _restore(gpus: Optional[_Gpus], indices: List[int], applied: List[int], maximum: int) -> None:
    """Puts the maximum limit back where another is set (at exit or when the optimizer goes)."""
    if gpus is None or applied[0] in (0, maximum):
        return
    try:
        for index in indices:
            gpus.set_power_limit_mw(index, maximum)
        applied[0] = maximum
    except RuntimeError as error:
        _log.warning("perseus: could not restore the %d W power limit: %s", maximum // 1000, error)


class GlobalPowerLimitOptimizer(Callback):
    """One power limit for every GPU of ``monitor``, found by profiling during training (Zeus's).

    :class:`Ready` (``wait_steps`` steps) -> :class:`Warmup` (``warmup_steps``) -> :class:`Profiling`
    (``profile_steps``) for each limit from the GPUs' maximum down in ``pl_step`` W, never below
    their minimum -> :class:`Done` with the selector's choice; ``on_epoch_end`` during Warmup or
    Profiling goes back to Ready at the same limit (at the maximum meanwhile). The maximum is restored
    by :meth:`close`, at interpreter exit, and when the optimizer is collected.

    Args:
        monitor: any object with Zeus's monitor interface: ``gpu_indices``,
            ``begin_window(name)``, ``end_window(name, cancel=False)`` returning an object with
            ``time`` (s) and ``gpu_energy`` ({index: J}). Its ``nvml_gpu_indices``, where it has
            them, name the GPUs to cap; else ``gpu_indices`` through ``CUDA_VISIBLE_DEVICES``.
        optimum_selector: default ``ZeusCost(eta_knob=0.5, world_size=len(monitor.gpu_indices))``.
        wait_steps: steps passed by before anything happens.
        warmup_steps: steps of warm-up at each limit.
        profile_steps: steps measured at each limit.
        pl_step: watts between the limits explored.
        profile_path: an existing file (Zeus's ``{"measurements": [...]}``) is loaded and profiling
            skipped; otherwise the profile is saved there when done.
        fail_open: GPUs refusing power limits (or no NVML): warn once and do nothing more, so
            training goes on; False: raise Zeus's ``RuntimeError``.
        combine: ``(energy, time) -> (energy, time)`` over the data-parallel ranks; default: an
            all-reduce over ``torch.distributed`` when it is initialised with several ranks.
        nvml_library, gpud_socket: as for :class:`EnergyMonitor` ("" reads the environment).
    """

    def __init__(self, monitor: Any, optimum_selector: Optional[OptimumSelector] = None, wait_steps: int = 1,
                 warmup_steps: int = 10, profile_steps: int = 40, pl_step: int = 25,
                 profile_path: Union[str, Path, None] = None, *, fail_open: bool = True,
                 combine: Optional[Combine] = None, nvml_library: str = "", gpud_socket: str = "") -> None:
        if wait_steps < 0:
            raise ValueError("wait_steps must be non-negative.")
        if warmup_steps < 0:
            raise ValueError("warmup_steps must be non-negative.")
        if profile_steps <= 0:
            raise ValueError("profile_steps must be positive.")
        if pl_step <= 0:
            raise ValueError("pl_step must be positive.")
        self.monitor = monitor
        self.optimum_selector: OptimumSelector = optimum_selector or ZeusCost(
            eta_knob=0.5, world_size=len(monitor.gpu_indices))
        self.wait_steps = wait_steps
        self.warmup_steps = warmup_steps
        self.profile_steps = profile_steps
        self.pl_step = pl_step * 1000  # mW, as Zeus keeps it
        self.profile_path: Optional[Path] = Path(profile_path) if isinstance(profile_path, str) else profile_path
        self.fail_open = fail_open
        self.combine = combine
        self.current_power_limit = 0  # mW; 0 until one is set
        self.measurements: List[PowerLimitMeasurement] = []
        self.power_limits: List[int] = []  # mW, from the highest down
        self.enabled = True
        self._applied = [0]  # shared with the exit hook
        self._gpus: Optional[_Gpus] = None
        self._nvml_indices: List[int] = []
        self.state: Union[Ready, Warmup, Profiling, Done]

        loaded = self.profile_path is not None and self.profile_path.exists()
        if loaded:
            assert self.profile_path is not None
            self.measurements = read_profile(self.profile_path)
        try:
            try:
                self._nvml_indices = _nvml_indices(monitor)
            except ValueError as error:  # e.g. CUDA_VISIBLE_DEVICES by UUID and a monitor without NVML indices
                raise RuntimeError(str(error)) from None
            self._gpus = _Gpus(nvml_library, gpud_socket)
            ranges = [self._gpus.power_limit_range(i) for i in self._nvml_indices]
            if not ranges:
                raise ValueError("the monitor watches no GPU")
            if any(r != ranges[0] for r in ranges):
                raise ValueError("Power limits ranges are not uniform across GPUs.")
            low, high = ranges[0]
            self.power_limits = list(range(high, low - 1, -self.pl_step))
            if loaded:
                _log.info("perseus: power limit profile loaded from %s", self.profile_path)
                done = Done(optimal_power_limit=self._compute_optimal_power_limit())
                self.state = done
                self._set_power_limit(done.optimal_power_limit)
            else:
                self.state = Ready(next_power_limit=self.power_limits[0], steps=wait_steps + 1)
                self._set_power_limit(self.power_limits[0])
        except RuntimeError as error:  # the GPU layer's errors
            self._disable(error, constructing=True)
        weakref.finalize(self, _restore, self._gpus, self._nvml_indices, self._applied,
                         self.power_limits[0] if self.power_limits else 0)

    def _disable(self, error: BaseException, constructing: bool = False) -> None:
        if not self.fail_open:
            if constructing:
                raise RuntimeError("SYS_ADMIN capability is required to modify GPU power limits "
                                   f"(perseus: {error}).") from error
            raise error
        _log.warning("perseus: power limit optimizer disabled, training continues at the GPUs' current "
                     "limits: %s", error)
        self.enabled = False
        if not constructing and self.power_limits:  # back to the maximum, where the GPUs still allow it
            _restore(self._gpus, self._nvml_indices, self._applied, self.power_limits[0])
        if constructing:
            optimal = self.optimum_selector.select(self.measurements) * 1000 if self.measurements else 0
            self.state = Done.construct(optimal_power_limit=optimal)

    def _window(self, power_limit: int) -> str:
        return f"__GlobalPowerLimitOptimizer_{power_limit // 1000}"

    def _set_power_limit(self, power_limit: int) -> None:
        """Sets ``power_limit`` (mW) on every GPU, unless it is set already."""
        if self.current_power_limit == power_limit:
            return
        assert self._gpus is not None
        for index in self._nvml_indices:
            self._gpus.set_power_limit_mw(index, power_limit)
        self.current_power_limit = power_limit
        self._applied[0] = power_limit

    def _compute_optimal_power_limit(self) -> int:
        """The selector's choice, in mW."""
        optimal = self.optimum_selector.select(self.measurements) * 1000
        _log.info("perseus: optimal power limit is %d W", optimal // 1000)
        return optimal

    def on_epoch_end(self) -> None:
        """Marks the end of an epoch: a limit being warmed up or profiled starts over."""
        state = self.state
        if not self.enabled or not isinstance(state, (Warmup, Profiling)):
            return
        _log.info("perseus: %s of %d W interrupted by the end of an epoch", type(state).__name__,
                  state.current_power_limit // 1000)
        try:
            if isinstance(state, Profiling):
                self.monitor.end_window(self._window(state.current_power_limit), cancel=True)
            self.state = Ready(next_power_limit=state.current_power_limit, steps=1)
            self._set_power_limit(self.power_limits[0])
        except (RuntimeError, ValueError) as error:
            self._disable(error)

    def on_step_begin(self) -> None:
        """Marks the beginning of a training step."""
        if not self.enabled:
            return
        try:
            self._advance()
        except (RuntimeError, ValueError) as error:  # the GPU layer's, the monitor's, a measurement's
            self._disable(error)

    def _advance(self) -> None:
        state = self.state
        if isinstance(state, Ready):
            state.steps -= 1
            if state.steps == 0:
                self._set_power_limit(state.next_power_limit)
                self.state = Warmup(current_power_limit=state.next_power_limit, steps=self.warmup_steps)
        elif isinstance(state, Warmup):
            state.steps -= 1
            if state.steps == 0:
                self.state = Profiling(current_power_limit=state.current_power_limit, steps=self.profile_steps)
                self.monitor.begin_window(self._window(state.current_power_limit))
        elif isinstance(state, Profiling):
            state.steps -= 1
            if state.steps == 0:
                self._finish_profiling(state.current_power_limit)

    def _finish_profiling(self, power_limit: int) -> None:
        measurement = self.monitor.end_window(self._window(power_limit))
        gpu_energy = getattr(measurement, "gpu_energy", None)
        energy = float(sum(gpu_energy.values()) if gpu_energy is not None else measurement.total_energy)
        time = float(measurement.time)
        combine = self.combine or _torch_combine()
        if combine is not None:
            energy, time = combine(energy, time)
        self.measurements.append(PowerLimitMeasurement(power_limit=power_limit // 1000, energy=energy, time=time))
        _log.info("perseus: %d W took %.3f s and %.1f J over %d steps", power_limit // 1000, time, energy,
                  self.profile_steps)
        index = self.power_limits.index(power_limit)
        if index == len(self.power_limits) - 1:
            self.state = Done(optimal_power_limit=self._compute_optimal_power_limit())
            self._set_power_limit(self.state.optimal_power_limit)
            if self.profile_path is not None:
                write_profile(self.profile_path, self.measurements)
        else:
            following = self.power_limits[index + 1]
            self._set_power_limit(following)
            self.state = Warmup(current_power_limit=following, steps=self.warmup_steps)

    def close(self) -> None:
        """Restores the highest power limit; later hooks do nothing."""
        if self.enabled and self.power_limits:
            _restore(self._gpus, self._nvml_indices, self._applied, self.power_limits[0])
            self.current_power_limit = self._applied[0]
        self.enabled = False


def _callback_base() -> type:
    """Hugging Face's TrainerCallback where transformers is installed; it is never required."""
    try:
        import importlib

        return getattr(importlib.import_module("transformers"), "TrainerCallback")  # type: ignore[no-any-return]
    except ImportError:
        return object


class HFGlobalPowerLimitOptimizer(_callback_base()):  # type: ignore[misc]
    """:class:`GlobalPowerLimitOptimizer` as a Hugging Face ``TrainerCallback``
    (``trainer.add_callback(...)``); same arguments. Unlike Zeus's, it needs no transformers
    installed (it then derives from ``object``)."""

    def __init__(self, monitor: Any, optimum_selector: Optional[OptimumSelector] = None, wait_steps: int = 1,
                 warmup_steps: int = 10, profile_steps: int = 40, pl_step: int = 25,
                 profile_path: Union[str, Path, None] = None, *, fail_open: bool = True,
                 combine: Optional[Combine] = None, nvml_library: str = "", gpud_socket: str = "") -> None:
        self.optimizer = GlobalPowerLimitOptimizer(
            monitor=monitor, optimum_selector=optimum_selector, wait_steps=wait_steps, warmup_steps=warmup_steps,
            profile_steps=profile_steps, pl_step=pl_step, profile_path=profile_path, fail_open=fail_open,
            combine=combine, nvml_library=nvml_library, gpud_socket=gpud_socket)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Marks the end of an epoch."""
        self.optimizer.on_epoch_end()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Marks the beginning of a training step."""
        self.optimizer.on_step_begin()
