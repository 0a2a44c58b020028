"""The Python monitors and Zeus's power-limit optimizer on AMD SMI: the same Python code, with
PERSEUS_GPU_LIBRARY=amdsmi and the fake AMD SMI (the fake NVML's simulated GPU shown as AMD SMI
shows an Instinct GPU), and NVML pointed at a file that does not exist, so nothing reaches it.
The fake AMD SMI is a build-tree library, beside the fake NVML: these run in the build tree's run."""
import os
import time

import pytest

import perseus
from fakegpu import BUILD_TREE_RUN, FAKE_NVML, log_lines
from perseus.zeus.monitor import PowerMonitor

FAKE_AMDSMI = os.path.join(os.path.dirname(FAKE_NVML), "libperseus_fake_amdsmi.so")

pytestmark = pytest.mark.skipif(not BUILD_TREE_RUN, reason="the fake AMD SMI is in the build tree only")


@pytest.fixture
def amd(monkeypatch):
    monkeypatch.setenv("PERSEUS_GPU_LIBRARY", "amdsmi")
    monkeypatch.setenv("PERSEUS_AMDSMI_LIBRARY", FAKE_AMDSMI)
    monkeypatch.setenv("PERSEUS_NVML_LIBRARY", "/no/such/libnvidia-ml.so.1")
    monkeypatch.delenv("PERSEUS_GPUD_SOCKET", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_the_energy_and_power_monitors_read_amd_smi(amd):
    monitor = perseus.EnergyMonitor()
    assert monitor.gpu_indices == [0]
    monitor.begin_window("w")
    time.sleep(0.05)
    m = monitor.end_window("w")
    assert 300 * 0.04 < m.gpu_energy[0] < 300 * 0.5, "the simulated GPU draws 300 W at its top clock"
    power = PowerMonitor(update_period=0.002)
    try:
        while not power._monitor.timeline(0):
            time.sleep(0.002)
        assert power.get_power()[0] == pytest.approx(300.0)
    finally:
        power.stop()


def test_the_power_limit_optimizer_sets_limits_through_amd_smi(amd):
    start = len(log_lines())  # the fake AMD SMI sets limits on the fake NVML's GPU, which logs them
    plo = perseus.GlobalPowerLimitOptimizer(perseus.EnergyMonitor(), perseus.Energy(), wait_steps=0, warmup_steps=1,
                                            profile_steps=1, pl_step=125)
    assert plo.power_limits == [400_000, 275_000, 150_000]
    for _ in range(8):
        plo.on_step_begin()
        time.sleep(0.002)
        plo.on_step_end()
    assert isinstance(plo.state, perseus.Done)
    plo.close()
    limits = [int(f[3]) // 1000 for f in log_lines()[start:] if f[1] == "nvmlDeviceSetPowerManagementLimit"]
    assert limits[:3] == [400, 275, 150]
    assert limits[-1] == 400, "closing puts back the limit the GPU had"
