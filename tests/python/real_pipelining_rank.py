"""One rank of the real-PyTorch pipelining tests (test_pipelining_real.py): trains a small MLP cut
into `torch.distributed.pipelining.PipelineStage`s with PyTorch's own schedules over gloo on the
CPU, one process per pipeline rank, and writes what happened to `<out>/rank<R>.json`.

    python real_pipelining_rank.py PLAN.json RANK

The plan lists runs, done in order by every rank of the group (one process start for all):
- `bare`: the schedule without perseus, `steps` steps or as many as the run `steps_of` took;
- `hooked`: the same training with `perseus.torch.instrument_pipelining` against `perseus serve`,
  `steps` steps or, without, until the job has been deployed for 3 steps (at most `max_steps`).
  Recorded: every hook call the client got, the schedule in effect at each step, the span of the
  rank's fake NVML call log, the job's phase after each step and its status at the end (rank 0),
  and PyTorch's own record of the actions it ran: the profiler's `PP:` ranges of the runtime
  schedules, ScheduleGPipe's `Forward i` / `Backward i` ranges, and for Schedule1F1B, which names
  no ranges, the stage modules' forward and backward hooks;
- `hooked` with `kill_server_after`: rank 0 kills the server (`server_pid`) after that many steps;
- `hooked` with `hide`: PyTorch's internals changed the way `hide()` says before the hooks attach.
A run's losses (last stage, every step) and a digest of its parameters at the end let the test
compare runs bit for bit. The module's helpers (build, batch, digest) serve test_pipelining.py too.
"""
import functools
import hashlib
import json
import os
import signal
import sys
import time
import urllib.parse
import urllib.request
import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed import pipelining
from torch.distributed.pipelining import PipelineStage
from torch.profiler import ProfilerActivity, profile, record_function

import perseus
import perseus.torch

WIDTH = 16
BATCH = 12  # two rows per microbatch (6 microbatches)
SINGLE_STAGE = ("Schedule1F1B", "ScheduleGPipe")
V_SHAPED = ("ScheduleZBVZeroBubble", "ScheduleDualPipeV")


def stage_indices(schedule: str, rank: int, ranks: int, local: int):
    """The model stages this rank holds: one per loop round (stage r, r + ranks, ...), or the V of
    ZBV and DualPipeV (stage r going down, 2 * ranks - 1 - r coming back)."""
    if schedule in V_SHAPED:
        return [rank, 2 * ranks - 1 - rank]
    return [rank + k * ranks for k in range(local)]


def chunk(index: int, stages: int) -> nn.Module:
    """Model stage `index`: a linear layer and a tanh, the last stage's layer without one. The same
    weights in every run of a schedule (seeded by the stage)."""
    torch.manual_seed(1000 + index)
    layer = nn.Linear(WIDTH, WIDTH)
    return layer if index == stages - 1 else nn.Sequential(layer, nn.Tanh())


def batch(step: int):
    generator = torch.Generator().manual_seed(step)
    inputs = torch.randn(BATCH, WIDTH, generator=generator)
    return inputs, torch.sin(inputs)


def loss_fn(output, target):
    return ((output - target) ** 2).mean()


