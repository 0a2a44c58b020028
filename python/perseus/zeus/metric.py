"""Zeus's ``zeus.metric``: energy and power as Prometheus metrics pushed to a Pushgateway, measured by
perseus's monitors. Needs ``prometheus_client``.

- :class:`EnergyHistogram`: each window's energy per GPU, CPU package and DRAM observed into
  histograms (``energy_monitor_{gpu,cpu,dram}_energy_joules``, labels ``window`` and ``index``),
  pushed when the window ends.
- :class:`EnergyCumulativeCounter`: while a window is open, the energy of every ``update_period``
  added to counters of the same names, pushed each period.
- :class:`PowerGauge`: while a window is open, each GPU's power every ``update_period`` into the gauge
  ``power_monitor_gpu_power_watts``, pushed each period.

The names, labels, buckets and push cadence are Zeus's. Zeus measures the two periodic metrics in a
spawned process per window; perseus measures them on a thread (its monitors release the GIL), so
nothing is re-imported and a window starts at once.
"""
from __future__ import annotations

import abc
import queue
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, push_to_gateway

from .monitor.energy import ZeusMonitor
from .monitor.energy import sync_execution as sync_execution_fn
from .monitor.power import PowerMonitor

__all__ = [
    "EnergyCumulativeCounter",
    "EnergyHistogram",
    "Metric",
    "MonitoringProcessState",
    "PowerGauge",
    "energy_monitoring_loop",
    "power_monitoring_loop",
]

_LABELS = ["window", "index"]


@dataclass
class MonitoringProcessState:
    """An open periodic window: the queue that stops it and the thread measuring it."""

    queue: Any
    proc: Any


class Metric(abc.ABC):
    """A metric measured over named windows."""

    @abc.abstractmethod
    def begin_window(self, name: str, sync_execution: bool = True) -> None:
        """Starts the window ``name``."""

    @abc.abstractmethod
    def end_window(self, name: str, sync_execution: bool = True) -> None:
        """Ends the window ``name`` and reports it."""


def _observe(histogram: Any, name: str, kind: str, values: Dict[int, float], low: float, high: float) -> None:
    for index, joules in values.items():
        histogram.labels(window=name, index=index).observe(joules)
        if joules > high:
            warnings.warn(f"{kind} {index} energy {joules} exceeds the maximum bucket value of {high}", stacklevel=3)
        if joules < low:
            warnings.warn(f"{kind} {index} energy {joules} exceeds the minimum bucket value of {low}", stacklevel=3)


