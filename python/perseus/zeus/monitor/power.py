"""Zeus's ``zeus.monitor.power``: :class:`PowerMonitor`, every GPU's power sampled on a thread of its
own (in C++: no subprocess, no GIL) into a timeline of ``(time.time(), watts)``.

GPU indices are CUDA's (``CUDA_VISIBLE_DEVICES`` applies). perseus reads a GPU's instantaneous power
(NVML's power usage): the ``device_instant`` power domain. Timelines list, as Zeus's do, only the
samples where a GPU's power changed.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from enum import Enum
from typing import Dict, List, Literal, Optional, Tuple, Union

from ..._perseus import _PowerMonitor

__all__ = ["PowerDomain", "PowerMonitor", "PowerSample", "infer_counter_update_period"]

_DEFAULT_PERIOD = 0.1  # s: power counters update at 10 Hz or faster


class PowerDomain(Enum):
    """What a power reading covers."""

    DEVICE_INSTANT = "device_instant"
    DEVICE_AVERAGE = "device_average"
    MEMORY_AVERAGE = "memory_average"


DomainName = Literal["device_instant", "device_average", "memory_average"]
_SUPPORTED = [PowerDomain.DEVICE_INSTANT]


@dataclass
class PowerSample:
    """One power reading."""

    timestamp: float
    gpu_index: int
    power_mw: float


def infer_counter_update_period(gpu_indicies: List[int]) -> float:
    """Half the shortest interval between changes of the GPUs' power readings, polled as fast as they
    answer for about 1000 readings each (at most 0.1 s; 0.05 s where a reading never changes)."""
    return _infer_period(list(gpu_indicies), "", "")


def _infer_period(gpu_indices: List[int], nvml_library: str, gpud_socket: str) -> float:
    monitor = _PowerMonitor(gpu_indices, 0.0, 0, nvml_library, gpud_socket)
    shortest = 2 * _DEFAULT_PERIOD
    for gpu in gpu_indices:
        changes, previous = [], None
        for _ in range(1000):
            monitor.sample()
        for at, watts in monitor.timeline(gpu):
            if previous is not None and watts != previous:
                changes.append(at)
            previous = watts
        shortest = min([shortest] + [b - a for a, b in zip(changes, changes[1:]) if b > a])
    return min(shortest / 2, _DEFAULT_PERIOD)


def _domain(value: Union[PowerDomain, str]) -> PowerDomain:
    return PowerDomain(value)


def _changes(samples: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    """The samples where the power differs from the sample before (positive readings only)."""
    out: List[Tuple[float, float]] = []
    previous: Optional[float] = None
    for at, watts in samples:
        if watts <= 0 or watts == previous:
            continue
        out.append((at, watts))
        previous = watts
    return out


class PowerMonitor:
    """GPU power over time, Zeus's ``PowerMonitor``.

    Args:
        gpu_indices: GPUs to sample, as CUDA numbers them; None: every visible GPU.
        update_period: seconds between samples; None: inferred with
            :func:`infer_counter_update_period`.
        max_samples_per_gpu: samples kept per GPU (the oldest go first); None: all.
        power_domains: the domains to sample; None: every supported one. perseus supports
            ``device_instant``; any other raises ValueError, as Zeus does for a domain the GPUs lack.
        nvml_library, gpud_socket: where the GPUs are read, as for ``ZeusMonitor``.
    """

    def __init__(self, gpu_indices: Optional[List[int]] = None, update_period: Optional[float] = None,
                 max_samples_per_gpu: Optional[int] = None,
                 power_domains: Optional[List[Union[PowerDomain, DomainName]]] = None, *,
                 nvml_library: str = "", gpud_socket: str = "") -> None:
        if gpu_indices is not None and not gpu_indices:
            raise ValueError("`gpu_indices` must be either `None` or non-empty")
        if power_domains is not None and not power_domains:
            raise ValueError("`power_domains` must be either `None` or non-empty")
        domains = list(_SUPPORTED)
        if power_domains is not None:
            domains = []
            for requested in power_domains:
                domain = _domain(requested)
                if domain not in _SUPPORTED:
                    raise ValueError(f"Requested power domain {domain.value} is not supported by the current GPUs. "
                                     f"Supported domains are: {[d.value for d in _SUPPORTED]}")
                if domain not in domains:
                    domains.append(domain)
        self.measurement_domains: List[PowerDomain] = domains
        if update_period is None:
            visible = _PowerMonitor(gpu_indices, 0.0, 0, nvml_library, gpud_socket).gpu_indices
            update_period = _infer_period(list(visible), nvml_library, gpud_socket)
        if update_period <= 0:
            raise ValueError(f"the update period must be positive, not {update_period}")
        self.update_period = update_period
        self._monitor = _PowerMonitor(gpu_indices, update_period, max_samples_per_gpu or 0, nvml_library,
                                      gpud_socket)
        self.gpu_indices: List[int] = list(self._monitor.gpu_indices)
        if not self.gpu_indices:
            raise ValueError("At least one GPU index must be specified")

    def stop(self) -> None:
        """Stops sampling; the timelines stay readable."""
        self._monitor.stop()

    def _check(self, domain: PowerDomain) -> None:
        if domain not in self.measurement_domains:
            raise ValueError(f"Power domain {domain.value} is not being monitored. "
                             f"Monitored domains: {[d.value for d in self.measurement_domains]}")

    def get_power_timeline(self, power_domain: Union[PowerDomain, DomainName], gpu_index: Optional[int] = None,
                           start_time: Optional[float] = None,
                           end_time: Optional[float] = None) -> Dict[int, List[Tuple[float, float]]]:
        """``{gpu: [(time, watts), ...]}``, oldest first: the samples where the power changed, within
        ``[start_time, end_time]`` (``time.time()`` bounds; None: unbounded)."""
        domain = _domain(power_domain)
        self._check(domain)
        indices = [gpu_index] if gpu_index is not None else self.gpu_indices
        out = {}
        for i in indices:
            if i not in self.gpu_indices:
                continue
            out[i] = [(at, watts) for at, watts in _changes(self._monitor.timeline(i))
                      if (start_time is None or at >= start_time) and (end_time is None or at <= end_time)]
        return out

    def get_all_power_timelines(self, gpu_index: Optional[int] = None, start_time: Optional[float] = None,
                                end_time: Optional[float] = None) -> Dict[str, Dict[int, List[Tuple[float, float]]]]:
        """``{domain name: get_power_timeline(domain, ...)}`` for every domain monitored."""
        return {domain.value: self.get_power_timeline(domain, gpu_index, start_time, end_time)
                for domain in self.measurement_domains}

    def get_energy(self, start_time: float, end_time: float) -> Optional[Dict[int, float]]:
        """Joules per GPU between two ``time.time()`` instants; None without samples. Every sample is
        integrated (linear between samples, held before the first and after the last) over exactly
        ``[start_time, end_time]``."""
        return self._monitor.energy(start_time, end_time)

    def get_power(self, time: Optional[float] = None) -> Optional[Dict[int, float]]:
        """Watts per GPU: the latest sample, or the one closest to ``time``; None without samples."""
        out: Dict[int, float] = {}
        for i in self.gpu_indices:
            samples = self._monitor.timeline(i)
            if not samples:
                return None
            if time is None:
                out[i] = samples[-1][1]
                continue
            at = bisect.bisect_left([t for t, _ in samples], time)
            if at == 0:
                out[i] = samples[0][1]
            elif at == len(samples):
                out[i] = samples[-1][1]
            else:
                before, after = samples[at - 1], samples[at]
                out[i] = before[1] if time - before[0] <= after[0] - time else after[1]
        return out