def digest(modules) -> str:
    h = hashlib.sha256()
    for module in modules:
        for name, tensor in sorted(module.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def build(run, rank, ranks):
    name, local = run["schedule"], run["local"]
    stages = ranks * local
    indices = stage_indices(name, rank, ranks, local)
    modules = [chunk(i, stages) for i in indices]
    pipeline_stages = [PipelineStage(m, i, stages, torch.device("cpu")) for m, i in zip(modules, indices)]
    schedule_class = getattr(pipelining, name)
    first = pipeline_stages[0] if name in SINGLE_STAGE else pipeline_stages
    schedule = schedule_class(first, run["microbatches"], loss_fn=loss_fn)
    optimizer = torch.optim.SGD([p for m in modules for p in m.parameters()], lr=0.05)
    return schedule, modules, indices, stages, optimizer


class Recorder:
    """Records the hook calls a client gets, and the schedule in effect at each step."""

    def __init__(self, client):
        self.calls, self.schedules, self.rounds = [], [], []
        self.client = client
        for what in ("on_step_begin", "on_step_end", "on_instruction_begin", "on_instruction_end"):
            setattr(client, what, self._wrap(what, getattr(client, what)))

    def _wrap(self, what, method):
        @functools.wraps(method)
        def call(*args):
            self.calls.append([what, *args])
            result = method(*args)
            if what == "on_step_begin":
                self.schedules.append(list(self.client.schedule))
                self.rounds.append(self.client.round)
            return result

        return call


def module_truth(schedule, modules, indices, record):
    """Schedule1F1B names no profiler ranges: each stage module's forward and the start of its
    backward (the gradient of its output arriving), from PyTorch's module hooks. The metadata
    inference the first step runs before the schedule's loop (while the schedule says its stage is
    not yet initialised) computes through the module too: it is no action of the schedule."""
    def note(kind, index):
        ready = schedule._stage_forward_initialized and schedule._stage_backward_initialized
        record.append(f"{index}{kind}" if ready else f"init {index}{kind}")

    handles = []
    for module, index in zip(modules, indices):
        handles.append(module.register_forward_pre_hook(lambda m, a, i=index: note("F", i)))
        handles.append(module.register_full_backward_pre_hook(lambda m, g, i=index: note("B", i)))
    return handles


def profiler_truth(prof, steps):
    """The actions PyTorch's runtime recorded, per step: PP:<action> (runtime schedules) or
    Forward i / Backward i (ScheduleGPipe) ranges, in order, assigned to the step range around them."""
    events = [(e.start_ns(), e.end_ns(), e.name()) for e in prof.profiler.kineto_results.events()]
    marks = sorted((s, e, int(n.split()[-1])) for s, e, n in events if n.startswith("test step "))
    actions = sorted((s, n) for s, _, n in events
                     if n.startswith("PP:") or n.startswith("Forward ") or n.startswith("Backward "))
    per_step = [[] for _ in range(steps)]
    for start, name in actions:
        for begin, end, step in marks:
            if begin <= start <= end:
                per_step[step].append(name)
    return per_step


def job_status(url, job_id):
    with urllib.request.urlopen(f"{url}/jobs/{urllib.parse.quote(job_id, safe='')}", timeout=10) as reply:
        return json.load(reply)


def hide(what):
    """PyTorch internals as a release perseus does not know could have them: `backward_signature`:
    PipelineStage.backward_one_chunk taking (*args, **kwargs), so that its full_backward argument
    cannot be found by name. Returns what undoes it."""
    assert what == "backward_signature", what
    original = PipelineStage.backward_one_chunk

    def backward_one_chunk(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    PipelineStage.backward_one_chunk = backward_one_chunk
    return lambda: setattr(PipelineStage, "backward_one_chunk", original)


def train(run, rank, ranks, steps):
    """One run; `steps` (None: until the job has been deployed for 3 steps, at most
    `max_steps`; rank 0 decides for all)."""
    schedule, modules, indices, stages, optimizer = build(run, rank, ranks)
    result = {"name": run["name"], "stages": indices, "losses": [], "warnings": []}
    hooked = run["mode"] == "hooked"
    undo = hide(run["hide"]) if run.get("hide") else None
    log = os.environ["PERSEUS_FAKE_NVML_LOG"]
    pipelining_handle = recorder = None
    truth_1f1b, steps_1f1b, handles, phases = [], [], [], []
    server_alive = hooked and run.get("kill_server_after") is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if hooked:
            result["log_start"] = os.path.getsize(log) if os.path.exists(log) else 0
            pipelining_handle = perseus.torch.instrument_pipelining(
                schedule, server_url=run["server"], nvml_library=os.environ["PERSEUS_FAKE_NVML"], report_every=1,
                model_name=run["name"], request_timeout=10.0, retry_for=30.0, heartbeat_interval=0.0)
            recorder = Recorder(pipelining_handle.client)
            result["job_id"] = pipelining_handle.client.job_id
            result["pipe_schedule"] = pipelining_handle.pipe_schedule
            result["perseus_schedule"] = pipelining_handle.perseus_schedule
            if run["schedule"] == "Schedule1F1B":
                handles = module_truth(schedule, modules, indices, truth_1f1b)
        with profile(activities=[ProfilerActivity.CPU]) if hooked else _nothing() as prof:
            step = 0
            while step < (steps if steps is not None else run["max_steps"]):
                if step == run.get("kill_server_after") and rank == 0:
                    os.kill(run["server_pid"], signal.SIGKILL)
                inputs, target = batch(step)
                losses = []
                args = (inputs,) if 0 in indices else ()
                with record_function(f"test step {step}"):
                    schedule.step(*args, target=target if stages - 1 in indices else None, losses=losses)
                steps_1f1b.append(len(truth_1f1b))
                optimizer.step()
                optimizer.zero_grad()
                result["losses"].append([loss.item().hex() for loss in losses])
                step += 1
                if hooked and pipelining_handle.client.enabled:
                    pipelining_handle.client.wait_for_server(10.0)  # a round per two steps, whatever the load
                if server_alive and rank == 0 and result["job_id"]:
                    phases.append(job_status(run["server"], result["job_id"])["phase"])
                if steps is None:  # rank 0 says whether the job has been deployed long enough
                    go = torch.tensor([int(rank != 0 or phases[-3:] != ["deployed"] * 3)])
                    dist.broadcast(go, src=0)
                    if not go.item():
                        break
        result["steps"] = step
        if hooked:
            result["truth"] = (_split(truth_1f1b, steps_1f1b) if run["schedule"] == "Schedule1F1B"
                               else profiler_truth(prof, step))
            for handle in handles:
                handle.remove()
            result["enabled"] = pipelining_handle.enabled
            result["client_enabled"] = pipelining_handle.client.enabled
            if server_alive and rank == 0 and result["job_id"]:
                result["phases"] = phases
                result["status"] = job_status(run["server"], result["job_id"])
            dist.barrier()
            pipelining_handle.close()
            result["log_end"] = os.path.getsize(log) if os.path.exists(log) else 0
            result["calls"], result["schedules"], result["rounds"] = \
                recorder.calls, recorder.schedules, recorder.rounds
        result["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught
                              if "perseus" in str(w.message)]
    if undo is not None:
        undo()
    result["digest"] = digest(modules)
    dist.barrier()
    return result


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _split(record, ends):
    out, begin = [], 0
    for end in ends:
        out.append(record[begin:end])
        begin = end
    return out


def main():
    plan_path, rank = sys.argv[1], int(sys.argv[2])
    with open(plan_path) as f:
        plan = json.load(f)
    ranks = plan["ranks"]
    dist.init_process_group("gloo", init_method=f"file://{plan['store']}", rank=rank, world_size=ranks)
    results = []
    for run in plan["runs"]:
        began = time.monotonic()
        steps = run.get("steps")
        if "steps_of" in run:  # as many steps as an earlier run took
            steps = next(r["steps"] for r in results if r["name"] == run["steps_of"])
        results.append(train(run, rank, ranks, steps))
        results[-1]["seconds"] = round(time.monotonic() - began, 3)
    dist.destroy_process_group()
    with open(os.path.join(plan["out"], f"rank{rank}.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
