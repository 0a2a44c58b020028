"""Zeus's ``zeus.monitor.energy``: :class:`ZeusMonitor` and its :class:`Measurement`.

GPU indices are CUDA's: with ``CUDA_VISIBLE_DEVICES=2,3``, ``gpu_indices=[1]`` measures NVML's GPU
3, and the default measures the two visible GPUs. CPU package and DRAM energy come from RAPL (the
Linux powercap tree, ``$PERSEUS_POWERCAP_ROOT`` to point elsewhere), read through ``perseus gpud``
where this process may not read it.
"""
from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from functools import cached_property
from time import time
from typing import IO, Any, Dict, List, Optional, Union

from ..._perseus import EnergyMonitor as _CompiledMonitor
from ..._perseus import nvml_device_index

__all__ = ["Measurement", "MeasurementState", "ZeusMonitor"]


@dataclass
class Measurement:
    """What one measurement window saw.

    Attributes:
        time: seconds the window lasted.
        gpu_energy: joules by GPU index (CUDA's numbering, as given to the monitor).
        cpu_energy: joules by CPU package (RAPL zone ``intel-rapl:N``); None without RAPL.
        dram_energy: joules of each package's DRAM; None where RAPL has no DRAM zone.
        soc_energy: always None (perseus measures no system-on-chip).
    """

    time: float
    gpu_energy: Dict[int, float]
    cpu_energy: Optional[Dict[int, float]] = None
    dram_energy: Optional[Dict[int, float]] = None
    soc_energy: Optional[Any] = None

    @cached_property
    def total_energy(self) -> float:
        """Joules of every GPU (CPU and DRAM are not included, as in Zeus)."""
        return sum(self.gpu_energy.values())


@dataclass
class MeasurementState:
    """Where an open window started: ``time.time()`` and, by index, the GPUs', CPU packages' and
    DRAMs' energy counters (J), as Zeus keeps it. perseus's counters live in C++; its windows' start
    times are kept here."""

    time: float
    gpu_energy: Dict[int, float]
    cpu_energy: Optional[Dict[int, float]] = None
    dram_energy: Optional[Dict[int, float]] = None

    @cached_property
    def total_energy(self) -> float:
        return sum(self.gpu_energy.values())


_FRAMEWORKS = ("torch", "jax", "cupy")


def sync_execution(gpu_indices: List[int], sync_with: str = "torch") -> None:
    """Waits until the work queued on ``gpu_indices`` ran (``torch.cuda.synchronize``, a JAX barrier or
    CuPy's device synchronize), where that framework is already imported and uses the GPU; else
    nothing to wait for."""
    if sync_with == "torch":
        torch: Any = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            for index in gpu_indices:
                torch.cuda.synchronize(index)
    elif sync_with == "jax":
        jax: Any = sys.modules.get("jax")
        if jax is not None:
            devices = jax.devices("gpu")
            for index in gpu_indices:
                jax.device_put(0.0, device=devices[index]).block_until_ready()
    elif sync_with == "cupy":
        cupy: Any = sys.modules.get("cupy")
        if cupy is not None:
            for index in gpu_indices:
                cupy.cuda.Device(index).synchronize()
    else:
        raise ValueError(f"sync_execution_with must be one of {_FRAMEWORKS}, not {sync_with!r}")


