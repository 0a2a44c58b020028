"""The real `zeus` 0.16 (PyPI) and perseus.zeus side by side, in one process on the same fake GPUs: the
fake NVML is `libnvidia-ml.so.1` for nvidia-ml-py as well (a link to it in a directory on
LD_LIBRARY_PATH), PyTorch sees its GPUs as CUDA devices (fake_cuda), and a replayed power trace
(PERSEUS_FAKE_NVML_REPLAY) gives every process — Zeus's power pollers included — the same power at
the same instant.

- ZeusMonitor: each window's time and per-GPU energy, from both, inside the bounds the trace gives
  for the instants around its begin and end (CUDA_VISIBLE_DEVICES reordering included); the log
  files' header and rows; no GPU without NVML; sync_execution_with='cupy'.
- PowerMonitor (Zeus's positional `update_period`): the same timelines of power changes (values
  equal, each change within a polling period of the trace's), the same domains and the same
  ValueError for a domain the GPUs lack.
- GlobalPowerLimitOptimizer, in Zeus's callback loop and as the Hugging Face callback: the same
  state after every hook, the same power limits on the GPUs in the same order, the same choice and
  the same saved profile, on replayed profiles (every selector, interrupted epochs) and on real
  monitors measuring emulated GPU work.

Each scenario runs in a child process that imports both packages (the fake GPUs are per process)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from fakegpu import FAKE_NVML, log_lines

pytest.importorskip("zeus")
pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
Trace = Dict[int, List[Tuple[float, float]]]  # per GPU: (time.time(), watts) from then on


def environment(tmp_path: Path, gpus: int = 1, **extra: str) -> Dict[str, str]:
    """A child's environment: the fake NVML for perseus and, as libnvidia-ml.so.1, for nvidia-ml-py."""
    lib = tmp_path / "nvml"
    if not lib.exists():
        lib.mkdir()
        (lib / "libnvidia-ml.so.1").symlink_to(FAKE_NVML)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERSEUS_FAKE_NVML", "CUDA_VISIBLE", "ZEUS"))}
    env.update(LD_LIBRARY_PATH=f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}", PERSEUS_NVML_LIBRARY=FAKE_NVML,
               PERSEUS_FAKE_NVML_GPUS=str(gpus), PERSEUS_FAKE_NVML_LOG=str(tmp_path / "gpu-%p.log"),
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def run_child(script: str, env: Dict[str, str], tmp_path: Path, timeout: float = 240) -> Any:
    """Runs `script` (dedented) in a child; its last stdout line is JSON, returned parsed."""
    path = tmp_path / f"child_{time.monotonic_ns()}.py"
    path.write_text(textwrap.dedent(script))
    done = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def joules(steps: List[Tuple[float, float]], start: float, end: float) -> float:
    """The trace's energy over [start, end], as the fake's counter counts it: from the first step on."""
    total = 0.0
    for i, (at, watts) in enumerate(steps):
        until = steps[i + 1][0] if i + 1 < len(steps) else float("inf")
        low, high = max(at, start), min(until, end)
        if high > low:
            total += watts * (high - low)
    return total


# ---------------------------------------------------------------------------------------------------
# ZeusMonitor

MONITOR_CHILD = """
    import json, os, time
    import fake_cuda
    from zeus.monitor import ZeusMonitor as ZeusZeusMonitor
    from perseus.zeus.monitor import ZeusMonitor

    zeus = ZeusZeusMonitor(cpu_indices=[], log_file="zeus.csv")
    perseus = ZeusMonitor(cpu_indices=[], log_file="perseus.csv")
    start = time.time() + 0.05
    with open("trace.tmp", "w") as trace:  # GPU 0 and 1 (NVML's numbering), from `start` on
        trace.write("time,gpu,power\\n")
        for gpu, steps in enumerate(json.loads(os.environ["TRACE"])):
            trace.write("".join(f"{start + offset!r},{gpu},{watts}\\n" for offset, watts in steps))
    os.rename("trace.tmp", "trace.csv")
    while time.time() < start + 0.05:
        time.sleep(0.01)
    windows = []

    def measure(name, seconds):
        t = [time.time()]
        zeus.begin_window(name); t.append(time.time())
        perseus.begin_window(name); t.append(time.time())
        time.sleep(seconds)
        t.append(time.time()); p = perseus.end_window(name)
        t.append(time.time()); z = zeus.end_window(name)
        t.append(time.time())
        windows.append({"name": name, "t": t, "zeus": [z.time, z.gpu_energy, z.cpu_energy, z.total_energy],
                        "perseus": [p.time, p.gpu_energy, p.cpu_energy, p.total_energy]})

    measure("across the first change", 0.5)
    measure("short", 0.05)
    measure("across the second change", 0.4)
    zeus.begin_window("cancelled"); perseus.begin_window("cancelled")
    cancelled = [perseus.end_window("cancelled", cancel=True).gpu_energy,
                 zeus.end_window("cancelled", cancel=True).gpu_energy]
    print(json.dumps({"indices": [zeus.gpu_indices, perseus.gpu_indices], "windows": windows,
                      "cancelled": cancelled, "start": start}))
"""


