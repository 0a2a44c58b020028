"""perseus.torch.instrument_pipelining against a stand-in of torch.distributed.pipelining
(pipelining_standin.py: PyTorch's schedule classes with the action lists PyTorch's generators give,
run the way PyTorch's runtime runs them; PyTorch >= 2.6 is not a Debian package)."""
import itertools
import os

import pytest

from fakegpu import FAKE_NVML, locked_clocks

import perseus
import perseus.torch
from perseus import _pipelining
from pipelining_standin import (
    B, F, OVERLAP_F_B, Schedule1F1B, ScheduleDualPipeV, ScheduleGPipe, ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, _Action, build)

KIND = {"F": "forward", "B": "backward", "I": "backward_input", "W": "backward_weight",
        "OVERLAP_F_B": "forward_backward"}

# (schedule, local stages per rank, perseus schedule): 2-4 ranks, 4-8 microbatches each.
CASES = [
    (Schedule1F1B, 1, "1f1b", ranks, microbatches) for ranks, microbatches in ((2, 4), (3, 6), (4, 8))
] + [
    (ScheduleGPipe, 1, "gpipe", 3, 4),
    (ScheduleInterleaved1F1B, 2, "interleaved", 2, 4),
    (ScheduleInterleaved1F1B, 2, "interleaved", 4, 8),
    (ScheduleInterleaved1F1B, 3, "interleaved", 2, 6),
] + [
    (ScheduleInterleavedZeroBubble, 1, "zb-h1", ranks, microbatches) for ranks, microbatches in ((2, 4), (3, 6), (4, 8))
] + [
    (ScheduleZBVZeroBubble, 2, "zbv", ranks, microbatches) for ranks, microbatches in ((2, 4), (3, 4), (4, 8))
] + [
    (ScheduleDualPipeV, 2, "dualpipev", ranks, microbatches) for ranks, microbatches in ((2, 4), (2, 6), (3, 6), (4, 8))
]


def case_id(case):
    schedule, local, _, ranks, microbatches = case
    return f"{schedule.__name__}-{ranks}ranks-{local}local-{microbatches}mb"


class Recorder:
    """A client that records its hooks; it may be told to fail."""

    def __init__(self, pipe_schedule=(), fail_on=None, error=RuntimeError("the GPU fell off the bus")):
        self.pipe_schedule = list(pipe_schedule)
        self.enabled = True
        self.synchronize = None
        self.calls = []
        self.fail_on, self.error = fail_on, error
        self.closed = None

    def _hook(self, call):
        if self.fail_on is not None and call.startswith(self.fail_on):
            raise self.error
        self.calls.append(call)

    def on_step_begin(self):
        self._hook("step_begin")

    def on_step_end(self):
        self._hook("step_end")

    def on_instruction_begin(self, name):
        self._hook(f"begin {name}")

    def on_instruction_end(self, name):
        self._hook(f"end {name}")

    def close(self, finished=True):
        self.closed = finished


def executed_kinds(schedule):
    """The instruction kinds of the compute actions the stand-in's runtime dispatched, in order."""
    return [KIND[a.computation_type.value] for a in schedule.executed]


def hook_calls(kinds):
    return ["step_begin"] + [c for k in kinds for c in (f"begin {k}", f"end {k}")] + ["step_end"]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_client_gets_each_ranks_actions_in_the_order_they_run(case):
    schedule_class, local, name, ranks, microbatches = case
    for rank in range(ranks):
        bare, bare_ran = build(schedule_class, rank, ranks, microbatches, local)
        bare.step("x", target="y")
        schedule, ran = build(schedule_class, rank, ranks, microbatches, local)
        client = Recorder(perseus.torch.pipe_schedule_of(schedule))
        pipelining = perseus.torch.instrument_pipelining(schedule, client=client)
        for _ in range(2):
            assert schedule.step("x", target="y") == "merged outputs"
        kinds = executed_kinds(schedule)[:len(executed_kinds(bare))]
        assert executed_kinds(schedule) == kinds * 2
        # The hooks change nothing the stages compute, nor its order.
        assert ran == bare_ran * 2
        # Per step: one instruction per compute action, an overlapped pair one forward_backward.
        assert client.calls == hook_calls(kinds) * 2, (rank, client.calls)
        # The order registered is the order that runs, and perseus's schedule of the same name.
        assert pipelining.pipe_schedule == kinds
        assert pipelining.perseus_schedule == (name, local)
        assert perseus.default_pipe_schedule(rank, ranks, microbatches, schedule=name, virtual_stages=local) == kinds


