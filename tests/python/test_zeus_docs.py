"""Every command and example of docs/zeus.md runs as written (Zeus's documented examples with only the
import changed): the power-limit loop, the single-GPU training script, data parallelism over two gloo
ranks, the Hugging Face callback (against a stand-in transformers), a selector of one's
own, and Zeus's pipeline-frequency server command with the training side."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from fakegpu import BINARY, FAKE_NVML, log_lines

pytestmark = pytest.mark.side_by_side

ROOT = Path(__file__).resolve().parents[2]
BLOCKS: List[Tuple[str, str]] = re.findall(r"```(\w+)\n(.*?)```", (ROOT / "docs" / "zeus.md").read_text(), re.S)


def block(language: str, starting: str) -> str:
    (found,) = [text for lang, text in BLOCKS if lang == language and starting in text.splitlines()[0]]
    return found


def test_every_block_is_tested() -> None:
    firsts = [(lang, text.splitlines()[0]) for lang, text in BLOCKS]
    assert firsts == [
        ("python", "import time"),
        ("console", "python3 examples/power_limit/train.py --epochs 3 --profile plo.json"),
        ("console", "python3 examples/power_limit/data_parallel.py --nproc 2"),
        ("python", "from transformers import Trainer"),
        ("python", "import time"),
        ("console", """ZEUS_PFO_SCHEDULER_ARGS='{"solution_path": "path/to/freqs_pipeline_00042.py"}' perseus serve --port 7787"""),
        ("python", "import torch.distributed as dist"),
        ("python", "from perseus.zeus.device import get_gpus"),
        ("console", "python -m perseus.zeus.monitor power --update-period 0.2"),
    ], "a new block in docs/zeus.md needs a test here"
    for _, text in BLOCKS:
        assert "import zeus" not in text and "from zeus" not in text


def environment(tmp_path: Path, **extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERSEUS_FAKE_NVML")}
    env.update(PERSEUS_NVML_LIBRARY=FAKE_NVML, PERSEUS_FAKE_NVML_LOG=str(tmp_path / "gpu%p.log"),
               PATH=f"{Path(BINARY).resolve().parent}:{os.environ['PATH']}" if BINARY else os.environ["PATH"])
    env.update(extra)
    return env


def run(command: List[str], tmp_path: Path, env: Dict[str, str], timeout: float = 120) -> str:
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def limits_set(tmp_path: Path) -> List[int]:
    return [int(f[3]) // 1000 for log in sorted(tmp_path.glob("gpu*.log")) for f in log_lines(str(log))
            if f[1] == "nvmlDeviceSetPowerManagementLimit" and f[-1] == "0"]


def test_the_power_limit_loop(tmp_path: Path) -> None:
    loop = [text for lang, text in BLOCKS if lang == "python" and "train_dataloader" in text][0]
    out = run([sys.executable, "-c", loop], tmp_path, environment(tmp_path))
    chosen = int(out.split("optimal power limit: ")[1].split(" W")[0])
    assert limits_set(tmp_path)[:6] == [400, 350, 300, 250, 200, 150]
    expected_end = [400] if chosen in (150, 400) else [chosen, 400]  # the optimum, then the maximum at exit
    assert limits_set(tmp_path)[6:] == expected_end


def test_the_single_gpu_script_profiles_then_reuses_its_profile(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    command = block("console", "python3 examples/power_limit/train.py").strip().split()
    command[0] = sys.executable
    env = environment(tmp_path)
    first = run(command, tmp_path, env)
    assert "epoch 2: " in first and "Done at" in first, first
    assert first.startswith(f"GPU library: {FAKE_NVML} (PERSEUS_NVML_LIBRARY) (perseus's fake NVML"), first
    chosen = int(first.split("optimal power limit: ")[1].split(" W")[0])
    measured = json.loads((tmp_path / "plo.json").read_text())["measurements"]
    assert [m["power_limit"] for m in measured] == [400, 350, 300, 250, 200, 150]
    assert set(measured[0]) == {"power_limit", "energy", "time"}
    again = run(command, tmp_path, env)
    assert f"epoch 0: loss" in again and f"Done at {chosen} W" in again, again
    assert json.loads((tmp_path / "plo.json").read_text())["measurements"] == measured, "loaded, not profiled again"


def test_data_parallel_ranks_agree_on_the_limit(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    command = block("console", "python3 examples/power_limit/data_parallel.py").strip().split()
    command[0] = sys.executable
    env = environment(tmp_path)
    del env["PERSEUS_NVML_LIBRARY"]  # as a user without GPUs runs it: the example picks the fake NVML
    if subprocess.run([sys.executable, "-c", "import perseus; perseus._Gpus().device_count()"], env=env).returncode == 0:
        command.append("--fake-gpu")  # this machine has a GPU: the test leaves it alone
    out = run(command, tmp_path, env)
    said = re.findall(r"rank (\d): GPU library: perseus's fake NVML \(simulated GPUs, not measurements\), (because|as)", out)
    assert sorted(rank for rank, _ in said) == ["0", "1"], out
    ranks = dict(re.findall(r"rank (\d): (optimal power limit \d+ W, measured \[.*?\)\])", out))
    assert set(ranks) == {"0", "1"}, out
    assert ranks["0"] == ranks["1"], "same limit, same all-reduced measurements"
    logs = sorted(tmp_path.glob("gpu*.log"))
    assert len(logs) == 2
    devices = sorted({f[2] for log in logs for f in log_lines(str(log)) if f[1] == "nvmlDeviceSetPowerManagementLimit"})
    assert devices == ["0", "1"], "each rank caps its own GPU"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


STAND_IN = Path(__file__).parent / "standins" / "transformers.py"


def test_the_hugging_face_callback(tmp_path: Path) -> None:
    (tmp_path / "stand_in").mkdir()
    shutil.copy(STAND_IN, tmp_path / "stand_in" / "transformers.py")
    preamble = "model = object()\ntraining_args = {'epochs': 2}\ntrain_dataset = range(600)\n"
    env = environment(tmp_path, PYTHONPATH=f"{tmp_path / 'stand_in'}:{os.environ.get('PYTHONPATH', '')}")
    out = run([sys.executable, "-c", preamble + block("python", "from transformers import Trainer")], tmp_path, env)
    assert "callbacks: ['transformers.TrainerCallback']" in out, out
    assert "state: optimal_power_limit=" in out, "11 limits x 50 steps after 1 wait step: done in the first epoch"
    assert limits_set(tmp_path)[:11] == list(range(400, 149, -25))


def test_a_selector_of_ones_own(tmp_path: Path) -> None:
    block_text = [text for lang, text in BLOCKS if lang == "python" and "class WithinBudget" in text][0]
    out = run([sys.executable, "-c", block_text], tmp_path, environment(tmp_path))
    assert out.startswith("optimal_power_limit="), out
    assert limits_set(tmp_path)[:3] == [400, 275, 150]


def test_zeus_pipeline_frequency_server_command_and_training_side(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    plan = tmp_path / "path" / "to" / "freqs_pipeline_00042.py"
    plan.parent.mkdir(parents=True)
    plan.write_text("[\n[('forward', 1395), ('forward', 1380), ('backward', 1200), ('backward', 1005)],\n]\n")
    env = environment(tmp_path)
    # The blocks' fixed ports (7787, 29531) may be held by other test runs on this machine: free ones instead.
    port = free_port()
    command = block("console", "ZEUS_PFO_SCHEDULER_ARGS").strip().replace("7787", str(port))
    training = block("python", "import torch.distributed").replace(":7787", f":{port}")
    training = training.replace(":29531", f":{free_port()}")
    server = subprocess.Popen(["bash", "-c", command], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    try:
        assert server.stdout is not None
        ready = server.stdout.readline()
        assert f"listening on http://127.0.0.1:{port} (scheduler PointSolution" in ready, ready
        out = run([sys.executable, "-c", training], tmp_path, env, timeout=60)
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    assert "+dp1+pp1+tp1+PointSolution+meta-llama/Llama-2-7b " in out, out
    assert "[('forward', 1395), ('forward', 1380), ('backward', 1200), ('backward', 1005)]" in out
    locked = [int(f[3]) for log in tmp_path.glob("gpu*.log") for f in log_lines(str(log))
              if f[1] == "nvmlDeviceSetGpuLockedClocks"]
    assert locked == [1395, 1380, 1200, 1005] * 3, "the plan from the first iteration, every iteration"


def test_devices_and_typed_environment_variables(tmp_path: Path) -> None:
    env = environment(tmp_path, PERSEUS_FAKE_NVML_GPUS="2", ZEUS_MAX_SLOWDOWN="1.25")
    out = run([sys.executable, "-c", block("python", "from perseus.zeus.device import get_gpus")], tmp_path, env)
    assert "2 GPU(s), Perseus Simulated GPU: power limits 150-400 W" in out, out
    assert "max slowdown: 1.25" in out, out


def test_the_monitor_command_until_ctrl_c(tmp_path: Path) -> None:
    command = block("console", "python -m perseus.zeus.monitor").strip().split()
    command[0] = sys.executable
    monitor = subprocess.Popen(command, cwd=tmp_path, env=environment(tmp_path), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert monitor.stdout is not None
        lines = [monitor.stdout.readline() for _ in range(2)]
        assert all("{'GPU0': 300.0}" in line for line in lines), lines
        monitor.send_signal(signal.SIGINT)
        out, err = monitor.communicate(timeout=60)
    finally:
        monitor.kill()
    assert monitor.returncode == 0, err
    assert "Total time (s):" in out and "Total energy (J): {'GPU0': " in out, out
