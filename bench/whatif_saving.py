"""The saving `perseus whatif` predicts for two pipelines at T'/T = 1 (no straggler) against all-max: what the
turnkey loop's measured saving is compared with by the turnkey benchmarks. On GPUs of different speeds
(`perseus simulate --gpu-speed-spread`), what the same planner saves on the GPUs the cluster ran."""
import csv
import os
import re
import subprocess
import tempfile
from typing import List, Sequence


def whatif_saving(perseus: str, profile: str, shape: List[str], p_block: float, unit_time: float) -> float:
    out = subprocess.run([perseus, "whatif", profile, *shape, "--p2p-power", str(p_block), "--pipelines", "2",
                          "--slowdowns", "1", "--unit-time", str(unit_time), "--baselines", "all-max"],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if re.match(r"\s*1\.000\s+perseus\s", line):
            return float(line.split()[-1].rstrip("%")) / 100
    raise RuntimeError("no perseus row in whatif's output:\n" + out)


def gpu_of(model_stage: int, stages: int, schedule: str) -> int:
    """The pipeline stage (GPU) that runs a profile's model stage: chunk c of stage s is model stage c * S + s,
    except in the V-shape schedules, whose second chunk on stage s is model stage 2S - 1 - s."""
    if schedule in ("zbv", "dualpipev") and model_stage >= stages:
        return 2 * stages - 1 - model_stage
    return model_stage % stages


def scaled_profile(profile: str, speeds: Sequence[float], schedule: str, path: str):
    """`profile` with each row's time and energy times the speed of the GPU that runs its model stage."""
    with open(profile, newline="") as f:
        rows = list(csv.DictReader(f))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        for row in rows:
            speed = speeds[gpu_of(int(row["stage"]), len(speeds), schedule)]
            writer.writerow(dict(row, time=repr(float(row["time"]) * speed),
                                 energy=repr(float(row["energy"]) * speed)))


def whatif_rows(perseus, profile, shape, p_block, unit_time, slowdown):
    """whatif's all-max and perseus rows at one slowdown: {method: (plan time, plan energy, iteration time)}."""
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "rows.csv")
        subprocess.run([perseus, "whatif", profile, *shape, "--p2p-power", str(p_block), "--pipelines", "2",
                        "--slowdowns", repr(slowdown), "--unit-time", str(unit_time), "--baselines", "all-max",
                        "--out", out, "--quiet"], check=True, capture_output=True, text=True)
        with open(out, newline="") as f:
            return {r["method"]: (float(r["plan_time"]), float(r["plan_energy"]), float(r["iteration_time"]))
                    for r in csv.DictReader(f)}


def whatif_saving_on_gpus(perseus: str, profile: str, shape: List[str], schedule: str, p_block: float,
                          unit_time: float, gpu_speeds: Sequence[Sequence[Sequence[float]]]) -> float:
    """The saving over every pipeline where each runs on its own GPUs (`gpu_speeds[pipeline][stage][rank]`, as
    simulate's summary gives them: a factor on time and energy) and the slowest one's all-max time is the
    iteration's: each pipeline runs the cheapest plan of its own frontier that ends by then, its GPUs blocked
    until then (whatif's choice at a straggler's pace), against all-max blocked as long."""
    stages = int(shape[shape.index("--stages") + 1])
    with tempfile.TemporaryDirectory() as scratch:
        profiles, at_own_pace = [], []  # per pipeline: its scaled profile, whatif's rows at its all-max time
        for d, per_stage in enumerate(gpu_speeds):
            if any(len(ranks) != 1 for ranks in per_stage):
                raise ValueError("tensor-parallel GPUs of one stage: not modelled here")
            path = os.path.join(scratch, f"pipeline-{d}.csv")
            scaled_profile(profile, [ranks[0] for ranks in per_stage], schedule, path)
            profiles.append(path)
            at_own_pace.append(whatif_rows(perseus, path, shape, p_block, unit_time, 1.0))
        iteration = max(rows["all-max"][0] for rows in at_own_pace)
        planned = all_max = 0.0
        for path, rows in zip(profiles, at_own_pace):
            own = rows["all-max"][0]
            if own != iteration:  # paced to the slowest pipeline (the slowest one's rows are at its own pace)
                rows = whatif_rows(perseus, path, shape, p_block, unit_time, iteration / own)
            for method, (plan_time, plan_energy, ends) in rows.items():
                blocked = plan_energy + stages * (ends - plan_time) * p_block
                if method == "perseus":
                    planned += blocked
                elif method == "all-max":
                    all_max += blocked
    return 1 - planned / all_max