@pytest.mark.parametrize("visible", [None, "1,0"])
def test_zeus_monitor_windows_measure_the_same_trace(tmp_path: Path, visible: Optional[str]) -> None:
    offsets = [[(0.0, 250.0), (0.3, 120.0), (1.3, 310.0)], [(0.0, 90.0), (0.35, 200.0), (1.25, 60.0)]]
    env = environment(tmp_path, gpus=2, PERSEUS_FAKE_NVML_REPLAY=str(tmp_path / "trace.csv"),
                      TRACE=json.dumps(offsets))
    if visible:
        env["CUDA_VISIBLE_DEVICES"] = visible
    out = run_child(MONITOR_CHILD, env, tmp_path)
    trace: Trace = {gpu: [(out["start"] + offset, watts) for offset, watts in steps] for gpu, steps in enumerate(offsets)}
    assert out["indices"] == [[0, 1], [0, 1]]
    nvml_of = {0: 1, 1: 0} if visible else {0: 0, 1: 1}
    slack = 0.002 + 1e-9  # J: each counter reading is whole millijoules
    for window in out["windows"]:
        t = window["t"]
        for who, (outer, inner) in (("zeus", ((0, 5), (1, 4))), ("perseus", ((1, 4), (2, 3)))):
            seconds, energy, cpu, total = window[who]
            assert t[inner[1]] - t[inner[0]] <= seconds <= t[outer[1]] - t[outer[0]], (who, window["name"])
            assert cpu is None, "no CPU asked for"
            assert set(energy) == {"0", "1"}, who
            for index, measured in energy.items():
                steps = trace[nvml_of[int(index)]]
                low, high = joules(steps, t[inner[0]], t[inner[1]]), joules(steps, t[outer[0]], t[outer[1]])
                assert low - slack <= measured <= high + slack, (who, window["name"], index, low, measured, high)
            assert total == pytest.approx(sum(energy.values()))
        for index in ("0", "1"):  # Zeus's window holds perseus's: the difference is the trace between their edges
            steps = trace[nvml_of[int(index)]]
            gap = joules(steps, t[0], t[2]) + joules(steps, t[3], t[5])
            difference = window["zeus"][1][index] - window["perseus"][1][index]
            assert -2 * slack <= difference <= gap + 2 * slack, (window["name"], index)
    assert out["cancelled"] == [{"0": 0.0, "1": 0.0}] * 2
    zeus_log = (tmp_path / "zeus.csv").read_text().splitlines()
    perseus_log = (tmp_path / "perseus.csv").read_text().splitlines()
    assert zeus_log[0] == perseus_log[0] == "start_time,window_name,elapsed_time,gpu0_energy,gpu1_energy"
    assert [line.split(",")[1] for line in zeus_log[1:]] == [line.split(",")[1] for line in perseus_log[1:]] == [
        "across the first change", "short", "across the second change"]


def test_zeus_monitor_without_nvml_measures_no_gpu_as_zeus(tmp_path: Path) -> None:
    env = environment(tmp_path, PERSEUS_NVML_LIBRARY=str(tmp_path / "no-such-libnvidia-ml.so"))
    env["LD_LIBRARY_PATH"] = os.environ.get("LD_LIBRARY_PATH", "")
    out = run_child("""
        import json, time
        from zeus.monitor import ZeusMonitor as ZeusZeusMonitor
        from perseus.zeus.monitor import ZeusMonitor
        result = []
        for monitor in (ZeusZeusMonitor(cpu_indices=[]), ZeusMonitor(cpu_indices=[])):
            monitor.begin_window("w")
            time.sleep(0.05)
            m = monitor.end_window("w")
            result.append([monitor.gpu_indices, m.gpu_energy, m.time > 0.04])
        try:
            ZeusMonitor(gpu_indices=[0], cpu_indices=[])
            result.append("no error")
        except RuntimeError as error:
            result.append(str(error))
        print(json.dumps(result))
    """, env, tmp_path)
    assert out[0] == out[1] == [[], {}, True]
    assert "cannot load NVML" in out[2], out[2]


def test_sync_execution_with_cupy(tmp_path: Path) -> None:
    (tmp_path / "standin").mkdir()
    (tmp_path / "standin" / "cupy.py").write_text(textwrap.dedent("""
        '''A stand-in for CuPy: records which devices were synchronised.'''
        synchronized = []

        class _Device:
            def __init__(self, index):
                self.index = index

            def synchronize(self):
                synchronized.append(self.index)

        class cuda:
            Device = _Device
    """))
    env = environment(tmp_path, gpus=2)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "standin"), env["PYTHONPATH"]])
    out = run_child("""
        import json
        import cupy
        from zeus.monitor import ZeusMonitor as ZeusZeusMonitor
        from perseus.zeus.monitor import ZeusMonitor
        result = []
        for monitor in (ZeusZeusMonitor(cpu_indices=[], sync_execution_with="cupy"),
                        ZeusMonitor(cpu_indices=[], sync_execution_with="cupy")):
            cupy.synchronized.clear()
            monitor.begin_window("w")
            monitor.end_window("w")
            result.append(list(cupy.synchronized))
        try:
            ZeusMonitor(sync_execution_with="tensorflow")
        except ValueError as error:
            result.append(str(error))
        print(json.dumps(result))
    """, env, tmp_path)
    assert out[0] == out[1] == [0, 1, 0, 1], "each GPU synchronised at the window's begin and end"
    assert "sync_execution_with must be one of ('torch', 'jax', 'cupy')" in out[2]