def test_the_actions_of_a_dualpipev_rank_include_overlapped_pairs_and_split_backwards():
    schedule, _ = build(ScheduleDualPipeV, 0, 2, 6)
    kinds = set(perseus.torch.pipe_schedule_of(schedule))
    assert kinds == {"forward", "backward", "backward_input", "backward_weight", "forward_backward"}
    pair = next(a for a in schedule.pipeline_order[0] if a.computation_type == OVERLAP_F_B)
    assert [s.computation_type for s in pair.sub_actions] == [F, B]


def test_interleaved_zero_bubble_with_two_stages_per_rank_has_no_perseus_schedule_but_is_measured():
    schedule, _ = build(ScheduleInterleavedZeroBubble, 1, 2, 4, local=2)
    assert perseus.torch.perseus_schedule_of(schedule) is None
    client = Recorder(perseus.torch.pipe_schedule_of(schedule))
    pipelining = perseus.torch.instrument_pipelining(schedule, client=client)
    schedule.step()
    assert pipelining.perseus_schedule is None
    assert client.calls == hook_calls(executed_kinds(schedule))
    assert client.pipe_schedule.count("backward_weight") == 8  # 4 microbatches through 2 local stages


def test_single_stage_schedules_without_a_pipeline_order_get_perseus_order():
    """Schedule1F1B and ScheduleGPipe had no pipeline_order before PyTorch 2.8."""
    for schedule_class, name in ((Schedule1F1B, "1f1b"), (ScheduleGPipe, "gpipe")):
        schedule, _ = build(schedule_class, 1, 3, 5, with_pipeline_order=False)
        client = Recorder(perseus.default_pipe_schedule(1, 3, 5, schedule=name))
        perseus.torch.instrument_pipelining(schedule, client=client)
        schedule.step()
        assert client.calls == hook_calls(executed_kinds(schedule))
        assert perseus.torch.pipe_schedule_of(schedule) == executed_kinds(schedule)


def test_a_custom_function_is_one_instruction_of_its_action():
    schedule, ran = build(ScheduleDualPipeV, 1, 2, 4)

    def overlapped(action, ctx):  # e.g. a fused forward/backward: runs both parts through the stages
        stages = {s.stage_index: s for s in ctx["schedule_ref"]._stages}
        forward, backward = action.sub_actions
        stages[forward.stage_index].forward_one_chunk(forward.microbatch_index, (), {})
        stages[backward.stage_index].backward_one_chunk(backward.microbatch_index, full_backward=True)

    schedule.register_custom_function(OVERLAP_F_B, overlapped)  # before the hooks
    client = Recorder(perseus.torch.pipe_schedule_of(schedule))
    pipelining = perseus.torch.instrument_pipelining(schedule, client=client)
    schedule.step()
    assert client.calls == hook_calls(executed_kinds(schedule))
    pipelining.detach()
    assert schedule._comp_type_to_function_map == {OVERLAP_F_B: overlapped}

    later, _ = build(ScheduleDualPipeV, 1, 2, 4)
    client = Recorder(perseus.torch.pipe_schedule_of(later))
    later_pipelining = perseus.torch.instrument_pipelining(later, client=client)
    later.register_custom_function(OVERLAP_F_B, overlapped)  # after the hooks
    later.step()
    assert client.calls == hook_calls(executed_kinds(later))
    assert "begin forward_backward" in client.calls
    # Detaching leaves the schedule's own functions, those registered after the hooks too.
    later_pipelining.detach()
    assert later._comp_type_to_function_map == {OVERLAP_F_B: overlapped} and "register_custom_function" not in vars(later)


