"""perseus.torch.instrument_pipelining on PyTorch's own torch.distributed.pipelining: a small MLP
trained by every schedule class perseus maps, one process per pipeline rank over gloo on the CPU
(real_pipelining_rank.py), each rank hooked against a real `perseus serve` on the fake NVML.

One group of rank processes runs every schedule in turn (one process start for all). For each:
- the training is bit-identical to the same run without perseus (every step's losses, the
  parameters at the end);
- the instructions the client measured on each rank are the compute actions PyTorch itself
  recorded running (its profiler's `PP:` ranges of the runtime schedules, ScheduleGPipe's
  `Forward i` / `Backward i` ranges, Schedule1F1B's stage-module hooks), in order, and every one
  ran at the clock the server planned for it (the fake NVML's call log);
- `perseus serve --scheduler Perseus` goes from warm-up through profiling to a deployed plan and
  names the schedule it found the ranks running.
Then fail-open for real: the server killed mid-run, and PyTorch internals perseus does not know.
"""
import json
import os
import re

import pytest

from fakegpu import BINARY, TOP_CLOCK
from rank_group import clocks_per_step, gpu_reads, measured_per_step, run_group, truth_per_step
from serve_process import start_serve, stop_all

if not os.environ.get("PERSEUS_REQUIRE_TORCH"):  # CI sets it: there, a missing torch is a failure
    pytest.importorskip("torch")

pytestmark = pytest.mark.multiprocess

RANKS, MICROBATCHES = 3, 6

# (name, schedule class, stages per rank, (perseus schedule, virtual stages) or None)
SCHEDULES = [
    ("1f1b", "Schedule1F1B", 1, ("1f1b", 1)),
    ("gpipe", "ScheduleGPipe", 1, ("gpipe", 1)),
    ("interleaved-1f1b", "ScheduleInterleaved1F1B", 2, ("interleaved", 2)),
    ("zero-bubble", "ScheduleInterleavedZeroBubble", 1, ("zb-h1", 1)),
    ("interleaved-zero-bubble", "ScheduleInterleavedZeroBubble", 2, None),
    ("zbv", "ScheduleZBVZeroBubble", 2, ("zbv", 2)),
    ("dualpipev", "ScheduleDualPipeV", 2, ("dualpipev", 2)),
]
PLANNED = [s for s in SCHEDULES if s[3] is not None]
# The turnkey loop in a few dozen steps: two warm-up rounds, a handful of clocks, one round to verify;
# no all-max check rounds while profiling (the CPU's timing moves with the machine's load, and each
# move would have clocks measured again).
TURNKEY_ARGS = json.dumps({"warmup_rounds": 2, "baseline_precision": 0.5, "max_baseline_rounds": 2,
                           "minimum_power_state": 1350, "coarse_step": 2, "stop_after": 1, "verify_rounds": 1, "check_every": 0,
                           "wait_for_plan": True})
FORWARD_CLOCK, BACKWARD_CLOCK = 1200, 1005


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """Every run's record per rank: {name: [rank 0's, rank 1's, ...]}."""
    out = tmp_path_factory.mktemp("real-pipelining")
    turnkey = start_serve(BINARY, out / "turnkey", "Perseus", TURNKEY_ARGS)
    two = start_serve(BINARY, out / "two", "TwoFrequencies",
                      json.dumps({"forward_freq": FORWARD_CLOCK, "backward_freq": BACKWARD_CLOCK}))
    doomed = start_serve(BINARY, out / "doomed", "Perseus", TURNKEY_ARGS)
    servers = [turnkey[0], two[0], doomed[0]]
    runs = []
    for name, schedule, local, known in SCHEDULES:
        shape = {"schedule": schedule, "local": local, "microbatches": MICROBATCHES}
        if known is None:  # no perseus schedule to plan: clocked by TwoFrequencies
            runs.append(dict(shape, name=name, mode="hooked", server=two[1], steps=4))
        else:
            runs.append(dict(shape, name=name, mode="hooked", server=turnkey[1], max_steps=40))
        runs.append(dict(shape, name=f"{name} bare", mode="bare", steps_of=name))
    dual = {"schedule": "ScheduleDualPipeV", "local": 2, "microbatches": MICROBATCHES, "steps": 8}
    runs += [dict(dual, name="server killed", mode="hooked", server=doomed[1], server_pid=doomed[0].pid,
                  kill_server_after=3),
             dict(dual, name="unknown internals", mode="hooked", server=turnkey[1], hide="backward_signature"),
             dict(dual, name="dualpipev 8 steps bare", mode="bare")]
    try:
        return run_group("real_pipelining_rank.py", out, RANKS, runs)
    finally:
        stop_all([server for server in servers if server.poll() is None])


