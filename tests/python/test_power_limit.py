"""Zeus's power-limit optimizer from Python on the fake NVML (whose power limits cap the clock,
so a lower limit draws less power): the limits it sets, the selector's choice, Zeus's profile
format, user-written selectors, Zeus's names, and two data-parallel ranks over torch.distributed
ending at the same limit."""
import json
import os
import socket
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
    assert plo.power_limits == [400, 350, 300, 250, 200, 150]
    assert plo.state == "Ready"
    run_steps(plo, 1)
    assert plo.state == "Ready", "wait_steps"
    run_steps(plo, 2)
    assert (plo.state, plo.current_power_limit) == ("Profiling", 400)
    run_steps(plo, 22)  # 4 steps per limit (warm-up 1, profiling 3): the last ends at step 26
    assert plo.state == "Profiling"
    run_steps(plo, 1)
    assert plo.state == "Done"
    assert plo.optimal_power_limit == 150, [(m.power_limit, m.energy) for m in plo.measurements]
    assert [m.power_limit for m in plo.measurements] == plo.power_limits
    saved = json.loads(profile.read_text())
    assert [m["power_limit"] for m in saved["measurements"]] == plo.power_limits
    assert set(saved["measurements"][0]) == {"power_limit", "energy", "time"}
    plo.close()
    assert limits_set_since(start) == [400, 350, 300, 250, 200, 150, 400], "the maximum restored at the end"

    # The saved profile (Zeus's format, either way) skips profiling.
    again = perseus.zeus.GlobalPowerLimitOptimizer(monitor, perseus.zeus.Energy(), profile_path=str(profile))
    assert (again.state, again.current_power_limit) == ("Done", 150)
    again.close()


def test_epoch_end_restarts_the_limit_and_user_selectors_choose(monitor):
    class Highest(perseus.OptimumSelector):
        def select(self, measurements):
            return max(m.power_limit for m in measurements)

    plo = perseus.GlobalPowerLimitOptimizer(monitor, Highest(), wait_steps=0, warmup_steps=1, profile_steps=2,
                                            pl_step=200)
    run_steps(plo, 3)
    assert (plo.state, plo.current_power_limit) == ("Profiling", 400)
    plo.on_epoch_end()
    assert plo.state == "Ready" and plo.measurements == []
    run_steps(plo, 8)
    assert plo.state == "Done" and plo.optimal_power_limit == 400
    plo.close()


def test_selectors_check_their_arguments():
    with pytest.raises(ValueError):
        perseus.ZeusCost(1.5)
    with pytest.raises(ValueError):
        perseus.MaxSlowdownConstraint(0.5)
    m = [perseus.PowerLimitMeasurement(300, 100.0, 1.0), perseus.PowerLimitMeasurement(200, 80.0, 1.3)]
    assert perseus.MaxSlowdownConstraint(1.2).select(m) == 300
    assert perseus.zeus.ZeusCost(eta_knob=1.0).select(m) == 200
    assert perseus.zeus.ZeusMonitor is perseus.EnergyMonitor


def test_hugging_face_callback_shape(monitor):
    callback = perseus.HFGlobalPowerLimitOptimizer(monitor, wait_steps=0, warmup_steps=1, profile_steps=1, pl_step=250)
    callback.on_step_begin(None, None, None)
    callback.on_epoch_end(None, None, None, model=None, extra=1)
    assert callback.optimizer.state == "Ready"
    callback.optimizer.close()


RANK_SCRIPT = textwrap.dedent("""
    import json, sys, time
    import torch.distributed as dist
    import perseus
    rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    seen = []
    class Record(perseus.OptimumSelector):
        def select(self, measurements):
            seen.extend((m.power_limit, m.energy, m.time) for m in measurements)
            return min(measurements, key=lambda m: m.energy).power_limit
    plo = perseus.GlobalPowerLimitOptimizer(perseus.EnergyMonitor(), Record(), wait_steps=0, warmup_steps=1,
                                            profile_steps=2, pl_step=100)
    for _ in range(16):
        plo.on_step_begin()
        time.sleep(0.003 * (1 + rank))  # rank 1 is slower: only the combined numbers agree
    json.dump({"state": plo.state, "optimal": plo.optimal_power_limit, "seen": seen}, open(out, "w"))
    plo.close()
    dist.destroy_process_group()
""")


