"""Groups of training-rank processes for the tests on the real frameworks: start one process per
rank on a plan of runs (real_pipelining_rank.py, real_frameworks_rank.py), collect their records,
and read what a run's client got and what its fake GPU did."""
import json
import os
import re
import subprocess
import sys

from fakegpu import FAKE_NVML, TOP_CLOCK

HERE = os.path.dirname(os.path.abspath(__file__))
KIND = {"F": "forward", "B": "backward", "I": "backward_input", "W": "backward_weight",
        "OVERLAP_F_B": "forward_backward"}


def run_group(script, out, ranks, runs, timeout=480):
    """Runs `script` PLAN RANK in `ranks` processes (gloo rendezvous through a file in `out`, each
    rank's fake NVML call log in `out/gpuR.log`); {run name: [rank 0's record, ...]}."""
    plan = out / "plan.json"
    plan.write_text(json.dumps({"ranks": ranks, "store": str(out / "store"), "out": str(out), "runs": runs}))
    procs = []
    try:
        for rank in range(ranks):
            env = dict(os.environ, PERSEUS_FAKE_NVML=FAKE_NVML, PERSEUS_FAKE_NVML_LOG=str(out / f"gpu{rank}.log"),
                       PERSEUS_FAKE_NVML_LOG_READS="1",
                       PYTHONPATH=os.pathsep.join([HERE] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
            procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, script), str(plan), str(rank)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outputs = [proc.communicate(timeout=timeout)[0] for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    for rank, (proc, output) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"rank {rank}:\n{output[-5000:]}"
    per_rank = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(ranks)]
    for rank, records in enumerate(per_rank):
        for record in records:
            record["log"] = str(out / f"gpu{rank}.log")
    return {record["name"]: [records[i] for records in per_rank] for i, record in enumerate(per_rank[0])}


def measured_per_step(record):
    """Per step, the instructions the client got, checking that each began and ended in turn."""
    steps, open_name = [], None
    for call in record["calls"]:
        if call[0] == "on_step_begin":
            assert open_name is None
            steps.append([])
        elif call[0] == "on_instruction_begin":
            assert open_name is None, f"{call[1]} began inside {open_name}"
            open_name = call[1]
            steps[-1].append(call[1])
        elif call[0] == "on_instruction_end":
            assert call[1] == open_name, call
            open_name = None
    return steps


def gpu_reads(record):
    """The clock the fake GPU ran at at each energy-counter read of the run's client, and whether
    its last clock calls reset the SM and memory clocks."""
    clock, reads, last = TOP_CLOCK, [], {}
    with open(record["log"]) as log:
        log.seek(record["log_start"])
        lines = [line.split() for line in log.read(record["log_end"] - record["log_start"]).splitlines()]
    for fields in lines:
        if fields[1] == "nvmlDeviceSetGpuLockedClocks" and fields[-1] == "0":
            clock = int(fields[3])
        elif fields[1] == "nvmlDeviceResetGpuLockedClocks" and fields[-1] == "0":
            clock = TOP_CLOCK
        elif fields[1] == "nvmlDeviceGetTotalEnergyConsumption":
            reads.append(clock)
        if "LockedClocks" in fields[1]:
            last["memory" if "Memory" in fields[1] else "graphics"] = fields[1]
    return reads, len(last) == 2 and all(call.startswith("nvmlDeviceReset") for call in last.values())


def clocks_per_step(record):
    """Per step, the clock each instruction began at: a step reads the energy counter at its
    start, at each instruction's begin and end, and at its end."""
    reads, _ = gpu_reads(record)
    per_step = 2 + 2 * len(record["pipe_schedule"])
    assert len(reads) == per_step * len(record["schedules"]), (len(reads), per_step, len(record["schedules"]))
    return [reads[step * per_step + 1:(step + 1) * per_step - 1:2] for step in range(len(record["schedules"]))]


def action_kind(action):
    """The instruction of one of PyTorch's recorded actions (None for communication and the like)."""
    if action.startswith("Forward "):
        return "forward"
    if action.startswith("Backward "):
        return "backward"
    if action.endswith("OVERLAP_F_B"):
        return "forward_backward"
    return KIND.get(re.fullmatch(r"(?:PP:)?\d+([A-Z_]+)\d*", action).group(1))


def truth_per_step(record):
    """Per step, the instructions PyTorch recorded running (stage initialisation left out)."""
    return [[kind for kind in map(action_kind, (a for a in step if not a.startswith("init "))) if kind]
            for step in record["truth"]]
