"""Zeus's monitors on perseus: CUDA's device numbering at every Python entry point (on a 4-GPU fake
NVML, each in a process of its own since the fake reads its GPU count once), RAPL energy from a
fake powercap tree (directly and through perseus gpud), the log file, and PowerMonitor's timeline."""
import ctypes
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

import perseus
from fakegpu import BINARY, FAKE_NVML
from perseus.zeus.monitor import Measurement, PowerMonitor, ZeusMonitor

SETTERS = ("nvmlDeviceSetGpuLockedClocks", "nvmlDeviceSetMemoryLockedClocks", "nvmlDeviceSetPowerManagementLimit")


def run_on_four_gpus(tmp_path, code, visible="2,3", **env):
    """Runs `code` in a fresh interpreter on 4 fake GPUs with CUDA_VISIBLE_DEVICES=`visible`;
    (its stdout, the fake NVML's call log as split lines)."""
    log = tmp_path / "nvml.log"
    environment = dict(os.environ, PERSEUS_FAKE_NVML_GPUS="4", PERSEUS_FAKE_NVML_LOG=str(log),
                       PERSEUS_FAKE_NVML_LOG_READS="1", PERSEUS_NVML_LIBRARY=FAKE_NVML, CUDA_VISIBLE_DEVICES=visible,
                       **env)
    environment.pop("PERSEUS_GPUD_SOCKET", None)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environment, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line.split() for line in open(log)] if log.exists() else []
    return proc.stdout, lines


def devices_set(lines):
    return sorted({int(f[2]) for f in lines if f[1] in SETTERS})


def devices_read(lines):
    return sorted({int(f[2]) for f in lines if f[1] == "nvmlDeviceGetTotalEnergyConsumption"})


def test_a_default_monitor_watches_the_visible_gpus_and_indices_are_cuda_s(tmp_path):
    out, lines = run_on_four_gpus(tmp_path, """
        import json
        from perseus.zeus.monitor import ZeusMonitor
        everything = ZeusMonitor(cpu_indices=[])
        one = ZeusMonitor(gpu_indices=[1], cpu_indices=[])
        one.begin_window("w")
        m = one.end_window("w")
        print(json.dumps([everything.gpu_indices, list(m.gpu_energy)]))
    """)
    assert json.loads(out) == [[0, 1], [1]]
    assert devices_read(lines) == [2, 3], "the default monitor reads GPUs 2 and 3"
    assert devices_set(lines) == []


def test_the_power_limit_optimizer_caps_only_the_mapped_gpu(tmp_path):
    out, lines = run_on_four_gpus(tmp_path, """
        import perseus
        from perseus.zeus.monitor import ZeusMonitor
        plo = perseus.GlobalPowerLimitOptimizer(ZeusMonitor(gpu_indices=[1], cpu_indices=[]), wait_steps=0,
                                                warmup_steps=1, profile_steps=1, pl_step=100)
        for _ in range(6):
            plo.on_step_begin()
            plo.on_step_end()
        plo.close()
    """)
    assert devices_set(lines) == [3]
    assert len([f for f in lines if f[1] == "nvmlDeviceSetPowerManagementLimit"]) >= 2


@pytest.mark.parametrize("client", ["perseus.Client", "perseus.torch.Client"])
def test_a_client_drives_the_mapped_gpu(tmp_path, serve, client):
    if client == "perseus.torch.Client" and not os.environ.get("PERSEUS_REQUIRE_TORCH"):
        pytest.importorskip("torch")
    url = serve("TwoFrequencies", '{"forward_freq": 1200, "backward_freq": 1005}')
    _, lines = run_on_four_gpus(tmp_path, f"""
        import perseus, perseus.torch
        with {client}(rank=0, device=1, server_url="{url}", fail_open=False) as c:
            with c.step():
                with c.instruction("forward"):
                    c.flush()
    """)
    assert devices_set(lines) == [3]
    assert ["1200", "1200"] in [f[3:5] for f in lines if f[1] == "nvmlDeviceSetGpuLockedClocks" and f[2] == "3"]


def test_a_torch_client_without_cuda_takes_the_first_visible_gpu(tmp_path, serve):
    if not os.environ.get("PERSEUS_REQUIRE_TORCH"):
        pytest.importorskip("torch")
    url = serve("AllMaxFrequency")
    _, lines = run_on_four_gpus(tmp_path, f"""
        import perseus.torch
        perseus.torch.Client(server_url="{url}", fail_open=False).close()
    """)
    assert devices_set(lines) == [2]


