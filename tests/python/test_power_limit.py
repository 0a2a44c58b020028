"""Zeus's power-limit optimizer from Python on the fake NVML (whose power limits cap the clock,
so a lower limit draws less power): the limits it sets, the selector's choice, Zeus's profile
format, user-written selectors, Zeus's names and units (mW, state classes), and fail-open where
the GPU refuses limits."""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

import perseus
import perseus.zeus
from fakegpu import FAKE_NVML, log_lines


@pytest.fixture
def monitor(monkeypatch):
    monkeypatch.setenv("PERSEUS_NVML_LIBRARY", FAKE_NVML)
    return perseus.EnergyMonitor()


def limits_set_since(start):
    return [int(f[3]) // 1000 for f in log_lines()[start:] if f[1] == "nvmlDeviceSetPowerManagementLimit"]


def run_steps(optimizer, n, seconds=0.002):
    for _ in range(n):
        optimizer.on_step_begin()
        time.sleep(seconds)
        optimizer.on_step_end()


def test_monitor_windows_nest_and_overlap(monitor):
    monitor.begin_window("outer")
    monitor.begin_window("inner")
    time.sleep(0.02)
    inner = monitor.end_window("inner")
    outer = monitor.end_window("outer")
    assert monitor.gpu_indices == [0]
    assert 0 < inner.time <= outer.time
    assert 0 < inner.total_energy <= outer.total_energy
    assert set(outer.gpu_energy) == {0}
    with pytest.raises(ValueError, match="no measurement window 'inner'"):
        monitor.end_window("inner")
    monitor.begin_window("x", sync_execution=False)
    with pytest.raises(ValueError, match="already open"):
        monitor.begin_window("x")
    assert monitor.end_window("x", cancel=True).total_energy == 0


def test_optimizer_profiles_every_limit_and_keeps_the_least_energy(monitor, tmp_path):
    start = len(log_lines())
    profile = tmp_path / "plo.json"
    plo = perseus.GlobalPowerLimitOptimizer(monitor, perseus.Energy(), wait_steps=1, warmup_steps=1,
                                            profile_steps=3, pl_step=50, profile_path=profile)
    assert plo.power_limits == [400_000, 350_000, 300_000, 250_000, 200_000, 150_000]
    assert plo.state == perseus.Ready(next_power_limit=400_000, steps=2)
    run_steps(plo, 1)
    assert isinstance(plo.state, perseus.Ready), "wait_steps"
    run_steps(plo, 2)
    assert plo.state == perseus.Profiling(current_power_limit=400_000, steps=3)
    assert plo.current_power_limit == 400_000
    run_steps(plo, 22)  # 4 steps per limit (warm-up 1, profiling 3): the last ends at step 26
    assert isinstance(plo.state, perseus.Profiling)
    run_steps(plo, 1)
    least = min(plo.measurements, key=lambda m: m.energy).power_limit
    assert plo.state == perseus.Done(optimal_power_limit=least * 1000)
    assert [m.power_limit * 1000 for m in plo.measurements] == plo.power_limits
    saved = json.loads(profile.read_text())
    assert [m["power_limit"] * 1000 for m in saved["measurements"]] == plo.power_limits
    assert set(saved["measurements"][0]) == {"power_limit", "energy", "time"}
    plo.close()
    optimum_set = [least] if least != 150 else []  # not set again when it is the last limit measured
    restored = [400] if least != 400 else []
    assert limits_set_since(start) == [400, 350, 300, 250, 200, 150] + optimum_set + restored

    # The saved profile (Zeus's format, either way) skips profiling.
    again = perseus.zeus.GlobalPowerLimitOptimizer(monitor, perseus.zeus.Energy(), profile_path=str(profile))
    assert (again.state, again.current_power_limit) == (perseus.zeus.Done(optimal_power_limit=least * 1000), least * 1000)
    again.close()


def test_epoch_end_restarts_the_limit_and_user_selectors_choose(monitor):
    class Highest(perseus.OptimumSelector):
        def select(self, measurements):
            return max(m.power_limit for m in measurements)

    plo = perseus.GlobalPowerLimitOptimizer(monitor, Highest(), wait_steps=0, warmup_steps=1, profile_steps=2,
                                            pl_step=200)
    run_steps(plo, 3)
    assert (plo.state, plo.current_power_limit) == (perseus.Profiling(current_power_limit=400_000, steps=1), 400_000)
    plo.on_epoch_end()
    assert plo.state == perseus.Ready(next_power_limit=400_000, steps=1) and plo.measurements == []
    run_steps(plo, 8)
    assert plo.state == perseus.Done(optimal_power_limit=400_000)
    plo.close()


def test_selectors_check_their_arguments():
    with pytest.raises(ValueError):
        perseus.ZeusCost(1.5)
    with pytest.raises(ValueError):
        perseus.MaxSlowdownConstraint(0.5)
    m = [perseus.PowerLimitMeasurement(power_limit=300, energy=100.0, time=1.0),
         perseus.PowerLimitMeasurement(power_limit=200, energy=80.0, time=1.3)]
    assert perseus.MaxSlowdownConstraint(1.2).select(m) == 300
    assert perseus.zeus.ZeusCost(eta_knob=1.0).select(m) == 200
    with pytest.raises(ValueError):
        perseus.PowerLimitMeasurement(power_limit=0, energy=1.0, time=1.0)


def test_hugging_face_callback_shape(monitor):
    callback = perseus.HFGlobalPowerLimitOptimizer(monitor, wait_steps=0, warmup_steps=1, profile_steps=1, pl_step=250)
    callback.on_step_begin(None, None, None)
    callback.on_epoch_end(None, None, None, model=None, extra=1)
    assert isinstance(callback.optimizer.state, perseus.Ready)
    callback.optimizer.close()


def test_denied_limits_fail_open_or_raise_as_zeus(tmp_path):
    """Without permission perseus's optimizer warns and stands aside; fail_open=False raises Zeus's RuntimeError."""
    script = textwrap.dedent("""
        import sys
        import perseus
        from perseus.zeus import GlobalPowerLimitOptimizer, ZeusMonitor, Done
        plo = GlobalPowerLimitOptimizer(ZeusMonitor())
        assert not plo.enabled and isinstance(plo.state, Done), plo.state
        for _ in range(5):
            plo.on_step_begin(); plo.on_step_end()
        try:
            GlobalPowerLimitOptimizer(ZeusMonitor(), fail_open=False)
        except RuntimeError as error:
            print("raised:", error)
    """)
    env = dict(os.environ, PERSEUS_NVML_LIBRARY=FAKE_NVML, PERSEUS_FAKE_NVML_DENY="1",
               PERSEUS_FAKE_NVML_LOG=str(tmp_path / "gpu.log"))
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "raised: SYS_ADMIN capability is required" in run.stdout
    assert "power limit optimizer disabled" in run.stderr


def test_cuda_visible_devices_picks_the_gpu_the_optimizer_caps(tmp_path):
    """CUDA_VISIBLE_DEVICES=2,3 and a monitor of CUDA device 1: only NVML GPU 3's limit changes (a
    monitor's own nvml_gpu_indices, where it has them, are taken as they are)."""
    script = textwrap.dedent("""
        from types import SimpleNamespace
        from perseus.zeus import GlobalPowerLimitOptimizer
        class Monitor:
            gpu_indices = [1]
            def begin_window(self, key, sync_execution=True): pass
            def end_window(self, key, sync_execution=True, cancel=False):
                return SimpleNamespace(time=1.0, gpu_energy={1: 100.0}, total_energy=100.0)
        plo = GlobalPowerLimitOptimizer(Monitor(), wait_steps=0, warmup_steps=1, profile_steps=1, pl_step=250)
        for _ in range(5):
            plo.on_step_begin()
        print(plo.state)
        class Pinned(Monitor):
            nvml_gpu_indices = [0]
        GlobalPowerLimitOptimizer(Pinned(), pl_step=250).close()
    """)
    log = tmp_path / "gpu.log"
    env = dict(os.environ, PERSEUS_NVML_LIBRARY=FAKE_NVML, PERSEUS_FAKE_NVML_GPUS="4", PERSEUS_FAKE_NVML_LOG=str(log),
               CUDA_VISIBLE_DEVICES="2,3")
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("optimal_power_limit=")
    devices = [f[2] for f in log_lines(str(log)) if f[1] == "nvmlDeviceSetPowerManagementLimit"]
    assert devices and set(devices[:-1]) == {"3"} and devices[-1] == "0", devices


def test_a_bad_profile_names_its_file_and_field(monitor, tmp_path):
    profile = tmp_path / "plo.json"
    profile.write_text('{"measurements": [{"power_limit": 300, "energy": 1067.5, "time": 8.2}, '
                       '{"power_limit": "high", "energy": 1.0, "time": 1.0}]}')
    with pytest.raises(ValueError, match=r"plo.json: measurements\.1\.power_limit: "):
        perseus.GlobalPowerLimitOptimizer(monitor, profile_path=profile)
    profile.write_text('{"measurements": [{"power_limit": 300, "energy": 1067.5, "time": 8.2}')
    with pytest.raises(ValueError, match="plo.json: not a readable JSON power limit profile"):
        perseus.GlobalPowerLimitOptimizer(monitor, profile_path=profile)
