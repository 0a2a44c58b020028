"""Zeus's power-limit state-machine scenarios, written with Zeus's API (state classes,
``on_epoch_begin``, mW) against ``perseus.zeus``: profiles replayed per power limit (time and energy
per step, shaped like Zeus's recorded ones but in the fake NVML's 150–400 W range), 5 η values × 4
interruption patterns, the limits checked in the fake NVML's call log, the selectors on the saved
profile, and the profile reloaded. The multi-GPU profiles run in a child process whose fake NVML
has 4 GPUs."""
from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace
from typing import Dict, Iterator, List, Tuple

import pytest

from fakegpu import FAKE_NVML
from perseus.zeus import ZeusCost
from perseus.zeus.optimizer.power_limit import (
    Done,
    Energy,
    GlobalPowerLimitOptimizer,
    MaxSlowdownConstraint,
    Ready,
    Time,
)

GPUS_HERE = int(os.environ.get("PERSEUS_FAKE_NVML_GPUS", "1"))

# Per power limit (W): seconds and each GPU's joules over 40 steps.
PROFILES: Dict[str, List[Tuple[float, ...]]] = {
    "compute-bound": [
        (400, 8.079, 2117.1), (375, 7.906, 2122.0), (350, 7.858, 2131.3), (325, 8.085, 2097.7),
        (300, 8.059, 2150.4), (275, 8.699, 2260.6), (250, 9.61, 2198.3), (225, 10.507, 2212.3),
        (200, 11.741, 2099.2), (175, 13.222, 2093.3), (150, 14.707, 2041.5)],
    "memory-bound": [
        (400, 6.081, 1274.6), (375, 5.967, 1241.3), (350, 5.887, 1234.8), (325, 5.95, 1217.1),
        (300, 5.91, 1172.6), (275, 5.882, 1207.1), (250, 6.015, 1250.3), (225, 6.084, 1158.3),
        (200, 6.083, 1015.6), (175, 6.512, 954.2), (150, 7.05, 892.6)],
    "noisy-time": [
        (400, 9.971, 2964.7), (375, 9.824, 2843.2), (350, 10.018, 3013.6), (325, 9.818, 2855.7),
        (300, 9.948, 2731.3), (275, 10.196, 2461.6), (250, 10.296, 2261.7), (225, 11.191, 2326.2),
        (200, 12.115, 2191.4), (175, 12.951, 1990.3), (150, 14.544, 1914.1)],
    "compute-bound-4gpu": [
        (400, 7.883, 2161.1, 2083.9, 2154.5, 2136.0), (375, 8.088, 2211.4, 2183.5, 2138.2, 2154.0),
        (350, 7.965, 2065.4, 2066.9, 2133.6, 2127.9), (325, 8.151, 2190.5, 2216.3, 2171.7, 2185.4),
        (300, 8.101, 2100.9, 2099.0, 2152.2, 2134.4), (275, 8.627, 2125.5, 2139.2, 2130.0, 2196.8),
        (250, 9.25, 2066.4, 2150.7, 2117.8, 2066.7), (225, 10.547, 2181.9, 2240.4, 2202.6, 2189.3),
        (200, 11.475, 2060.8, 2170.4, 2103.7, 2086.8), (175, 12.81, 2074.3, 2122.3, 2050.3, 2100.5),
        (150, 15.048, 2078.5, 2095.7, 2105.6, 2130.0)],
    "memory-bound-2gpu": [
        (400, 5.891, 1176.0, 1183.1), (375, 5.896, 1187.0, 1198.2), (350, 5.932, 1210.2, 1174.4),
        (325, 6.099, 1260.3, 1214.7), (300, 5.931, 1228.7, 1184.0), (275, 6.056, 1201.2, 1244.5),
        (250, 6.043, 1235.9, 1254.6), (225, 6.106, 1201.7, 1136.4), (200, 5.996, 995.9, 1034.3),
        (175, 6.339, 924.1, 918.0), (150, 6.794, 853.8, 850.4)],
}
PROFILE_STEPS = 40


def gpu_count(profile: str) -> int:
    return len(PROFILES[profile][0]) - 2


