"""The examples never fake a GPU silently: perseus.select_gpu_library (what they call first) uses the
driver's NVML where it finds a GPU, the fake NVML only where it finds none or when asked, and its
line, which the examples print first, says which and why."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from fakegpu import FAKE_NVML

ROOT = Path(__file__).resolve().parents[2]
CHOOSE = "import os, perseus; print(perseus.select_gpu_library({args})); print(os.environ.get('PERSEUS_NVML_LIBRARY', '-'))"
FAKE_LINE = "GPU library: perseus's fake NVML (simulated GPUs, not measurements), "


def clean_environment(tmp_path: Path, **extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PERSEUS_FAKE_NVML") and k not in ("PERSEUS_NVML_LIBRARY", "PERSEUS_GPUD_SOCKET")}
    env["PERSEUS_FAKE_NVML_LOG"] = str(tmp_path / "gpu%p.log")
    env.update(extra)
    return env


def choose(tmp_path: Path, args: str = "", **extra: str) -> "list[str]":
    done = subprocess.run([sys.executable, "-c", CHOOSE.format(args=args)], env=clean_environment(tmp_path, **extra),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def a_driver(tmp_path: Path) -> str:
    """A folder whose libnvidia-ml.so.1 is the fake NVML: to dlopen, a machine with one GPU."""
    driver = tmp_path / "driver"
    driver.mkdir(exist_ok=True)
    (driver / "libnvidia-ml.so.1").symlink_to(FAKE_NVML)
    return str(driver)


def real_gpu_here() -> bool:
    return subprocess.run([sys.executable, "-c", "import perseus; assert perseus._Gpus().device_count() > 0"],
                          env={k: v for k, v in os.environ.items() if k != "PERSEUS_NVML_LIBRARY"},
                          capture_output=True).returncode == 0


def test_without_a_gpu_the_fake_is_used_and_the_line_says_why(tmp_path: Path) -> None:
    if real_gpu_here():
        pytest.skip("this machine has a GPU")
    line, library = choose(tmp_path)
    assert line.startswith(FAKE_LINE + "because no GPU was found: cannot load NVML (libnvidia-ml.so.1)"), line
    assert Path(library).resolve() == Path(FAKE_NVML).resolve() or "fake_nvml" in library


def test_where_a_gpu_is_found_it_is_used(tmp_path: Path) -> None:
    line, library = choose(tmp_path, LD_LIBRARY_PATH=a_driver(tmp_path), PERSEUS_FAKE_NVML_GPUS="2")
    assert line == "GPU library: the driver's NVML (libnvidia-ml.so.1), 2 GPUs", line
    assert library == "-", "nothing faked"


def test_the_fake_is_used_where_a_gpu_is_found_only_when_asked(tmp_path: Path) -> None:
    line, library = choose(tmp_path, "fake=True, fake_gpus=3", LD_LIBRARY_PATH=a_driver(tmp_path))
    assert line == FAKE_LINE + "as asked (--fake-gpu)", line
    assert "fake_nvml" in library


def test_a_library_named_in_the_environment_is_used_as_given(tmp_path: Path) -> None:
    line, library = choose(tmp_path, "fake=True", PERSEUS_NVML_LIBRARY="/opt/nvidia/libnvidia-ml.so.1")
    assert line == "GPU library: /opt/nvidia/libnvidia-ml.so.1 (PERSEUS_NVML_LIBRARY)", line
    assert library == "/opt/nvidia/libnvidia-ml.so.1"
    line, _ = choose(tmp_path, PERSEUS_NVML_LIBRARY=FAKE_NVML)
    assert line.endswith("(perseus's fake NVML: simulated GPUs, not measurements)"), line


def test_the_example_drives_the_gpu_it_finds_and_says_so(tmp_path: Path) -> None:
    """examples/power_limit/train.py on a machine with a GPU (the fake NVML as libnvidia-ml.so.1): its
    first line names the driver's NVML and its power limits go to that library."""
    pytest.importorskip("torch")
    env = clean_environment(tmp_path, LD_LIBRARY_PATH=a_driver(tmp_path))
    done = subprocess.run([sys.executable, str(ROOT / "examples/power_limit/train.py"), "--epochs", "1",
                           "--steps-per-epoch", "8", "--warmup-steps", "1", "--profile-steps", "1", "--pl-step", "125"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0] == "GPU library: the driver's NVML (libnvidia-ml.so.1), 1 GPU", done.stdout
    logs = list(tmp_path.glob("gpu*.log"))
    assert logs and "nvmlDeviceSetPowerManagementLimit" in logs[0].read_text()