# ---------------------------------------------------------------------------------------------------
# PowerMonitor

POWER_CHILD = """
    import json, os, time
    from zeus.monitor.power import PowerMonitor as ZeusPowerMonitor, PowerDomain as ZeusPowerDomain
    from perseus.zeus.monitor.power import PowerMonitor, PowerDomain
    from perseus.zeus.monitor import PowerMonitor as Exported

    if __name__ == "__main__":
        period = float(os.environ["PERIOD"])
        zeus = ZeusPowerMonitor([0, 1], period)  # Zeus's positional update_period
        perseus = PowerMonitor([0, 1], period)
        while zeus.get_power() is None or perseus.get_power() is None:
            time.sleep(0.01)
        steps = [float(x) for x in os.environ["STEPS"].split(",")]
        start = time.time()  # the trace starts as it is written: its first power is the first change
        powers = json.loads(os.environ["POWERS"])
        with open("trace.tmp", "w") as trace:
            trace.write("time,gpu,power\\n")
            for gpu, watts in enumerate(powers):
                for offset, w in zip(steps, watts):
                    trace.write(f"{start + offset!r},{gpu},{w}\\n")
        os.rename("trace.tmp", "trace.csv")
        end = start + steps[-1] + 0.4
        while time.time() < end + 3 * period:
            time.sleep(0.02)
        errors = []
        for monitor in (ZeusPowerMonitor, PowerMonitor):
            try:
                monitor([0], period, power_domains=["device_average"])
            except ValueError as error:
                errors.append(str(error))
        result = {
            "start": start, "end": end,
            "zeus": zeus.get_all_power_timelines(start_time=start, end_time=end),
            "perseus": perseus.get_all_power_timelines(start_time=start, end_time=end),
            "domains": [[d.value for d in zeus.measurement_domains], [d.value for d in perseus.measurement_domains]],
            "enums": [[(d.name, d.value) for d in ZeusPowerDomain], [(d.name, d.value) for d in PowerDomain]],
            "power": [zeus.get_power(), perseus.get_power()],
            "single": [zeus.get_power_timeline("device_instant", gpu_index=1, start_time=start, end_time=end),
                       perseus.get_power_timeline(PowerDomain.DEVICE_INSTANT, gpu_index=1, start_time=start,
                                                  end_time=end)],
            "energy": perseus.get_energy(start + 0.05, end),
            "errors": errors, "exported": Exported is PowerMonitor, "period": [zeus.update_period, perseus.update_period],
        }
        zeus.stop()
        perseus.stop()
        print(json.dumps(result))
"""


def test_power_monitor_timelines_follow_the_same_trace(tmp_path: Path) -> None:
    steps = [0.0, 0.4, 0.8, 1.2]
    powers = [[250.0, 120.0, 310.0, 180.0], [90.0, 200.0, 90.0, 260.0]]
    period = 0.05
    env = environment(tmp_path, gpus=2, PERSEUS_FAKE_NVML_REPLAY=str(tmp_path / "trace.csv"), PERIOD=repr(period),
                      STEPS=",".join(map(str, steps)), POWERS=json.dumps(powers))
    out = run_child(POWER_CHILD, env, tmp_path)
    start, lag = out["start"], 0.25  # a poll lands within a period of the change; a loaded machine adds more
    assert out["domains"] == [["device_instant"]] * 2, "the fake GPU reports instantaneous power only"
    assert out["enums"][0] == out["enums"][1]
    assert out["exported"] and out["period"] == [period, period]
    for who in ("zeus", "perseus"):
        timelines = out[who]
        assert list(timelines) == ["device_instant"]
        for gpu in (0, 1):
            timeline = timelines["device_instant"][str(gpu)]
            assert [w for _, w in timeline] == powers[gpu], (who, gpu, timeline)
            for (at, _), offset in zip(timeline, steps):
                assert start + offset <= at <= start + offset + period + lag, (who, gpu, at - start, offset)
    assert out["single"][0] == {"1": out["zeus"]["device_instant"]["1"]}
    assert out["single"][1] == {"1": out["perseus"]["device_instant"]["1"]}
    assert out["power"][0] == out["power"][1] == {"0": 180.0, "1": 260.0}
    for gpu in (0, 1):  # perseus integrates its samples over exactly the span asked
        trace = [(start + o, w) for o, w in zip(steps, powers[gpu])]
        expected = joules(trace, start + 0.05, out["end"])
        assert out["energy"][str(gpu)] == pytest.approx(expected, abs=3 * (period + lag) * 310.0)
    assert len(out["errors"]) == 2
    assert out["errors"][0] == out["errors"][1] == (
        "Requested power domain device_average is not supported by the current GPUs. "
        "Supported domains are: ['device_instant']")
