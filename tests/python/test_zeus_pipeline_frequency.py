"""perseus.zeus.PipelineFrequencyOptimizer speaks Zeus's protocol: against `perseus serve` (its Zeus
dialect, PointSolution with a Zeus-format plan) and against a stand-in of Zeus's own server (which
has no GET /info), the plan's clocks are locked from the first iteration; a server that is down
or a mismatching iteration leaves training at default clocks (fail_open=False: Zeus's RuntimeError)."""
from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from fakegpu import BUILD_TREE_RUN, FAKE_NVML, log_lines

dist = pytest.importorskip("torch.distributed")

from perseus.zeus.optimizer.pipeline_frequency import PipelineFrequencyOptimizer  # noqa: E402

PLAN = [("forward", 1395), ("forward", 1380), ("backward", 1410), ("backward", 1200)]
SHAPE = dict(rank=0, dp_rank=0, pp_rank=0, tp_rank=0, device_id=0, dp_degree=1, pp_degree=1, tp_degree=1,
             world_size=1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def one_rank(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("PERSEUS_NVML_LIBRARY", FAKE_NVML)
    open(os.environ["PERSEUS_FAKE_NVML_LOG"].replace("%p", str(os.getpid())), "a").close()  # log_lines() before any call
    # A file store, not a TCP port: a free port found beforehand may be taken by then (EADDRINUSE).
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'world'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def iterations(pfo: PipelineFrequencyOptimizer, names: List[str], count: int) -> None:
    for _ in range(count):
        pfo.on_step_begin()
        for name in names:
            pfo.on_instruction_begin(name)
            pfo.on_instruction_end(name)
        pfo.on_step_end()


def clock_calls(start: int) -> List[Any]:
    return [(f[1], int(f[3]) if f[1] == "nvmlDeviceSetGpuLockedClocks" else None) for f in log_lines()[start:]
            if "GpuLockedClocks" in f[1]]


def test_perseus_serve_zeus_dialect_plan_from_the_first_iteration(serve: Any, tmp_path: Any, one_rank: None) -> None:
    plan = tmp_path / "freqs_pipeline_00003.py"
    plan.write_text("[\n[" + ", ".join(f"('{n}', {c})" for n, c in PLAN) + "],\n]\n")
    url = serve("PointSolution", json.dumps({"solution_path": str(plan)}))
    start = len(log_lines())
    pfo = PipelineFrequencyOptimizer(**SHAPE, server_url=url, job_metadata="meta-llama/Llama-2-7b", fail_open=False)
    assert pfo.job_id is not None and pfo.job_id.endswith("+dp1+pp1+tp1+PointSolution+meta-llama/Llama-2-7b")
    assert pfo.freq_schedule == PLAN
    iterations(pfo, [n for n, _ in PLAN], 2)
    pfo.close()
    locked = [("nvmlDeviceSetGpuLockedClocks", c) for _, c in PLAN] * 2
    assert clock_calls(start) == locked + [("nvmlDeviceResetGpuLockedClocks", None)]


class ZeusServerStandIn(http.server.BaseHTTPRequestHandler):
    """Zeus's PFO server's three routes (and no /info: 404, as Zeus's)."""

    seen: List[Dict[str, Any]] = []

    def reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append({"path": self.path, "body": body})
        if self.path == "/register_job":
            self.reply(200, "2024-01-01-00-00-00+dp1+pp1+tp1+PointSolution+gpt")
        elif self.path.startswith("/register_rank/"):
            self.reply(200, None)
        else:
            self.reply(404, {"detail": "Not Found"})

    def do_GET(self) -> None:
        self.seen.append({"path": self.path})
        if self.path.startswith("/schedule/"):
            self.reply(200, {"rank": 0, "frequencies": [[n, c] for n, c in PLAN]})
        else:
            self.reply(404, {"detail": "Not Found"})

    def log_message(self, *args: Any) -> None:
        pass


def test_zeus_own_server_protocol(one_rank: None) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ZeusServerStandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ZeusServerStandIn.seen = []
    try:
        start = len(log_lines())
        pfo = PipelineFrequencyOptimizer(**SHAPE, server_url=f"http://127.0.0.1:{server.server_port}",
                                         job_metadata="gpt", fail_open=False)
        iterations(pfo, [n for n, _ in PLAN], 1)
        pfo.close()
    finally:
        server.shutdown()
    paths = [s["path"] for s in ZeusServerStandIn.seen]
    job = "2024-01-01-00-00-00+dp1+pp1+tp1+PointSolution+gpt"
    assert paths == ["/register_job", f"/register_rank/{job}", f"/schedule/{job}?rank=0"]
    assert ZeusServerStandIn.seen[0]["body"] == {"job_id": "", "pp_degree": 1, "dp_degree": 1, "tp_degree": 1,
                                                 "world_size": 1, "job_metadata": "gpt"}
    rank_info = ZeusServerStandIn.seen[1]["body"]
    assert rank_info["rank"] == 0 and rank_info["available_frequencies"][0] == 1410
    assert rank_info["available_frequencies"] == sorted(rank_info["available_frequencies"], reverse=True)
    assert [c for _, c in clock_calls(start)] == [c for _, c in PLAN] + [None]


def test_unreachable_server_keeps_default_clocks_or_raises_as_zeus(one_rank: None, caplog: Any) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    start = len(log_lines())
    pfo = PipelineFrequencyOptimizer(**SHAPE, server_url=url, request_timeout=5)
    assert not pfo.enabled and "training continues at default clocks" in caplog.text
    iterations(pfo, ["forward", "backward"], 2)
    assert clock_calls(start) == []
    with pytest.raises(RuntimeError):
        PipelineFrequencyOptimizer(**SHAPE, server_url=url, request_timeout=5, fail_open=False)


def test_an_iteration_unlike_the_plan_resets_the_clocks(serve: Any, tmp_path: Any, one_rank: None) -> None:
    plan = tmp_path / "freqs_pipeline_00001.py"
    plan.write_text("[\n[" + ", ".join(f"('{n}', {c})" for n, c in PLAN) + "],\n]\n")
    url = serve("PointSolution", json.dumps({"solution_path": str(plan)}))
    start = len(log_lines())
    pfo = PipelineFrequencyOptimizer(**SHAPE, server_url=url)
    iterations(pfo, ["forward", "backward", "forward", "backward"], 2)
    assert not pfo.enabled
    assert clock_calls(start) == [("nvmlDeviceSetGpuLockedClocks", 1395), ("nvmlDeviceResetGpuLockedClocks", None)]
    strict = PipelineFrequencyOptimizer(**SHAPE, server_url=url, fail_open=False)
    with pytest.raises(RuntimeError, match="The next expected instruction is not backward: forward"):
        iterations(strict, ["forward", "backward"], 1)
    strict.close()


RANK_SCRIPT = """
import sys
import torch.distributed as dist
from perseus.zeus.optimizer.pipeline_frequency import PipelineFrequencyOptimizer
rank, store, url = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
opt = PipelineFrequencyOptimizer(rank=rank, dp_rank=0, pp_rank=rank, tp_rank=0, device_id=rank, dp_degree=1,
                                 pp_degree=2, tp_degree=1, world_size=2, server_url=url, fail_open=False)
for _ in range(2):
    opt.on_step_begin()
    for name, _ in opt.freq_schedule:
        opt.on_instruction_begin(name)
        opt.on_instruction_end(name)
    opt.on_step_end()
opt.close()
dist.destroy_process_group()
"""


def test_two_pipeline_stages_each_follow_their_own_plan(serve: Any, tmp_path: Any) -> None:
    stages = [[("forward", 1395), ("forward", 1380), ("backward", 1410), ("backward", 1200)],
              [("forward", 1410), ("backward", 1410), ("forward", 1005), ("backward", 1395)]]
    plan = tmp_path / "freqs_pipeline_00003.py"
    plan.write_text("[\n" + "".join("[" + ", ".join(f"('{n}', {c})" for n, c in s) + "],\n" for s in stages) + "]\n")
    url = serve("PointSolution", json.dumps({"solution_path": str(plan)}))
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    store = str(tmp_path / "world")
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, PERSEUS_NVML_LIBRARY=FAKE_NVML, PERSEUS_FAKE_NVML_GPUS="2",
                   PERSEUS_FAKE_NVML_LOG=str(tmp_path / f"gpu{rank}.log"))
        procs.append(subprocess.Popen([sys.executable, str(script), str(rank), store, url], env=env,
                                      stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
    for rank, stage in enumerate(stages):
        calls = [(f[1], f[2], f[3]) for f in log_lines(str(tmp_path / f"gpu{rank}.log")) if "GpuLockedClocks" in f[1]]
        locked = [int(c) for name, device, c in calls if name == "nvmlDeviceSetGpuLockedClocks"]
        assert {device for _, device, _ in calls} == {str(rank)}, "each rank its own GPU"
        distinct = [c for i, (_, c) in enumerate(stage * 2) if i == 0 or c != (stage * 2)[i - 1][1]]
        assert locked == distinct, f"rank {rank}: its stage's clocks from the first iteration"
        assert calls[-1][0] == "nvmlDeviceResetGpuLockedClocks"


# Zeus's own client (the real `zeus` package's PipelineFrequencyOptimizer, httpx and nvidia-ml-py, its
# clock controller in a forked process) against `perseus serve` started with Zeus's documented command.
ZEUS_RANK_SCRIPT = """
import json, sys
import fake_cuda  # PyTorch sees the fake NVML's GPUs
import torch.distributed as dist
from zeus.optimizer.pipeline_frequency import PipelineFrequencyOptimizer
rank, store, url = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
opt = PipelineFrequencyOptimizer(rank=rank, dp_rank=0, pp_rank=rank, tp_rank=0, device_id=rank, dp_degree=1,
                                 pp_degree=2, tp_degree=1, world_size=2, server_url=url,
                                 job_metadata="meta-llama/Llama-2-7b")
for _ in range(3):
    opt.on_step_begin()
    for name, _ in opt.freq_schedule:
        opt.on_instruction_begin(name)
        opt.on_instruction_end(name)
    opt.on_step_end()
print(json.dumps({"job_id": opt.job_id, "schedule": opt.freq_schedule}))
dist.destroy_process_group()
"""


@pytest.mark.skipif(not BUILD_TREE_RUN, reason="the server's protocol, not the package: the build tree's suite")
def test_zeus_own_client_against_perseus_serve_with_zeus_documented_command(tmp_path: Any) -> None:
    pytest.importorskip("zeus.optimizer.pipeline_frequency")
    from fakegpu import BINARY

    stages = [[("forward", 1395), ("forward", 1380), ("backward", 1410), ("backward", 1200)],
              [("forward", 1410), ("backward", 1410), ("forward", 1005), ("backward", 1395)]]
    plan = tmp_path / "path" / "to" / "freqs_pipeline_00042.py"
    plan.parent.mkdir(parents=True)
    plan.write_text("[\n" + "".join("[" + ", ".join(f"('{n}', {c})" for n, c in s) + "],\n" for s in stages) + "]\n")
    docs = (Path(__file__).resolve().parents[2] / "docs" / "zeus.md").read_text()
    (command,) = [line for line in docs.splitlines() if line.startswith("ZEUS_PFO_SCHEDULER_ARGS=")]
    port = free_port()
    command = command.replace("7787", str(port))
    nvml = tmp_path / "nvml"
    nvml.mkdir()
    (nvml / "libnvidia-ml.so.1").symlink_to(FAKE_NVML)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERSEUS_FAKE_NVML", "CUDA_VISIBLE"))}
    env["PATH"] = f"{Path(BINARY).resolve().parent}:{env['PATH']}" if BINARY else env["PATH"]
    server = subprocess.Popen(["bash", "-c", command], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert server.stdout is not None
        ready = server.stdout.readline()
        assert f"listening on http://127.0.0.1:{port} (scheduler PointSolution" in ready, ready
        script = tmp_path / "zeus_rank.py"
        script.write_text(ZEUS_RANK_SCRIPT)
        rendezvous, procs = str(tmp_path / "world"), []
        for rank in (0, 1):
            rank_env = dict(env, LD_LIBRARY_PATH=f"{nvml}:{os.environ.get('LD_LIBRARY_PATH', '')}",
                            PERSEUS_FAKE_NVML_GPUS="2", PERSEUS_FAKE_NVML_LOG=str(tmp_path / f"gpu{rank}.log"),
                            PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
            procs.append(subprocess.Popen([sys.executable, str(script), str(rank), rendezvous, f"http://127.0.0.1:{port}"],
                                          env=rank_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err[-3000:]
            outputs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()

    job_id = outputs[0]["job_id"]
    assert outputs[1]["job_id"] == job_id, "rank 0 registered the job and broadcast its id"
    assert job_id.endswith("+dp1+pp1+tp1+PointSolution+meta-llama/Llama-2-7b".replace("pp1", "pp2")), job_id
    for rank, stage in enumerate(stages):
        assert [tuple(x) for x in outputs[rank]["schedule"]] == stage, f"rank {rank} fetched its stage's plan"
    # The server's records of the protocol: Zeus's JobInfo, both ranks with their GPUs' clocks.
    records = tmp_path / "dump" / job_id.replace("%", "%25").replace("/", "%2F")  # the records folder's name
    job = json.loads((records / "job.json").read_text())["job"]
    assert job == {"job_id": job_id, "pp_degree": 2, "dp_degree": 1, "tp_degree": 1, "world_size": 2,
                   "job_metadata": "meta-llama/Llama-2-7b"}
    ranks = json.loads((records / "ranks.json").read_text())
    assert [(r["rank"], r["pp_rank"], r["job_id"]) for r in sorted(ranks, key=lambda r: r["rank"])] == [
        (0, 0, job_id), (1, 1, job_id)]
    for rank in ranks:
        clocks = rank["available_frequencies"]
        assert clocks[0] == 1410 and clocks[-1] == 210 and clocks == sorted(clocks, reverse=True), rank
    # Zeus's controller (a forked process driving NVML through nvidia-ml-py) applied each stage's clocks.
    for rank, stage in enumerate(stages):
        calls = [(f[1], f[2], f[3]) for f in log_lines(str(tmp_path / f"gpu{rank}.log")) if "LockedClocks" in f[1]]
        assert {device for _, device, _ in calls} == {str(rank)}, "each rank its own GPU"
        assert calls[0] == ("nvmlDeviceSetMemoryLockedClocks", str(rank), "1593"), "memory at its highest clock"
        locked = [int(c) for name, _, c in calls if name == "nvmlDeviceSetGpuLockedClocks"]
        wanted = [1410] + [c for _, c in stage] * 3
        distinct = [c for i, c in enumerate(wanted) if i == 0 or c != wanted[i - 1]]
        assert locked == distinct, f"rank {rank}: the plan's clocks, each change once, from the first iteration"
        assert [name for name, _, _ in calls[-2:]] == ["nvmlDeviceResetMemoryLockedClocks",
                                                       "nvmlDeviceResetGpuLockedClocks"], "reset at exit"