def test_evaluation_is_not_measured_and_detach_restores():
    schedule, ran = build(ScheduleZBVZeroBubble, 0, 2, 4)
    stage = schedule._stages[0]
    client = Recorder(perseus.torch.pipe_schedule_of(schedule))
    pipelining = perseus.torch.instrument_pipelining(schedule, client=client)
    schedule.eval("x")
    assert client.calls == [] and ran and all(kind == "F" for _, kind, _, _ in ran)
    pipelining.detach()
    assert "step" not in vars(schedule) and "forward_one_chunk" not in vars(stage)
    schedule.step()
    assert client.calls == []


@pytest.mark.parametrize("fail_on", ["step_begin", "begin backward_input", "end forward_backward", "step_end"])
def test_a_failing_hook_never_breaks_the_training_step(fail_on):
    bare, bare_ran = build(ScheduleDualPipeV, 0, 2, 6)
    bare.step()
    schedule, ran = build(ScheduleDualPipeV, 0, 2, 6)
    client = Recorder(perseus.torch.pipe_schedule_of(schedule), fail_on=fail_on)
    perseus.torch.instrument_pipelining(schedule, client=client)
    hook = {"step_begin": "on_step_begin", "begin": "on_instruction_begin", "end": "on_instruction_end",
            "step_end": "on_step_end"}[fail_on.split()[0]]
    with pytest.warns(RuntimeWarning, match=f"perseus: {hook} failed \\(RuntimeError: the GPU fell off the bus\\).*"
                                            "training goes on"):
        assert schedule.step() == "merged outputs"
    assert schedule.step() == "merged outputs"
    assert ran == bare_ran * 2
    # One warning, then the hooks stand aside: nothing after the failure reaches the client.
    kinds = executed_kinds(bare)
    assert client.calls == list(itertools.takewhile(lambda c: not c.startswith(fail_on), hook_calls(kinds)))


def test_an_order_the_hooks_cannot_read_never_breaks_the_training_step():
    bare, bare_ran = build(ScheduleDualPipeV, 0, 2, 4)
    bare.step()
    schedule, ran = build(ScheduleDualPipeV, 0, 2, 4)
    order = schedule.pipeline_order[0]  # pairs whose sub-actions the hooks cannot read
    for i, action in enumerate(order):
        if action.computation_type == OVERLAP_F_B:
            order[i] = _Action(-1, OVERLAP_F_B, None, 42)
    client = Recorder(perseus.torch.pipe_schedule_of(schedule))
    perseus.torch.instrument_pipelining(schedule, client=client)
    assert schedule.step() == "merged outputs" and ran == bare_ran
    # Each part of a pair is then measured as what its stage method runs.
    assert client.calls[:2] == ["step_begin", "begin forward"] and "begin forward_backward" not in client.calls


def test_perseus_signals_pass_through():
    schedule, _ = build(Schedule1F1B, 0, 2, 4)
    client = Recorder(perseus.torch.pipe_schedule_of(schedule), fail_on="step_end",
                      error=perseus.ProfilingDone("[profiling-done]"))
    perseus.torch.instrument_pipelining(schedule, client=client)
    with pytest.raises(perseus.ProfilingDone):
        schedule.step()


def test_a_client_with_another_order_is_warned_about():
    schedule, _ = build(ScheduleZBVZeroBubble, 1, 2, 4)
    with pytest.warns(UserWarning, match=r"not the order ScheduleZBVZeroBubble runs on rank 1 \(first difference at "
                                         r"instruction 1: backward registered, forward run\)"):
        perseus.torch.instrument_pipelining(schedule, client=Recorder(perseus.default_pipe_schedule(1, 2, 4)))


def test_refuses_what_is_not_a_schedule():
    with pytest.raises(TypeError, match="not a torch.distributed.pipelining schedule"):
        perseus.torch.instrument_pipelining(object(), client=Recorder())
    schedule, _ = build(Schedule1F1B, 0, 2, 4)
    with pytest.raises(TypeError, match=r"client options \(server_url\) given with a client"):
        perseus.torch.instrument_pipelining(schedule, client=Recorder(), server_url="http://x")


