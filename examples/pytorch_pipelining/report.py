"""Prints what examples/pytorch_pipelining/run.sh measured: the perseus run's window against its
all-max twin's, and the share of `perseus whatif`'s ideal saving for the profile the turnkey loop
measured.

    python report.py OUT_DIR PERSEUS_COMMAND...

Iteration time: the slowest rank's mean over its window (the ranks are coupled by the pipeline);
energy: every rank's GPU energy per iteration, summed.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

from simulated_gpu import BLOCK_POWER_W, STAGE_TIMES


def window(out: Path, run: str) -> Tuple[float, float, List[Dict[str, object]]]:
    ranks = [json.loads(path.read_text()) for path in sorted((out / run).glob("window*.json"))]
    if len(ranks) != len(STAGE_TIMES) or not all(r["perseus_on"] and r["iterations"] for r in ranks):
        raise SystemExit(f"report.py: the {run} run did not measure a window on every rank with perseus on: {ranks}")
    seconds = max(float(r["seconds"]) / int(r["iterations"]) for r in ranks)
    joules = sum(float(r["joules"]) / int(r["iterations"]) for r in ranks)
    return seconds, joules, ranks


def ideal_saving(out: Path, perseus: List[str], job_id: str, microbatches: int) -> float:
    """perseus whatif's saving at no slowdown for the profile the turnkey loop measured (one of two
    pipelines, the other running as fast as all-max: its non-straggler saving at T'/T = 1)."""
    profile = out / "perseus" / "dump" / job_id.replace("/", "_") / "profile.csv"
    rows = out / "whatif.csv"
    subprocess.run([*perseus, "whatif", str(profile), "--stages", str(len(STAGE_TIMES)), "--microbatches",
                    str(microbatches), "--p2p-power", str(BLOCK_POWER_W), "--pipelines", "2", "--slowdowns", "1",
                    "--baselines", "all-max", "--out", str(rows), "--quiet"], check=True)
    (row,) = [r for r in csv.DictReader(rows.open()) if r["method"] == "perseus"]
    return float(row["saving_non_straggler"])


def main() -> None:
    out, perseus = Path(sys.argv[1]), sys.argv[2:]
    seconds, joules, ranks = window(out, "perseus")
    all_seconds, all_joules, _ = window(out, "allmax")
    status = json.loads((out / "perseus" / "status.json").read_text())
    saved, slowdown = 1 - joules / all_joules, seconds / all_seconds - 1
    ideal = ideal_saving(out, perseus, str(ranks[0]["job_id"]), int(status["job"]["num_microbatches"]))
    print(f"== {len(ranks)} stages, {status['job']['num_microbatches']} microbatches; windows of "
          f"{ranks[0]['iterations']} iterations")
    print(f"all-max (AllMaxFrequency):  {all_seconds:.4f} s, {all_joules:.1f} J per iteration")
    print(f"perseus (Perseus, deployed): {seconds:.4f} s, {joules:.1f} J per iteration")
    print(f"energy saved {100 * saved:.1f}% at a slowdown of {100 * slowdown:+.2f}% against the all-max run; "
          f"perseus whatif's ideal for the measured profile: {100 * ideal:.1f}% (this run got "
          f"{100 * saved / ideal:.0f}% of it)" if ideal > 0 else
          f"energy saved {100 * saved:.1f}% at a slowdown of {100 * slowdown:+.2f}% against the all-max run; "
          "perseus whatif finds no saving in the measured profile")
    if status.get("saving") is not None and status.get("slowdown") is not None:
        print(f"the server's own account: saving {100 * status['saving']:.1f}% at a slowdown of "
              f"{100 * status['slowdown']:+.2f}% against its measured all-max baseline")
    else:
        print("the server's own account: none yet (it had measured too few rounds on the plan)")


if __name__ == "__main__":
    main()