class EnergyHistogram(Metric):
    """Each window's energy, observed into histograms and pushed when the window ends.

    Args:
        cpu_indices: CPU packages (RAPL) to measure.
        gpu_indices: GPUs to measure, as CUDA numbers them.
        pushgateway_url: the Prometheus Pushgateway.
        job: the job name the metrics are pushed under.
        gpu_bucket_range, cpu_bucket_range, dram_bucket_range: histogram buckets (J); none empty.
    """

    def __init__(self, cpu_indices: List[Any], gpu_indices: List[Any], pushgateway_url: str, job: str,
                 gpu_bucket_range: Sequence[float] = [50.0, 100.0, 200.0, 500.0, 1000.0],
                 cpu_bucket_range: Sequence[float] = [10.0, 50.0, 100.0, 500.0, 1000.0],
                 dram_bucket_range: Sequence[float] = [5.0, 10.0, 20.0, 50.0, 150.0]) -> None:
        for kind, buckets in (("GPU", gpu_bucket_range), ("CPU", cpu_bucket_range), ("DRAM", dram_bucket_range)):
            if not buckets:
                raise ValueError(f"{kind} bucket range cannot be empty. Please provide a valid range or omit the "
                                 "argument to use defaults.")
        self.gpu_bucket_range, self.cpu_bucket_range, self.dram_bucket_range = (
            gpu_bucket_range, cpu_bucket_range, dram_bucket_range)
        self.cpu_indices, self.gpu_indices = cpu_indices, gpu_indices
        self.pushgateway_url, self.job = pushgateway_url, job
        self.registry = CollectorRegistry()
        self.energy_monitor = ZeusMonitor(cpu_indices=cpu_indices, gpu_indices=gpu_indices)
        self.gpu_histograms: Optional[Histogram] = None
        self.cpu_histograms: Optional[Histogram] = None
        self.dram_histograms: Optional[Histogram] = None
        if gpu_indices:
            self.gpu_histograms = Histogram("energy_monitor_gpu_energy_joules", "GPU energy consumption", _LABELS,
                                            buckets=gpu_bucket_range, registry=self.registry)
        if cpu_indices:
            self.cpu_histograms = Histogram("energy_monitor_cpu_energy_joules", "CPU energy consumption", _LABELS,
                                            buckets=cpu_bucket_range, registry=self.registry)
            self.dram_histograms = Histogram("energy_monitor_dram_energy_joules", "DRAM energy consumption",
                                             _LABELS, buckets=dram_bucket_range, registry=self.registry)

    def begin_window(self, name: str, sync_execution: bool = True) -> None:
        """Starts measuring the window ``name``."""
        self.energy_monitor.begin_window(f"__EnergyHistogram_{name}", sync_execution=sync_execution)

    def end_window(self, name: str, sync_execution: bool = True) -> None:
        """Observes the window's energy into the histograms and pushes them."""
        measurement = self.energy_monitor.end_window(f"__EnergyHistogram_{name}", sync_execution=sync_execution)
        for histogram, kind, values, buckets in (
                (self.gpu_histograms, "GPU", measurement.gpu_energy, self.gpu_bucket_range),
                (self.cpu_histograms, "CPU", measurement.cpu_energy, self.cpu_bucket_range),
                (self.dram_histograms, "DRAM", measurement.dram_energy, self.dram_bucket_range)):
            if histogram is not None and values:
                _observe(histogram, name, kind, values, min(buckets), max(buckets))
        push_to_gateway(self.pushgateway_url, job=self.job, registry=self.registry)


class _Periodic(Metric):
    """Windows measured by a loop on a thread of their own until the window ends."""

    def __init__(self) -> None:
        self.window_state: Dict[str, MonitoringProcessState] = {}

    def _loop_args(self, name: str, stop: "queue.Queue[str]") -> Tuple[Any, ...]:
        raise NotImplementedError

    def _loop(self) -> Any:
        raise NotImplementedError

    def begin_window(self, name: str, sync_execution: bool = False) -> None:
        if name in self.window_state:
            raise ValueError(f"{type(self).__name__} metric '{name}' already exists.")
        if sync_execution:
            sync_execution_fn(self.gpu_indices)  # type: ignore[attr-defined]
        stop: "queue.Queue[str]" = queue.Queue()
        thread = threading.Thread(target=self._loop(), args=self._loop_args(name, stop), daemon=True,
                                  name=f"perseus-{type(self).__name__}-{name}")
        thread.start()
        self.window_state[name] = MonitoringProcessState(queue=stop, proc=thread)

    def end_window(self, name: str, sync_execution: bool = False) -> None:
        if name not in self.window_state:
            raise ValueError(f"No active monitoring process found for '{name}'.")
        if sync_execution:
            sync_execution_fn(self.gpu_indices)  # type: ignore[attr-defined]
        state = self.window_state.pop(name)
        state.queue.put("stop")
        state.proc.join(timeout=20)


class EnergyCumulativeCounter(_Periodic):
    """While a window is open, every ``update_period`` seconds' energy added to counters and pushed.

    Args:
        cpu_indices: CPU packages (RAPL) to measure.
        gpu_indices: GPUs to measure, as CUDA numbers them.
        update_period: seconds between pushes.
        pushgateway_url: the Prometheus Pushgateway.
        job: the job name the metrics are pushed under.
    """

    def __init__(self, cpu_indices: List[Any], gpu_indices: List[Any], update_period: int, pushgateway_url: str,
                 job: str) -> None:
        super().__init__()
        self.cpu_indices, self.gpu_indices = cpu_indices, gpu_indices
        self.update_period = update_period
        self.pushgateway_url, self.job = pushgateway_url, job

    def _loop(self) -> Any:
        return energy_monitoring_loop

    def _loop_args(self, name: str, stop: "queue.Queue[str]") -> Tuple[Any, ...]:
        return (name, stop, self.cpu_indices, self.gpu_indices, self.update_period, self.pushgateway_url, self.job)