class ZeusMonitor(_CompiledMonitor):
    """GPU (and CPU, DRAM) time and energy in named windows, nested or overlapping: Zeus's
    ``ZeusMonitor``.

    Args:
        gpu_indices: GPUs to measure, as CUDA numbers them; None: every visible GPU (none, as in
            Zeus, where NVML cannot be loaded).
        cpu_indices: CPU packages to measure (RAPL ``intel-rapl:N``); None: every package whose
            counters can be read (none where RAPL cannot be read); ``[]``: none. Naming packages
            that cannot be read raises RuntimeError.
        approx_instant_energy: a window whose GPU energy reads zero (shorter than the counter's
            update period) gets the GPU's power times the window's time instead.
        log_file: a CSV file written as Zeus writes it: ``start_time,window_name,elapsed_time,
            gpu{i}_energy...``, one line per window ended (not cancelled).
        sync_execution_with: ``"torch"``, ``"jax"`` or ``"cupy"``: how ``sync_execution`` waits for
            queued work.
        nvml_library: path of libnvidia-ml (``""``: ``$PERSEUS_NVML_LIBRARY`` or the driver's).
        gpud_socket: go through ``perseus gpud`` (``""``: ``$PERSEUS_GPUD_SOCKET``, else NVML
            directly); RAPL is read through it when the powercap tree is not readable here.
    """

    def __init__(self, gpu_indices: Optional[List[int]] = None, cpu_indices: Optional[List[int]] = None,
                 approx_instant_energy: bool = False, log_file: Union[str, "os.PathLike[str]", None] = None,
                 sync_execution_with: str = "torch", *, nvml_library: str = "", gpud_socket: str = "") -> None:
        if sync_execution_with not in _FRAMEWORKS:
            raise ValueError(f"sync_execution_with must be one of {_FRAMEWORKS}, not {sync_execution_with!r}")
        super().__init__(gpu_indices, nvml_library, gpud_socket, cpu_indices=cpu_indices,
                         approx_instant_energy=approx_instant_energy)
        self.approx_instant_energy = approx_instant_energy
        #: The NVML index of each of ``gpu_indices`` (what a power-limit optimizer caps).
        self.nvml_gpu_indices: List[int] = [nvml_device_index(i, None, nvml_library, gpud_socket)
                                            for i in self.gpu_indices]
        self.sync_with = sync_execution_with
        self.measurement_states: Dict[str, MeasurementState] = {}
        self.log_file: Optional[IO[str]] = None
        if log_file is not None:
            directory = os.path.dirname(os.fspath(log_file))
            if directory:
                os.makedirs(directory, exist_ok=True)
            self.log_file = open(log_file, "w")
            gpus = ",".join(f"gpu{i}_energy" for i in self.gpu_indices)
            self.log_file.write(f"start_time,window_name,elapsed_time,{gpus}\n")
            self.log_file.flush()

    def begin_window(self, key: str, sync_execution: bool = True, restart: bool = False) -> None:
        """Opens the window ``key``.

        Args:
            key: the window's name; ValueError when a window of that name is open, unless ``restart``.
            sync_execution: first wait for the work queued on the GPUs.
            restart: a window of that name that is open starts over.
        """
        if sync_execution and self.gpu_indices:
            sync_execution_fn(self.gpu_indices, self.sync_with)
        try:
            self._begin_window(key, restart)
        except ValueError:
            raise ValueError(f"Measurement window '{key}' already exists") from None
        self.measurement_states[key] = MeasurementState(time=time(), gpu_energy={})

    def end_window(self, key: str, sync_execution: bool = True, cancel: bool = False) -> Measurement:
        """Closes the window ``key`` and returns what it measured.

        Args:
            key: an open window's name (ValueError otherwise).
            sync_execution: first wait for the work queued on the GPUs.
            cancel: discard the window: every value zero, nothing logged.
        """
        if sync_execution and self.gpu_indices:
            sync_execution_fn(self.gpu_indices, self.sync_with)
        try:
            raw = self._end_window(key, cancel)
        except ValueError:
            raise ValueError(f"Measurement window '{key}' does not exist") from None
        state = self.measurement_states.pop(key, None)
        start_time = state.time if state is not None else 0.0
        if cancel:
            return Measurement(time=0.0, gpu_energy=dict(raw.gpu_energy), cpu_energy=raw.cpu_energy or {})
        measurement = Measurement(time=raw.time, gpu_energy=dict(raw.gpu_energy), cpu_energy=raw.cpu_energy,
                                  dram_energy=raw.dram_energy)
        if not self.approx_instant_energy and any(e == 0.0 for e in measurement.gpu_energy.values()):
            warnings.warn("The energy consumption of one or more GPUs was measured as zero: the window was shorter "
                          "than the GPU's energy counter update period. Consider approx_instant_energy=True.",
                          stacklevel=2)
        if self.log_file is not None:
            energies = ",".join(str(measurement.gpu_energy[i]) for i in self.gpu_indices)
            self.log_file.write(f"{start_time},{key},{measurement.time},{energies}\n")
            self.log_file.flush()
        return measurement

    def reset_windows(self) -> None:
        """Drops every open window (a notebook cell that failed between begin and end)."""
        for key in list(self.measurement_states):
            self._end_window(key, True)
        self.measurement_states.clear()


sync_execution_fn = sync_execution  # begin_window's argument of the same name hides it
