"""Zeus's ``zeus.device``: ``get_gpus()``, ``get_cpus()`` and ``get_soc()`` on perseus's GPU layer and
RAPL reader, with Zeus's method names and units (mW, mJ, MHz).

GPU indices are CUDA's (``CUDA_VISIBLE_DEVICES`` applies), as in Zeus. What perseus does not read
(persistence mode, averaged and memory power, temperature) raises ``RuntimeError`` saying so, as
Zeus raises its ``ZeusGPUNotSupportedError`` on GPUs without them; GPU errors are ``RuntimeError``
with NVML's message. perseus monitors no system-on-chip: ``get_soc()`` always raises.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ..._perseus import EnergyMonitor, _Gpus, nvml_device_index

__all__ = ["get_cpus", "get_gpus", "get_soc"]


class _NotSupported(RuntimeError):
    """perseus does not read this from a GPU."""


class _GPUs:
    """Zeus's ``GPUs`` on perseus's GPU layer: every index is a CUDA index, every method Zeus's.

    ``block`` arguments are accepted and ignored: perseus's calls return when the GPU has applied the
    setting.
    """

    def __init__(self, ensure_homogeneous: bool = False) -> None:
        self._lib = _Gpus()
        self._nvml: List[int] = []
        for cuda in range(self._lib.device_count()):
            try:
                self._nvml.append(nvml_device_index(cuda))
            except ValueError:  # past the last visible GPU
                break
        if ensure_homogeneous and len({self._lib.name(i) for i in self._nvml}) > 1:
            raise RuntimeError(f"Heterogeneous GPUs found: {[self._lib.name(i) for i in self._nvml]}")

    def __len__(self) -> int:
        return len(self._nvml)

    @property
    def gpus(self) -> List[int]:
        """The NVML index of every visible GPU, in CUDA's order."""
        return list(self._nvml)

    def _at(self, gpu_index: int) -> int:
        if not 0 <= gpu_index < len(self._nvml):
            raise RuntimeError(f"GPU index {gpu_index}: {len(self._nvml)} GPUs are visible")
        return self._nvml[gpu_index]

    @staticmethod
    def _unsupported(what: str) -> _NotSupported:
        return _NotSupported(f"perseus does not read {what} from GPUs")

    def get_name(self, gpu_index: int) -> str:
        return self._lib.name(self._at(gpu_index))

    def get_power_management_limit_constraints(self, gpu_index: int) -> Tuple[int, int]:
        low, high = self._lib.power_limit_range(self._at(gpu_index))
        return (low, high)

    def get_power_management_limit(self, gpu_index: int) -> int:
        return self._lib.power_limit_mw(self._at(gpu_index))

    def set_power_management_limit(self, gpu_index: int, power_limit_mw: int, block: bool = True) -> None:
        if self.get_power_management_limit(gpu_index) != power_limit_mw:
            self._lib.set_power_limit_mw(self._at(gpu_index), power_limit_mw)

    def reset_power_management_limit(self, gpu_index: int, block: bool = True) -> None:
        """Back to the highest limit the GPU allows (NVML's default limit on every GPU perseus knows)."""
        self.set_power_management_limit(gpu_index, self.get_power_management_limit_constraints(gpu_index)[1])

    def set_persistence_mode(self, gpu_index: int, enabled: bool, block: bool = True) -> None:
        raise self._unsupported("or set persistence mode")

    def get_persistence_mode(self, gpu_index: int) -> bool:
        raise self._unsupported("persistence mode")

    def get_supported_memory_clocks(self, gpu_index: int) -> List[int]:
        return self._lib.supported_memory_clocks(self._at(gpu_index))

    def set_memory_locked_clocks(self, gpu_index: int, min_clock_mhz: int, max_clock_mhz: int,
                                 block: bool = True) -> None:
        self._lib.lock_memory_clocks(self._at(gpu_index), min_clock_mhz, max_clock_mhz)

    def reset_memory_locked_clocks(self, gpu_index: int, block: bool = True) -> None:
        self._lib.reset_memory_clock(self._at(gpu_index))

    def get_supported_graphics_clocks(self, gpu_index: int, memory_clock_mhz: Optional[int] = None) -> List[int]:
        device = self._at(gpu_index)
        if memory_clock_mhz is None:
            return self._lib.supported_graphics_clocks(device)
        return self._lib.supported_graphics_clocks_at(device, memory_clock_mhz)

    def set_gpu_locked_clocks(self, gpu_index: int, min_clock_mhz: int, max_clock_mhz: int,
                              block: bool = True) -> None:
        self._lib.lock_graphics_clocks(self._at(gpu_index), min_clock_mhz, max_clock_mhz)

    def reset_gpu_locked_clocks(self, gpu_index: int, block: bool = True) -> None:
        self._lib.reset_graphics_clock(self._at(gpu_index))

    def get_average_power_usage(self, gpu_index: int) -> int:
        raise self._unsupported("averaged power")

    def get_instant_power_usage(self, gpu_index: int) -> int:
        return self._lib.power_usage_mw(self._at(gpu_index))

    def get_average_memory_power_usage(self, gpu_index: int) -> int:
        raise self._unsupported("memory power")

    def supports_get_total_energy_consumption(self, gpu_index: int) -> bool:
        self._at(gpu_index)
        return True

    def get_total_energy_consumption(self, gpu_index: int) -> int:
        return self._lib.total_energy_mj(self._at(gpu_index))

    def get_gpu_temperature(self, gpu_index: int) -> int:
        raise self._unsupported("temperature")


