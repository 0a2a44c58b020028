"""perseus.zeus.PipelineFrequencyOptimizer speaks Zeus's protocol: against `perseus serve` (its Zeus
dialect, PointSolution with a Zeus-format plan) and against a stand-in of Zeus's own server (which
has no GET /info), the plan's clocks are locked from the first iteration; a server that is down
or a mismatching iteration leaves training at default clocks (fail_open=False: Zeus's RuntimeError)."""
from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from typing import Any, Dict, Iterator, List

import pytest

from fakegpu import FAKE_NVML, log_lines

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
def one_rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PERSEUS_NVML_LIBRARY", FAKE_NVML)
    open(os.environ["PERSEUS_FAKE_NVML_LOG"].replace("%p", str(os.getpid())), "a").close()  # log_lines() before any call
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
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
rank, port, url = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
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
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, PERSEUS_NVML_LIBRARY=FAKE_NVML, PERSEUS_FAKE_NVML_GPUS="2",
                   PERSEUS_FAKE_NVML_LOG=str(tmp_path / f"gpu{rank}.log"))
        procs.append(subprocess.Popen([sys.executable, str(script), str(rank), port, url], env=env,
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