@pytest.mark.parametrize("schedule_class", [ScheduleZBVZeroBubble, ScheduleDualPipeV, ScheduleInterleavedZeroBubble],
                         ids=lambda c: c.__name__)
def test_a_real_client_follows_the_order_and_locks_each_instructions_clock(serve, schedule_class):
    """One pipeline rank (its two V stages for ZBV and DualPipeV): a client that raises on any
    instruction out of its registered order; forwards at one clock, every other instruction (an
    overlapped pair too) at the other, as TwoFrequencies plans them."""
    url = serve("TwoFrequencies", '{"forward_freq": 1200, "backward_freq": 1005}')
    schedule, _ = build(schedule_class, 0, 1, 4)
    with _pipelining.instrument_pipelining(schedule, None, perseus.Client, rank=0, server_url=url,
                                           nvml_library=FAKE_NVML, report_every=1, fail_open=False,
                                           strict_schedule=True) as pipelining:
        name, local = pipelining.perseus_schedule
        assert pipelining.client.pipe_schedule == perseus.default_pipe_schedule(0, 1, 4, name, local)
        before = len(locked_clocks())
        for _ in range(3):  # rounds after the first begin with a switch-over iteration
            schedule.step()
        pipelining.client.flush()
        assert pipelining.client.enabled and pipelining.client.round == 2
        clocks = [1200 if kind == "forward" else 1005 for kind in executed_kinds(schedule)]
        assert locked_clocks()[before:] == [c for c, _ in itertools.groupby(clocks)]


def test_perseus_torch_makes_the_client_from_the_schedule(serve):
    if not os.environ.get("PERSEUS_REQUIRE_TORCH"):  # CI sets it: there, a missing torch is a failure
        pytest.importorskip("torch")  # perseus.torch.Client asks torch for the rank and the device
    url = serve("AllMaxFrequency")
    schedule, _ = build(ScheduleDualPipeV, 0, 1, 4)
    with perseus.torch.instrument_pipelining(schedule, server_url=url, nvml_library=FAKE_NVML, fail_open=False,
                                             model_name="gpt") as pipelining:
        assert isinstance(pipelining.client, perseus.torch.Client)
        assert pipelining.client.job_id.endswith("+gpt+uniform+dp1+pp1+tp1+mbs1+nmb4+AllMaxFrequency")
        assert pipelining.client.pipe_schedule == perseus.default_pipe_schedule(0, 1, 4, "dualpipev")
        schedule.step()
    assert not pipelining.client.enabled  # closed, clocks reset


# Every perseus schedule: (name, virtual stages, shapes (ranks, microbatches) it takes).
PERSEUS_SCHEDULES = [("1f1b", 1, [(2, 4), (3, 6), (4, 8)]), ("gpipe", 1, [(2, 4), (3, 6)]),
                     ("interleaved", 2, [(2, 4), (4, 8)]), ("interleaved", 3, [(2, 6)]),
                     ("zb-h1", 1, [(2, 4), (3, 6), (4, 8)]), ("zbv", 2, [(2, 4), (3, 4), (4, 8)]),
                     ("dualpipev", 2, [(2, 4), (3, 6), (4, 8)])]


@pytest.mark.parametrize("name,local,shapes", PERSEUS_SCHEDULES, ids=lambda v: str(v) if not isinstance(v, list) else "")
def test_default_pipe_schedule_gives_every_ranks_order(name, local, shapes):
    for ranks, microbatches in shapes:
        for rank in range(ranks):
            names = perseus.default_pipe_schedule(rank, ranks, microbatches, schedule=name, virtual_stages=local)
            count = names.count
            work = microbatches * local  # forwards and backwards of each local model chunk
            assert count("forward") + count("forward_backward") == work, (name, rank, names)
            assert count("backward") + count("backward_input") + count("forward_backward") == work, (name, rank)
            assert count("backward_weight") == count("backward_input")
            assert set(names) <= {"forward", "backward", "backward_input", "backward_weight", "forward_backward"}
            assert names[0] == "forward"
        with pytest.raises(ValueError):
            perseus.default_pipe_schedule(ranks, ranks, microbatches, schedule=name, virtual_stages=local)