def energy_monitoring_loop(name: str, pipe: Any, cpu_indices: List[Any], gpu_indices: List[Any], update_period: int,
                           pushgateway_url: str, job: str) -> None:
    """Adds each ``update_period``'s energy to the counters and pushes them, until ``pipe`` (a queue)
    holds anything."""
    registry = CollectorRegistry()
    monitor = ZeusMonitor(cpu_indices=cpu_indices, gpu_indices=gpu_indices)
    counters: Dict[str, Optional[Counter]] = {"gpu": None, "cpu": None, "dram": None}
    if monitor.gpu_indices:
        counters["gpu"] = Counter("energy_monitor_gpu_energy_joules", "GPU energy consumption", _LABELS,
                                  registry=registry)
    if monitor.cpu_indices:
        counters["cpu"] = Counter("energy_monitor_cpu_energy_joules", "CPU energy consumption", _LABELS,
                                  registry=registry)
        counters["dram"] = Counter("energy_monitor_dram_energy_joules", "DRAM energy consumption", _LABELS,
                                   registry=registry)
    key = f"__EnergyCumulativeCounter_{name}"
    while pipe.empty():
        monitor.begin_window(key, sync_execution=False)
        time.sleep(update_period)
        measurement = monitor.end_window(key, sync_execution=False)
        for kind, values in (("gpu", measurement.gpu_energy), ("cpu", measurement.cpu_energy),
                             ("dram", measurement.dram_energy)):
            counter = counters[kind]
            if counter is not None:
                for index, joules in (values or {}).items():
                    counter.labels(window=name, index=index).inc(joules)
        push_to_gateway(pushgateway_url, job=job, registry=registry)


class PowerGauge(_Periodic):
    """While a window is open, each GPU's power every ``update_period`` seconds into a gauge, pushed.

    Args:
        gpu_indices: GPUs to sample, as CUDA numbers them.
        update_period: seconds between samples and pushes.
        pushgateway_url: the Prometheus Pushgateway.
        job: the job name the metrics are pushed under.
    """

    def __init__(self, gpu_indices: List[Any], update_period: int, pushgateway_url: str, job: str) -> None:
        super().__init__()
        self.gpu_indices = gpu_indices
        self.update_period = update_period
        self.pushgateway_url, self.job = pushgateway_url, job

    def _loop(self) -> Any:
        return power_monitoring_loop

    def _loop_args(self, name: str, stop: "queue.Queue[str]") -> Tuple[Any, ...]:
        return (name, stop, self.gpu_indices, self.update_period, self.pushgateway_url, self.job)


def power_monitoring_loop(name: str, pipe: Any, gpu_indices: List[int], update_period: int, pushgateway_url: str,
                          job: str) -> None:
    """Sets each GPU's latest power into the gauge and pushes it every ``update_period`` seconds, until
    ``pipe`` (a queue) holds anything."""
    monitor = PowerMonitor(gpu_indices=gpu_indices, update_period=min(float(update_period), 0.1))
    registry = CollectorRegistry()
    gauges = Gauge("power_monitor_gpu_power_watts", "Records power consumption for GPU over time", _LABELS,
                   registry=registry)
    try:
        while pipe.empty():
            for index, watts in (monitor.get_power() or {}).items():
                gauges.labels(window=name, index=index).set(watts)
            try:
                push_to_gateway(pushgateway_url, job=job, registry=registry)
            except OSError as error:  # a Pushgateway away for a while must not end the window
                print(f"Error pushing metrics: {error}")
            time.sleep(update_period)
    finally:
        monitor.stop()