@dataclass
class _CpuDramMeasurement:
    """Zeus's ``CpuDramMeasurement``: mJ of a CPU package and of its DRAM (None without a DRAM zone)."""

    cpu_mj: float
    dram_mj: Optional[float] = None


class _CPUs:
    """Zeus's ``CPUs`` on perseus's RAPL reader: each package's energy (mJ) since ``get_cpus()`` was
    first called, wrap-arounds of the counters handled."""

    def __init__(self) -> None:
        self._monitor = EnergyMonitor([], cpu_indices=None)
        self._packages: List[int] = list(self._monitor.cpu_indices)
        if not self._packages:
            raise RuntimeError("RAPL unavailable: no CPU package energy counter can be read")
        self._lock = threading.Lock()
        self._cpu: Dict[int, float] = {i: 0.0 for i in self._packages}
        self._dram: Dict[int, float] = {i: 0.0 for i in self._packages}
        self._has_dram: Dict[int, bool] = {}
        self._monitor._begin_window("__perseus_cpus")

    def __len__(self) -> int:
        return len(self._packages)

    @property
    def cpus(self) -> List[int]:
        """The RAPL package index (``intel-rapl:N``) of every CPU."""
        return list(self._packages)

    def _read(self) -> None:
        with self._lock:
            measurement = self._monitor._end_window("__perseus_cpus")
            self._monitor._begin_window("__perseus_cpus")
            for index, joules in (measurement.cpu_energy or {}).items():
                self._cpu[index] += joules * 1000.0
            dram = measurement.dram_energy or {}
            for index in self._packages:
                self._has_dram[index] = index in dram
                self._dram[index] += dram.get(index, 0.0) * 1000.0

    def get_total_energy_consumption(self, index: int) -> _CpuDramMeasurement:
        if index not in self._cpu:
            raise RuntimeError(f"CPU index {index}: no RAPL package zone intel-rapl:{index}")
        self._read()
        return _CpuDramMeasurement(self._cpu[index], self._dram[index] if self._has_dram[index] else None)

    def supports_get_dram_energy_consumption(self, index: int) -> bool:
        self._read()
        return self._has_dram.get(index, False)


_gpus: Optional[_GPUs] = None
_cpus: Optional[_CPUs] = None


def get_gpus(ensure_homogeneous: bool = False) -> _GPUs:
    """The node's GPUs (one object per process, as in Zeus); RuntimeError where NVML cannot be loaded."""
    global _gpus
    if _gpus is None:
        _gpus = _GPUs(ensure_homogeneous)
    return _gpus


def get_cpus() -> _CPUs:
    """The node's CPU packages (RAPL); RuntimeError where no package counter can be read."""
    global _cpus
    if _cpus is None:
        _cpus = _CPUs()
    return _cpus


def get_soc() -> None:
    """Always RuntimeError: perseus monitors no system-on-chip (Zeus's Apple silicon and Jetson)."""
    raise RuntimeError("No observable SoC was found on the current machine.")