RANK_SCRIPT = r"""
import json, os, sys, time
from pathlib import Path
import perseus
from perseus import _pipelining
import pipelining_standin
schedule_class, rank, ranks, microbatches, local, url, nvml, share = sys.argv[1:]
rank, ranks, microbatches, local = int(rank), int(ranks), int(microbatches), int(local)
schedule, _ = pipelining_standin.build(getattr(pipelining_standin, schedule_class), rank, ranks, microbatches, local)

def share_job_id(job_id):
    # What torch.distributed's broadcast does for the job id: rank 0's, to every rank.
    path = Path(share)
    if rank == 0:
        Path(share + ".tmp").write_text(job_id)
        os.rename(share + ".tmp", share)
        return job_id
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return path.read_text()

def all_ranks_reach(point):
    # What the pipeline's sends and receives (and a final collective) do: no rank runs ahead.
    Path(f"{share}.{point}.{rank}").touch()
    deadline = time.monotonic() + 30
    while (not all(Path(f"{share}.{point}.{r}").exists() for r in range(ranks))
           and time.monotonic() < deadline):
        time.sleep(0.005)

with _pipelining.instrument_pipelining(schedule, None, perseus.Client, rank=rank, world_size=ranks, server_url=url,
                                       nvml_library=nvml, report_every=1, fail_open=False, strict_schedule=True,
                                       broadcast_job_id=share_job_id, model_name="gpt") as pipelining:
    for step in range(4):
        schedule.step()
        all_ranks_reach(step)
    pipelining.client.flush()
    all_ranks_reach("end")
    print("result:", json.dumps({"job_id": pipelining.client.job_id, "round": pipelining.client.round,
                      "schedule": list(pipelining.perseus_schedule)}))
"""


@pytest.mark.parametrize("schedule_class,local,name,ranks", [
    (ScheduleInterleaved1F1B, 2, "interleaved", 2), (ScheduleInterleavedZeroBubble, 1, "zb-h1", 3),
    (ScheduleZBVZeroBubble, 2, "zbv", 2), (ScheduleDualPipeV, 2, "dualpipev", 2)],
    ids=lambda v: getattr(v, "__name__", v))
def test_every_rank_in_its_own_process_and_the_turnkey_works_out_the_schedule(serve, tmp_path, schedule_class, local,
                                                                              name, ranks):
    """As torchrun runs them: one process per pipeline rank, each hooking its own schedule, against
    `perseus serve --scheduler Perseus`, which works the schedule out from the orders the ranks
    registered (their schedules' pipeline_order) and shows it in the job's status."""
    import json
    import subprocess
    import sys
    import urllib.parse
    import urllib.request
    url = serve("Perseus")
    microbatches = 4
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    share = str(tmp_path / "job_id")
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, schedule_class.__name__, str(rank), str(ranks),
                               str(microbatches), str(local), url, FAKE_NVML, share],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(ranks)]
    outputs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        assert proc.returncode == 0, out[-3000:] + err[-3000:]
        results = [line for line in out.splitlines() if line.startswith("result: ")]  # the client logs there too
        assert results, out[-3000:] + err[-3000:]
        outputs.append(json.loads(results[-1][len("result: "):]))
    job_id = outputs[0]["job_id"]
    assert all(o["job_id"] == job_id for o in outputs) and all(o["schedule"] == [name, local] for o in outputs)
    assert all(o["round"] >= 2 for o in outputs), outputs
    with urllib.request.urlopen(f"{url}/jobs/{urllib.parse.quote(job_id, safe='')}", timeout=5) as reply:
        status = json.load(reply)
    assert status["registered"] == ranks, status
    # Every rank closed its client at the end, some before their last request for a round went out
    # (the job is done then), or one in the middle of a round its peers had ended (a round may take
    # two steps, as its first runs at the clocks of the last), which the server cannot tell from a
    # rank gone while its peers train on: failed, saying so, and they continue without perseus.
    assert status["phase"] == "done" or "finished training while ranks" in status["end_detail"], status["end_detail"]
    assert status["schedule"] == {"kind": name, "microbatches": microbatches, "virtual_stages": local}, status
