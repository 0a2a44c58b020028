"""Zeus's ``zeus.monitor.power``: :class:`PowerMonitor`, every GPU's power sampled on a thread of
its own (in C++: no subprocess, no GIL) into a timeline of ``(time.time(), watts)``.

GPU indices are CUDA's (``CUDA_VISIBLE_DEVICES`` applies). Only the ``device_instant`` GPU power
domain is sampled; CPU power timelines are not kept (``ZeusMonitor`` measures CPU energy).
"""
from __future__ import annotations

import bisect
from typing import Dict, List, Optional, Tuple

from ..._perseus import _PowerMonitor

__all__ = ["PowerMonitor"]

_DOMAIN = "device_instant"


def _check_domain(domain: Optional[object]) -> None:
    value = getattr(domain, "value", domain)
    if value is not None and value != _DOMAIN:
        raise ValueError(f"Power domain {value} is not being monitored. Monitored domains: ['{_DOMAIN}']")


class PowerMonitor:
    """GPU power over time.

    Args:
        gpu_indices: GPUs to sample, as CUDA numbers them; None: every visible GPU.
        cpu_indices: must be None or ``[]`` (CPU power timelines are not kept).
        gpu_update_period: seconds between samples; None: 0.1 s.
        max_samples_per_gpu: samples kept per GPU (the oldest go first); None: all.
        update_period: the older name of ``gpu_update_period``.
        nvml_library, gpud_socket: where the GPUs are read, as for :class:`ZeusMonitor`.
    """

    def __init__(self, gpu_indices: Optional[List[int]] = None, cpu_indices: Optional[List[int]] = None,
                 gpu_update_period: Optional[float] = None, max_samples_per_gpu: Optional[int] = None, *,
                 update_period: Optional[float] = None, nvml_library: str = "", gpud_socket: str = "") -> None:
        if cpu_indices:
            raise ValueError("perseus's PowerMonitor samples GPUs only; CPU energy is ZeusMonitor's cpu_energy")
        period = gpu_update_period if gpu_update_period is not None else update_period
        if period is None:
            period = 0.1
        if period <= 0:
            raise ValueError(f"the update period must be positive, not {period}")
        self.gpu_update_period = period
        self._monitor = _PowerMonitor(gpu_indices, period, max_samples_per_gpu or 0, nvml_library, gpud_socket)
        self.gpu_indices: List[int] = list(self._monitor.gpu_indices)
        self.cpu_indices: List[int] = []

    def stop(self) -> None:
        """Stops sampling; the timeline stays readable."""
        self._monitor.stop()

    def get_power_timeline(self, gpu_power_domain: Optional[object] = None, gpu_index: Optional[int] = None,
                           start_time: Optional[float] = None, end_time: Optional[float] = None, *,
                           cpu_power_domain: Optional[object] = None,
                           cpu_index: Optional[int] = None) -> Dict[int, List[Tuple[float, float]]]:
        """``{gpu: [(time, watts), ...]}``, oldest first, samples within ``[start_time, end_time]``.

        Args:
            gpu_power_domain: ``"device_instant"`` (or None, the same).
            gpu_index: one GPU; None: every one.
            start_time, end_time: ``time.time()`` bounds; None: unbounded.
            cpu_power_domain, cpu_index: not kept here (ValueError when given).
        """
        if cpu_power_domain is not None or cpu_index is not None:
            raise ValueError("CPU power domains are not being monitored")
        _check_domain(gpu_power_domain)
        indices = [gpu_index] if gpu_index is not None else self.gpu_indices
        return {i: self._monitor.timeline(i, start_time, end_time) for i in indices if i in self.gpu_indices}

    def get_energy(self, start_time: float, end_time: float,
                   power_domain: Optional[object] = None) -> Optional[Dict[int, float]]:
        """Joules per GPU between two ``time.time()`` instants: the timeline integrated over exactly
        that span (linear between samples, held at the first and last); None without samples."""
        _check_domain(power_domain)
        return self._monitor.energy(start_time, end_time)

    def get_power(self, time: Optional[float] = None,
                  power_domain: Optional[object] = _DOMAIN) -> Optional[Dict[int, float]]:
        """Watts per GPU: the latest sample, or the one closest to ``time``; None without samples."""
        _check_domain(power_domain)
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