class FakeNvmlLog:
    """Reads the fake NVML's call log as it grows: the power limits set, per device."""

    def __init__(self) -> None:
        self.file = open(os.environ["PERSEUS_FAKE_NVML_LOG"].replace("%p", str(os.getpid())), "a+")
        self.file.seek(0, os.SEEK_END)
        self.limit_mw: Dict[int, int] = {}
        self.calls: List[Tuple[int, int]] = []  # (device, mW), each successful set

    def poll(self) -> None:
        for line in self.file:
            fields = line.split()
            if fields[1] == "nvmlDeviceSetPowerManagementLimit" and fields[-1] == "0":
                device, mw = int(fields[2]), int(fields[3])
                self.limit_mw[device] = mw
                self.calls.append((device, mw))

    def take_calls(self) -> List[Tuple[int, int]]:
        self.poll()
        calls, self.calls = self.calls, []
        return calls


class ReplayMonitor:
    """A pure-Python monitor with Zeus's interface: each training step costs the time and energy
    the profile recorded at the power limit the fake NVML has when the step runs."""

    def __init__(self, profile: str, nvml: FakeNvmlLog) -> None:
        self.table = {int(row[0]): row[1:] for row in PROFILES[profile]}
        self.gpu_indices = list(range(gpu_count(profile)))
        self.nvml = nvml
        self.now = 0.0
        self.energy = {i: 0.0 for i in self.gpu_indices}
        self.windows: Dict[str, Tuple[float, Dict[int, float]]] = {}

    def step(self) -> None:
        self.nvml.poll()
        row = self.table[self.nvml.limit_mw.get(0, 400_000) // 1000]
        self.now += row[0] / PROFILE_STEPS
        for i in self.gpu_indices:
            self.energy[i] += row[1 + i] / PROFILE_STEPS

    def begin_window(self, key: str, sync_execution: bool = True) -> None:
        assert key not in self.windows
        self.windows[key] = (self.now, dict(self.energy))

    def end_window(self, key: str, sync_execution: bool = True, cancel: bool = False) -> SimpleNamespace:
        start, energy = self.windows.pop(key)
        gpu_energy = {i: self.energy[i] - energy[i] for i in self.gpu_indices}
        return SimpleNamespace(time=self.now - start, gpu_energy=gpu_energy, total_energy=sum(gpu_energy.values()))


# The expected choices, from the profile tables (the optimizer measures the same numbers by steps).
def rows(profile: str) -> List[Tuple[int, float, float]]:
    return [(int(r[0]), r[1], sum(r[2:])) for r in PROFILES[profile]]


def expected_zeus_cost(profile: str, eta: float) -> int:
    max_power = max(w for w, _, _ in rows(profile)) * gpu_count(profile)
    return min(rows(profile), key=lambda r: eta * r[2] + (1 - eta) * max_power * r[1])[0]


def expected_slowdown(profile: str, factor: float) -> int:
    fastest = rows(profile)[0][1]
    return min(w for w, t, _ in rows(profile) if t <= factor * fastest)


def training_loop(plo: GlobalPowerLimitOptimizer, monitor: ReplayMonitor, steps_per_epoch: int, epochs: int,
                  wait_steps: int = 0) -> None:
    """Zeus's training loop, with each step costing what the profile says."""
    for epoch in range(epochs):
        plo.on_epoch_begin()
        for step in range(steps_per_epoch):
            plo.on_step_begin()
            if wait_steps > 0 and epoch == 0 and step < wait_steps:
                assert isinstance(plo.state, Ready)
            monitor.step()
            plo.on_step_end()
        plo.on_epoch_end()


PATTERNS = {  # limits measured per epoch, steps per epoch, epochs
    "never interrupted": lambda n: (n, 50 * n + 10, 3),
    "interrupted in warm-up": lambda n: (n // 2, 50 * (n // 2) + 5, 4),
    "interrupted in profiling": lambda n: (n // 3, 50 * (n // 3) + 15, 5),
    "interrupted at every limit's last profiling step": lambda n: (1, 50 + 50, n + 2),
}


def expected_calls(limits: List[int], per_epoch: int, optimal: int, gpus: int) -> List[Tuple[int, int]]:
    """Each limit set on every GPU from the highest down; an interrupted one is retried after the
    maximum; the optimum last unless it was the last limit measured (mW)."""
    calls: List[Tuple[int, int]] = []
    left, limit = sorted(limits, reverse=True), -1
    while left:
        for _ in range(per_epoch + 1):
            if not left:
                break
            limit = left.pop(0)
            calls += [(i, limit * 1000) for i in range(gpus)]
        else:
            calls += [(i, max(limits) * 1000) for i in range(gpus)]
            left.insert(0, limit)
    if limit != optimal:
        calls += [(i, optimal * 1000) for i in range(gpus)]
    return calls


def scenario_ids() -> Iterator[str]:
    return iter(name for name in PROFILES if gpu_count(name) <= GPUS_HERE and (GPUS_HERE == 1) == (gpu_count(name) == 1))


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvmlLog:
    monkeypatch.setenv("PERSEUS_NVML_LIBRARY", FAKE_NVML)
    return FakeNvmlLog()


@pytest.mark.parametrize("eta_knob", [0.00, 0.25, 0.50, 0.75, 1.00])
@pytest.mark.parametrize("pattern", list(PATTERNS))
@pytest.mark.parametrize("profile", list(scenario_ids()))
def test_power_limit_optimizer_scenario(nvml: FakeNvmlLog, profile: str, pattern: str, eta_knob: float,
                                        tmp_path: "os.PathLike[str]") -> None:
    monitor = ReplayMonitor(profile, nvml)
    gpus = len(monitor.gpu_indices)
    saved = os.path.join(tmp_path, "power_limit_optimizer.json")
    limits = [w for w, _, _ in rows(profile)]
    optimal = expected_zeus_cost(profile, eta_knob)

    plo = GlobalPowerLimitOptimizer(monitor, optimum_selector=ZeusCost(eta_knob=eta_knob, world_size=gpus),
                                    wait_steps=1, warmup_steps=10, profile_steps=40, pl_step=25, profile_path=saved)
    assert plo.power_limits == [w * 1000 for w in limits]
    per_epoch, steps_per_epoch, epochs = PATTERNS[pattern](len(limits))
    training_loop(plo, monitor, steps_per_epoch, epochs, wait_steps=1)

    assert plo.state == Done(optimal_power_limit=optimal * 1000)
    assert nvml.take_calls() == expected_calls(limits, per_epoch, optimal, gpus)

    # The selectors on the saved profile.
    for selector, chosen in [(Energy(), min(rows(profile), key=lambda r: r[2])[0]),
                             (Time(), min(rows(profile), key=lambda r: r[1])[0])] + [
            (MaxSlowdownConstraint(factor=f), expected_slowdown(profile, f))
            for f in [1.0, 1.1, 1.2, 1.5, 2.0, 3.0, 5.0, 100.0]]:
        loaded = GlobalPowerLimitOptimizer(monitor, optimum_selector=selector, profile_path=saved)
        assert isinstance(loaded.state, Done)
        assert loaded.state.optimal_power_limit == chosen * 1000, type(selector).__name__
        loaded.close()
    nvml.take_calls()

    # Loading the saved profile: the optimum at once, no profiling.
    again = GlobalPowerLimitOptimizer(monitor, optimum_selector=ZeusCost(eta_knob=eta_knob, world_size=gpus),
                                      warmup_steps=10, profile_steps=40, pl_step=25, profile_path=saved)
    training_loop(again, monitor, steps_per_epoch, 1)
    assert again.state == Done(optimal_power_limit=optimal * 1000)
    assert nvml.take_calls() == [(i, optimal * 1000) for i in range(gpus)]
    again.close()
    plo.close()
    nvml.take_calls()


@pytest.mark.skipif(GPUS_HERE != 1, reason="the child process itself")
def test_multi_gpu_profiles_on_a_four_gpu_fake_nvml(tmp_path: "os.PathLike[str]") -> None:
    env = dict(os.environ, PERSEUS_FAKE_NVML_GPUS="4", PERSEUS_NVML_LIBRARY=FAKE_NVML)
    env.pop("PERSEUS_FAKE_NVML_LOG", None)  # fakegpu names a log of the child's own
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
                          "-k", "test_power_limit_optimizer_scenario"],
                         env=env, cwd=os.path.dirname(__file__), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "40 passed" in run.stdout, run.stdout[-500:]


def test_hf_callback_signature_equals_the_optimizer_s() -> None:
    import inspect

    from perseus.zeus import HFGlobalPowerLimitOptimizer

    assert inspect.signature(GlobalPowerLimitOptimizer.__init__) == inspect.signature(HFGlobalPowerLimitOptimizer.__init__)