@pytest.mark.parametrize("visible,cuda_index,expected", [
    (None, 1, 1), ("2,3", 0, 2), (" 2, 3", 1, 3), ("3,1", 1, 1), ("GPU-fa4e0000-0000-4000-8000-000000000003", 0, 3),
], ids=["unset", "first-of-two", "spaces", "reordered", "uuid"])
def test_nvml_device_index(tmp_path, visible, cuda_index, expected):
    out, _ = run_on_four_gpus(tmp_path, f"""
        import os, perseus.torch
        if {visible!r} is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        print(perseus.torch.nvml_device_index({cuda_index}, {visible!r}))
    """)
    assert int(out) == expected


@pytest.mark.parametrize("visible,cuda_index,error", [
    ("2,3", 2, "GPU index 2: 2 GPUs are visible"), ("", 0, "0 GPUs are visible"),
    ("1,junk,2", 1, "1 GPU is visible"), ("MIG-4b6c1a0e-1b1f-5b4e-9c3a-0123456789ab", 0, "MIG instances"),
], ids=["out-of-range", "empty", "ends-at-invalid", "mig"])
def test_nvml_device_index_refuses_what_cuda_does_not_see(tmp_path, visible, cuda_index, error):
    out, _ = run_on_four_gpus(tmp_path, f"""
        import perseus.torch
        try:
            perseus.torch.nvml_device_index({cuda_index}, {visible!r})
        except ValueError as e:
            print(e)
    """)
    assert error in out


# A powercap tree: package 0 (counter range 1000 J) with a DRAM zone (range 65 J), package 1.
def write_tree(root, package0=1_000_000, dram0=2_000_000, package1=0):
    for zone, name, energy, limit in [("intel-rapl:0", "package-0", package0, 1_000_000_000),
                                      ("intel-rapl:0/intel-rapl:0:1", "dram", dram0, 65_000_000),
                                      ("intel-rapl:1", "package-1", package1, 1_000_000_000)]:
        (root / zone).mkdir(parents=True, exist_ok=True)
        (root / zone / "name").write_text(name + "\n")
        (root / zone / "max_energy_range_uj").write_text(f"{limit}\n")
        (root / zone / "energy_uj").write_text(f"{energy}\n")


@pytest.fixture
def gpu_env(monkeypatch):
    monkeypatch.setenv("PERSEUS_NVML_LIBRARY", FAKE_NVML)
    monkeypatch.delenv("PERSEUS_GPUD_SOCKET", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_cpu_and_dram_energy_from_rapl_with_a_wrap_around(tmp_path, monkeypatch, gpu_env):
    write_tree(tmp_path)
    monkeypatch.setenv("PERSEUS_POWERCAP_ROOT", str(tmp_path))
    monitor = ZeusMonitor()
    assert monitor.cpu_indices == [0, 1]
    monitor.begin_window("w")
    write_tree(tmp_path, package0=500_000, dram0=3_500_000, package1=7_000_000)  # package 0 wrapped at 1000 J
    m = monitor.end_window("w")
    assert isinstance(m, Measurement) and dataclasses.is_dataclass(m)
    assert m.cpu_energy == {0: pytest.approx(999.5), 1: pytest.approx(7.0)}
    assert m.dram_energy == {0: pytest.approx(1.5)}
    assert m.soc_energy is None
    assert m.total_energy == pytest.approx(sum(m.gpu_energy.values()))
    only = ZeusMonitor(cpu_indices=[1])
    only.begin_window("w")
    assert only.end_window("w").dram_energy is None, "package 1 has no DRAM zone"


def test_without_readable_rapl_cpu_energy_is_none_unless_asked_for(tmp_path, monkeypatch, gpu_env):
    monkeypatch.setenv("PERSEUS_POWERCAP_ROOT", str(tmp_path / "nothing"))
    monitor = ZeusMonitor()
    monitor.begin_window("w")
    m = monitor.end_window("w")
    assert m.cpu_energy is None and m.dram_energy is None and monitor.cpu_indices == []
    with pytest.raises(RuntimeError, match="RAPL"):
        ZeusMonitor(cpu_indices=[0])


def test_rapl_is_read_through_gpud_where_the_tree_is_unreadable(tmp_path, monkeypatch, gpu_env):
    served = tmp_path / "served"
    write_tree(served)
    mine = tmp_path / "mine"  # zones whose counters no one can read here (root neither)
    (mine / "intel-rapl:0").mkdir(parents=True)
    (mine / "intel-rapl:0" / "name").write_text("package-0\n")
    (mine / "intel-rapl:0" / "energy_uj").symlink_to(mine / "nowhere")
    monkeypatch.setenv("PERSEUS_POWERCAP_ROOT", str(mine))
    socket_path = tmp_path / "gpud.sock"
    gpud = subprocess.Popen([BINARY, "gpud", "--socket", str(socket_path), "--nvml", FAKE_NVML],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, PERSEUS_POWERCAP_ROOT=str(served)))
    try:
        assert "listening" in gpud.stdout.readline()
        monitor = ZeusMonitor(cpu_indices=[0], gpud_socket=str(socket_path))
        monitor.begin_window("w")
        write_tree(served, package0=4_000_000)
        assert monitor.end_window("w").cpu_energy == {0: pytest.approx(3.0)}
    finally:
        gpud.terminate()
        gpud.wait(timeout=10)


