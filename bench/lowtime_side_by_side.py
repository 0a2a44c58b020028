#!/usr/bin/env python3
"""perseus against lowtime 0.3 (`pip install lowtime`, the Perseus authors' planner library with its
max-flow in Rust), side by side in one run: the same frontier of the same profile planned by
`perseus optimize --cost-model exp --threads 1` and by bench/lowtime_frontier.py, each in a process
of its own measured with wait4 (wall time, user+system CPU time, peak resident memory), best of
--repeat runs per planner, interleaved. Prints a Markdown table with the ratios and checks that both
frontiers have the same points (times; energies within 1e-6 relative).

Usage: bench/lowtime_side_by_side.py PERSEUS [--profile examples/gpt3-175b-a100.csv] [--stages 8]
           [--p2p-power 83.64] [--microbatches 12 24 48] [--repeat 3] [--python PYTHON]"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

HERE = Path(__file__).resolve().parent


def measure(command: List[str]) -> Tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one run of `command`, which must succeed."""
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    error = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        sys.exit(f"{command[0]} failed ({proc.returncode}): {error[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def frontier(path: Path, column: str) -> List[Tuple[int, float]]:
    with open(path) as f:
        return [(int(row["quant_time"]), float(row[column])) for row in csv.DictReader(f)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("perseus")
    parser.add_argument("--profile", default=str(HERE.parent / "examples" / "gpt3-175b-a100.csv"))
    parser.add_argument("--stages", type=int, default=8)
    parser.add_argument("--p2p-power", type=float, default=83.64)
    parser.add_argument("--microbatches", type=int, nargs="+", default=[12, 24, 48])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable, help="an interpreter with lowtime 0.3 installed")
    args = parser.parse_args()
    shape = ["--stages", str(args.stages), "--p2p-power", repr(args.p2p_power)]
    print("| microbatches | points | perseus wall / CPU / memory | lowtime wall / CPU / memory | "
          "lowtime ÷ perseus: wall, CPU, memory |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for microbatches in args.microbatches:
            out = Path(scratch) / f"perseus-{microbatches}"
            lowtime_csv = Path(scratch) / f"lowtime-{microbatches}.csv"
            perseus = [args.perseus, "optimize", args.profile, *shape, "--microbatches", str(microbatches),
                       "--cost-model", "exp", "--threads", "1", "--quiet", "--out", str(out)]
            lowtime = [args.python, str(HERE / "lowtime_frontier.py"), args.profile, *shape, "--microbatches",
                       str(microbatches), "--out", str(lowtime_csv)]
            best: Dict[str, Tuple[float, float, float]] = {}
            for _ in range(args.repeat):
                for name, command in (("perseus", perseus), ("lowtime", lowtime)):
                    run = measure(command)
                    if name not in best or run[0] < best[name][0]:
                        best[name] = run
            ours, theirs = frontier(out / "frontier.csv", "effective_cost"), frontier(lowtime_csv, "cost")
            same = [q for q, _ in ours] == [q for q, _ in theirs] and all(
                abs(a - b) <= 1e-6 * abs(a) for (_, a), (_, b) in zip(ours, theirs))
            p, lt = best["perseus"], best["lowtime"]
            print(f"| {microbatches} | {len(ours)}{'' if same else ' (lowtime: ' + str(len(theirs)) + ', differ)'} | "
                  f"{p[0]:.2f} s / {p[1]:.2f} s / {p[2]:.0f} MB | {lt[0]:.1f} s / {lt[1]:.1f} s / {lt[2]:.0f} MB | "
                  f"{lt[0] / p[0]:.0f}×, {lt[1] / p[1]:.0f}×, {lt[2] / p[2]:.1f}× |", flush=True)


if __name__ == "__main__":
    main()