def by_name(schedules):
    return pytest.mark.parametrize("name,schedule,local,known", schedules, ids=[s[0] for s in schedules])


@by_name(SCHEDULES)
def test_training_is_bit_identical_with_perseus(group, name, schedule, local, known):
    hooked, bare = group[name], group[f"{name} bare"]
    for rank, (h, b) in enumerate(zip(hooked, bare)):
        assert h["steps"] == b["steps"] and h["losses"] == b["losses"], rank
        assert h["digest"] == b["digest"], f"rank {rank}: parameters differ after {h['steps']} steps"
    last = [r for r in hooked if RANKS * local - 1 in r["stages"]]
    assert len(last) == 1 and all(len(losses) == MICROBATCHES for losses in last[0]["losses"])


@by_name(SCHEDULES)
def test_the_client_measures_and_clocks_every_action_pytorch_ran(group, name, schedule, local, known):
    below_top = 0
    for rank, record in enumerate(group[name]):
        assert record["enabled"] and record["client_enabled"] and record["warnings"] == [], (rank, record["warnings"])
        truth, measured = truth_per_step(record), measured_per_step(record)
        assert len(truth) == len(measured) == record["steps"]
        assert measured == truth, rank
        assert all(step == record["pipe_schedule"] for step in truth), rank  # the order registered is the one run
        assert record["perseus_schedule"] == (list(known) if known else None)
        # Each instruction ran at the clock the server's schedule gave it.
        clocks = clocks_per_step(record)
        assert len(clocks) == record["steps"]
        for step, (planned, began) in enumerate(zip(record["schedules"], clocks)):
            assert began == (planned or [TOP_CLOCK] * len(began)), (rank, step)
            below_top += sum(clock < TOP_CLOCK for clock in began)
        assert gpu_reads(record)[1], f"rank {rank}: the GPU was left at locked clocks"
    assert below_top > 0  # the check bites: not every clock was the top one


@by_name(PLANNED)
def test_the_turnkey_loop_deploys_a_plan_for_the_schedule_it_finds(group, name, schedule, local, known):
    record = group[name][0]
    assert re.fullmatch("(warmup )+(profiling )+(planning )*(deployed ){3}", " ".join(record["phases"]) + " "), \
        (record["status"].get("decisions"), record["status"].get("profiling"))
    status = record["status"]
    assert status["phase"] == "deployed" and status["registered"] == RANKS
    assert status["schedule"] == {"kind": known[0], "microbatches": MICROBATCHES, "virtual_stages": known[1]}
    assert status["profiling"]["clocks_done"] == status["profiling"]["clocks_total"] > 1
    assert status["plan"]["frontier_points"] >= 1


def test_a_schedule_perseus_cannot_plan_is_still_measured_and_clocked(group):
    """ScheduleInterleavedZeroBubble with two stages per rank runs an order none of perseus's
    schedules plans; TwoFrequencies clocks it, the forwards at one clock, the rest at the other."""
    for record in group["interleaved-zero-bubble"]:
        kinds = record["pipe_schedule"]
        assert set(kinds) == {"forward", "backward_input", "backward_weight"}
        planned = [FORWARD_CLOCK if kind == "forward" else BACKWARD_CLOCK for kind in kinds]
        assert clocks_per_step(record) == [planned] * record["steps"]


def test_training_finishes_unchanged_when_the_server_is_killed(group):
    killed, bare = group["server killed"], group["dualpipev 8 steps bare"]
    for rank, (k, b) in enumerate(zip(killed, bare)):
        assert k["steps"] == 8 and k["losses"] == b["losses"] and k["digest"] == b["digest"], rank
        assert k["warnings"] == [] and measured_per_step(k)[:3] == truth_per_step(k)[:3]
        assert gpu_reads(k)[1], f"rank {rank}: the GPU was left at locked clocks"


def test_pytorch_internals_perseus_does_not_know_turn_the_hooks_off_with_one_warning(group):
    unknown, bare = group["unknown internals"], group["dualpipev 8 steps bare"]
    for rank, (u, b) in enumerate(zip(unknown, bare)):
        assert u["losses"] == b["losses"] and u["digest"] == b["digest"], rank
        assert len(u["warnings"]) == 1, u["warnings"]
        assert re.fullmatch(r"RuntimeWarning: perseus: PyTorch \S+'s torch.distributed.pipelining is not the way perseus "
                            r"knows it \(PipelineStage.backward_one_chunk takes \(\*args, \*\*kwargs\), not "
                            r"\(bwd_chunk_id, loss, full_backward, ...\)\); the pipelining hooks are off and "
                            r"ScheduleDualPipeV trains without perseus", u["warnings"][0])
        assert not u["enabled"] and not u["client_enabled"] and u["calls"] == []
        reads, reset = gpu_reads(u)
        assert reads == [] and reset