def test_two_data_parallel_ranks_end_at_the_same_limit(tmp_path):
    pytest.importorskip("torch")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    env = dict(os.environ, PERSEUS_NVML_LIBRARY=FAKE_NVML)
    procs = []
    for rank in (0, 1):
        env_rank = dict(env, PERSEUS_FAKE_NVML_LOG=str(tmp_path / f"gpu{rank}.log"))
        procs.append(subprocess.Popen([sys.executable, str(script), str(rank), str(port), str(tmp_path / f"{rank}.json")],
                                      env=env_rank, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
    results = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1)]
    assert results[0]["state"] == results[1]["state"] == "Done"
    assert results[0]["seen"] == results[1]["seen"], "energy summed and time maximised over both ranks"
    assert results[0]["optimal"] == results[1]["optimal"]
    for rank in (0, 1):
        limits = [int(f[3]) // 1000 for f in log_lines(str(tmp_path / f"gpu{rank}.log"))
                  if f[1] == "nvmlDeviceSetPowerManagementLimit"]
        assert limits[-1] == 400 and results[rank]["optimal"] in limits


def test_the_example_finds_a_limit_and_reuses_its_profile(tmp_path):
    pytest.importorskip("torch")
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "power_limit", "train.py")
    profile = tmp_path / "plo.json"
    env = dict(os.environ, PERSEUS_NVML_LIBRARY=FAKE_NVML, PERSEUS_FAKE_NVML_LOG=str(tmp_path / "gpu.log"))
    first = subprocess.run([sys.executable, example, "--epochs", "3", "--profile", str(profile)], env=env,
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "epoch 2: " in first.stdout and "Done at" in first.stdout, first.stdout
    chosen = int(first.stdout.split("optimal power limit: ")[1].split(" W")[0])
    measured = json.loads(profile.read_text())["measurements"]
    assert [m["power_limit"] for m in measured] == [400, 350, 300, 250, 200, 150]
    assert chosen in (m["power_limit"] for m in measured)
    again = subprocess.run([sys.executable, example, "--epochs", "1", "--profile", str(profile)], env=env,
                           capture_output=True, text=True, timeout=120)
    assert f"epoch 0: loss" in again.stdout and f"Done at {chosen} W" in again.stdout, again.stdout


def test_zeus_pipeline_frequency_optimizer_learns_its_order_and_follows_the_server(serve, tmp_path, monkeypatch):
    """Zeus's PipelineFrequencyOptimizer, constructed as Zeus's docs show, over perseus's client."""
    dist = pytest.importorskip("torch.distributed")
    url = serve("TwoFrequencies", '{"forward_freq": 1200, "backward_freq": 1005}')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    start = len(log_lines())
    try:
        pfo = perseus.zeus.PipelineFrequencyOptimizer(
            rank=0, dp_rank=0, pp_rank=0, tp_rank=0, device_id=0, dp_degree=1, pp_degree=1, tp_degree=1,
            world_size=1, server_url=url, job_metadata="gpt3/xl", nvml_library=FAKE_NVML, report_every=2,
            fail_open=False)
        for _ in range(4):
            pfo.on_step_begin()
            for name in ("forward", "forward", "backward", "backward"):
                pfo.on_instruction_begin(name)
                pfo.on_instruction_end(name)
            pfo.on_step_end()
        client = pfo.client
        assert client is not None and client.enabled
        assert client.pipe_schedule == ["forward", "forward", "backward", "backward"]
        assert "+zeus+gpt3-xl+" in client.job_id and "+nmb2+TwoFrequencies" in client.job_id
        client.close()
    finally:
        dist.destroy_process_group()
    locked = [int(f[3]) for f in log_lines()[start:] if f[1] == "nvmlDeviceSetGpuLockedClocks"]
    assert 1200 in locked and 1005 in locked, "the server's clocks from the second iteration on"
