"""examples/pytorch/run.sh: a real 4-stage PyTorch pipeline (gloo, CPU) on the fake NVML, first at
all-max, then on the planner's plan. Every rank's clock is checked instruction by instruction
from the fake NVML's call log, and the training loss must go down; every rank's time and energy
are printed, and a run in which perseus was off on a rank fails, saying so."""
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu import TOP_CLOCK, clocks_at_energy_reads, ends_at_default_clocks

if not os.environ.get("PERSEUS_REQUIRE_TORCH"):  # CI sets it: there, a missing torch is a failure
    pytest.importorskip("torch")

import perseus  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pytorch"
STAGES, MICROBATCHES, REPORT_EVERY, ITERATIONS = 4, 4, 2, 12


def run_example(out, **extra_env):
    env = dict(os.environ, PYTHON=sys.executable, ITERATIONS=str(ITERATIONS), **extra_env)
    env.pop("PERSEUS_FAKE_NVML_LOG", None)
    return subprocess.run(["bash", str(EXAMPLE / "run.sh"), str(out)], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    out = tmp_path_factory.mktemp("pytorch-example")
    done = run_example(out)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout


@pytest.fixture(scope="module")
def run(example):
    return example[0]


def instruction_clocks(log):
    """Per iteration, the clock each instruction began and ended at: an iteration reads the
    energy counter at its start, at each instruction's begin and end, and at its end; the
    example's EnergyMonitor reads it twice before the first iteration (when made and when its
    window opens) and once after the last (when the window closes)."""
    reads = clocks_at_energy_reads(log)
    per_iteration = 2 + 2 * 2 * MICROBATCHES
    assert len(reads) == 3 + ITERATIONS * per_iteration, f"{log}: {len(reads)} energy reads"
    reads = reads[2:-1]
    iterations = [reads[i * per_iteration:(i + 1) * per_iteration] for i in range(ITERATIONS)]
    return [(iteration[1:-1:2], iteration[2:-1:2]) for iteration in iterations]


def losses(out_file):
    return [float(line.split()[3]) for line in out_file.read_text().splitlines() if line.startswith("iteration")]


@pytest.mark.parametrize("phase", ["allmax", "plan"])
def test_training_learns(run, phase):
    loss = losses(run / phase / f"rank{STAGES - 1}.out")
    assert len(loss) == ITERATIONS
    # The data set has 4 batches seen in turn: compare whole passes over it.
    assert sum(loss[-4:]) < 0.7 * sum(loss[:4]), loss


def test_all_max_runs_every_instruction_at_the_top_clock(run):
    for rank in range(STAGES):
        log = run / "allmax" / f"gpu{rank}.log"
        for begin, end in instruction_clocks(log):
            assert begin == end == [TOP_CLOCK] * 2 * MICROBATCHES
        assert ends_at_default_clocks(log)


def test_every_rank_follows_the_plan_instruction_by_instruction(run):
    plan = json.loads(subprocess.run(
        [sys.executable, "-m", "perseus", "plans", "show", str(run / "frontier"), "--slowdown", "1.1", "--json"],
        capture_output=True, text=True, check=True).stdout)
    assert len(set(map(tuple, plan["frequencies"]))) > 1, "a plan with one clock everywhere proves little"
    for rank in range(STAGES):
        order = perseus.default_pipe_schedule(rank, STAGES, MICROBATCHES)
        assert [name[0] for name in plan["instructions"][rank]] == [name[0].upper() for name in order]
        log = run / "plan" / f"gpu{rank}.log"
        iterations = instruction_clocks(log)
        for iteration, (begin, end) in enumerate(iterations):
            assert begin == end, f"rank {rank}, iteration {iteration}"
        # PointSolution's warm-up round at the top clock, then its plan from the iteration after the
        # one the plan arrives during (each instruction there at the top clock or the plan's) to the
        # end. It arrives in the switch-over iteration after the warm-up unless the server answers
        # later (it answers once the round is stored; ranks train on meanwhile): then a round later.
        # A rank that ends the warm-up after the others can have the plan before its switch-over
        # iteration begins and run that one on the plan already.
        clocks = [begin for begin, _ in iterations]
        top, planned = [TOP_CLOCK] * len(order), plan["frequencies"][rank]
        first = next((i for i, c in enumerate(clocks) if c == planned), ITERATIONS)
        assert REPORT_EVERY <= first <= ITERATIONS - REPORT_EVERY, f"rank {rank}: {clocks}"
        assert clocks[:first - 1] == [top] * (first - 1), f"rank {rank}: {clocks}"
        assert all(clock in (TOP_CLOCK, plan_clock) for clock, plan_clock in zip(clocks[first - 1], planned)), \
            f"rank {rank}: {clocks}"
        assert clocks[first:] == [planned] * (ITERATIONS - first), f"rank {rank}: {clocks}"
        assert ends_at_default_clocks(log)


def test_the_server_recorded_every_round(run):
    dump = run / "plan" / "dump"
    (job,) = [p for p in dump.iterdir() if p.is_dir()]  # also holds .perseus.db
    assert job.name.endswith(f"+torch+mlp+uniform+dp1+pp{STAGES}+tp1+mbs16+nmb{MICROBATCHES}+PointSolution")
    # Every round the server completed (its store), and no other, is recorded with every rank's
    # result: the first round, then rounds of a switch-over iteration and REPORT_EVERY measured ones;
    # a round whose ranks had not received its schedule when it began runs again under its number
    # (so this run has `most` rounds, fewer where the server's answers come late).
    with sqlite3.connect(dump / ".perseus.db") as store:
        done = sorted(r for (r,) in store.execute("SELECT round FROM rounds WHERE job_id = ?", (job.name,)))
        (ended,) = store.execute("SELECT end_detail FROM jobs WHERE job_id = ?", (job.name,)).fetchone()
    server_log = (run / "plan" / "serve.out").read_text()
    assert ended == "[profiling-done] training finished: every rank closed its client", (ended, server_log)
    most = 1 + (ITERATIONS - REPORT_EVERY) // (REPORT_EVERY + 1)
    assert 2 <= len(done) <= most and done == list(range(len(done))), (done, server_log)
    recorded = sorted(int(p.name.split(".")[0]) for p in job.glob("*.prof.json"))
    assert recorded == done, server_log
    for r in done:
        results = json.loads((job / f"{r}.prof.json").read_text())
        assert sorted(result["rank"] for result in results) == list(range(STAGES))


def rank_summaries(stdout):
    """Per phase, each rank's summary line: (perseus on?, iterations on, seconds, joules)."""
    phases, phase = {}, None
    for line in stdout.splitlines():
        heading = re.match(r"== (\w+) \(", line)
        if heading:
            phase = heading.group(1)
        summary = re.match(r"rank (\d+): perseus (on|OFF) for (\d+) of (\d+) iterations; \d+ iterations in "
                           r"([0-9.]+) s, GPU energy ([0-9.]+) J$", line)
        if summary:
            rank, state, on, total, seconds, joules = summary.groups()
            phases.setdefault(phase, {})[int(rank)] = (state == "on", int(on), int(total), float(seconds), float(joules))
    return phases


def test_every_rank_prints_its_time_and_energy_in_both_phases(example):
    _, stdout = example
    phases = rank_summaries(stdout)
    assert sorted(phases) == ["allmax", "plan"], stdout
    for phase, ranks in phases.items():
        assert sorted(ranks) == list(range(STAGES)), f"{phase}: {stdout}"
        for on, iterations_on, iterations, seconds, joules in ranks.values():
            assert on and iterations_on == iterations == ITERATIONS
            assert seconds > 0 and joules > 0
    assert re.search(r"GPU energy of all ranks, as the fake NVML meters it: allmax [0-9.]+ J, plan [0-9.]+ J\n"
                     r"   \(no saving to read here: ", stdout), stdout


def test_the_example_and_every_rank_say_which_gpu_library_they_use(example):
    out, stdout = example
    assert stdout.startswith("== GPU library of every rank: perseus's fake NVML (simulated GPUs, not measurements)")
    for phase in ("allmax", "plan"):
        for rank in range(STAGES):
            first = (out / phase / f"rank{rank}.out").read_text().splitlines()[0]
            assert first.startswith("GPU library: ") and first.endswith(
                "(perseus's fake NVML: simulated GPUs, not measurements)"), (phase, rank, first)


def test_a_run_in_which_perseus_was_off_fails_saying_so(tmp_path):
    # The fake GPU refuses clock changes: each rank's client fails open and trains on at default clocks.
    done = run_example(tmp_path, PERSEUS_FAKE_NVML_DENY="1")
    assert done.returncode != 0, done.stdout
    assert "perseus OFF for" in done.stdout, done.stdout
    assert re.search(r"perseus was off on rank\(s\) [0-9 ]+ in phase allmax", done.stderr), done.stderr
    assert "== plan" not in done.stdout  # it stops at the first phase that proves nothing