def test_windows_restart_cancel_and_the_log_file(tmp_path, gpu_env):
    log = tmp_path / "logs" / "zeus.csv"
    monitor = ZeusMonitor(gpu_indices=[0], cpu_indices=[], log_file=log, approx_instant_energy=True)
    monitor.begin_window("epoch")
    with pytest.raises(ValueError, match="Measurement window 'epoch' already exists"):
        monitor.begin_window("epoch")
    monitor.begin_window("epoch", restart=True)
    monitor.begin_window("cancelled")
    assert monitor.end_window("cancelled", cancel=True) == Measurement(time=0.0, gpu_energy={0: 0.0}, cpu_energy={})
    m = monitor.end_window("epoch")
    with pytest.raises(ValueError, match="Measurement window 'epoch' does not exist"):
        monitor.end_window("epoch")
    header, line = log.read_text().splitlines()
    assert header == "start_time,window_name,elapsed_time,gpu0_energy"
    start, name, elapsed, energy = line.split(",")
    assert name == "epoch" and float(elapsed) == m.time and float(energy) == m.gpu_energy[0]
    assert abs(float(start) - time.time()) < 3600
    with pytest.raises(ValueError, match="sync_execution_with"):
        ZeusMonitor(sync_execution_with="tensorflow")


class FakeGpuControl:
    """Sets the fake NVML's power limit of GPU 0 directly (the library perseus loaded: one state)."""

    def __init__(self):
        self.lib = ctypes.CDLL(FAKE_NVML)
        assert self.lib.nvmlInit_v2() == 0
        self.handle = ctypes.c_void_p()
        assert self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.handle)) == 0

    def set_limit(self, mw):
        assert self.lib.nvmlDeviceSetPowerManagementLimit(self.handle, ctypes.c_uint(mw)) == 0

    def close(self):
        self.set_limit(400_000)
        self.lib.nvmlShutdown()


def wait_for_samples(power, count):
    before = len(power._monitor.timeline(0))  # every sample, not only the changes the timeline lists
    while len(power._monitor.timeline(0)) < before + count:
        time.sleep(0.002)


def test_power_monitor_energy_matches_the_energy_counter(gpu_env):
    monitor = ZeusMonitor(cpu_indices=[])
    power = PowerMonitor(update_period=0.002)
    control = FakeGpuControl()
    try:
        # The window's counter reads lie between `start` and `end` and around the inner two: on a loaded
        # machine milliseconds may pass between a read and the clock next to it, so the counter's energy is
        # checked against the energy integrated over both spans.
        start = time.time()
        monitor.begin_window("w")
        inner_start = time.time()
        wait_for_samples(power, 30)
        power._monitor.sample()  # samples on both sides of the change, however the sampler is scheduled
        control.set_limit(200_000)
        power._monitor.sample()
        wait_for_samples(power, 30)
        inner_end = time.time()
        m = monitor.end_window("w")
        end = time.time()
    finally:
        power.stop()  # first: a sample taken across the limit's reset would carry a time inside the window
        control.close()
    outer = power.get_energy(start, end)[0]
    inner = power.get_energy(inner_start, inner_end)[0]
    assert 0.99 * inner <= m.gpu_energy[0] <= 1.01 * outer, (inner, m.gpu_energy[0], outer)
    watts = [w for _, w in power.get_power_timeline("device_instant", gpu_index=0)[0]]
    assert watts[0] == pytest.approx(300.0) and watts[1] < 201.0, "the timeline lists both limits' power"
    inside = power.get_power_timeline("device_instant", gpu_index=0, start_time=start, end_time=end)[0]
    assert [w for _, w in inside] == watts[1:], "as Zeus's: only the changes within the window"
    assert power.get_power(time=start)[0] == pytest.approx(300.0)


def test_the_documented_example_runs(tmp_path, gpu_env):
    text = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "energy-monitoring.md")).read()
    blocks = text.split("```python\n")[1:]
    assert len(blocks) == 1, "one example, run here"
    write_tree(tmp_path / "powercap")
    proc = subprocess.run([sys.executable, "-c", blocks[0].split("```")[0]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, PERSEUS_POWERCAP_ROOT=str(tmp_path / "powercap")))
    assert proc.returncode == 0, proc.stderr
    assert "step 2:" in proc.stdout and "CPUs {0: 0.0, 1: 0.0}" in proc.stdout
    assert (tmp_path / "energy.csv").read_text().count("\n") == 5, "the header and four windows"
