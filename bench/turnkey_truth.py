"""One turnkey scenario against its twin: `perseus serve --scheduler Perseus` and `perseus simulate`, then an
`AllMaxFrequency` server and the same `perseus simulate` flags (profile, seed, noise, disturbances). The truth is
simulate's own time and energy against the twin's; the ideal is `perseus whatif`'s noise-free saving at T'/T = 1
for the same schedule and shape (on GPUs of different speeds, each pipeline's frontier on its own GPUs, paced to the
slowest pipeline: whatif_saving_on_gpus). What the benchmark scripts (turnkey_robustness.py, turnkey_random.py) share.

Every round is one report window (`--report-every` = the round length), so that what the server reported after
each round (its status `history`) is compared with the truth over the same rounds, and rounds that ran all-max
(their energy within a fifth of the ideal saving of the twin's) are found.
"""
import concurrent.futures
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_server import serve  # noqa: E402
from whatif_saving import whatif_saving, whatif_saving_on_gpus  # noqa: E402

ROUND = 5  # iterations per round (perseus simulate's --round-iterations default)
TINY_IDEAL = 0.01  # below this ideal saving, shares say nothing and all-max rounds cannot be told apart


@dataclasses.dataclass
class Scenario:
    label: str
    profile: str
    stages: int
    microbatches: int
    p_block: float
    schedule: str = "1f1b"
    virtual_stages: Optional[int] = None
    pipelines: int = 2
    iterations: int = 1000
    simulate_args: List[str] = dataclasses.field(default_factory=list)  # noise, seed, stragglers, spread, latency
    scheduler_args: Dict = dataclasses.field(default_factory=dict)
    # Iteration ranges (first, last; 1-based, inclusive) in which a disturbance is active: they are forgiven in
    # the all-max check, and the truth window starts 50 rounds after the last one ends (at 501 at the earliest).
    disturbances: List[Tuple[int, int]] = dataclasses.field(default_factory=list)
    group: str = ""  # the class it belongs to
    min_share: Optional[float] = 0.8  # of the ideal, to pass (None: not judged, e.g. under a long clock latency)

    def shape(self) -> List[str]:
        out = ["--stages", str(self.stages), "--microbatches", str(self.microbatches), "--schedule", self.schedule]
        if self.virtual_stages:
            out += ["--virtual-stages", str(self.virtual_stages)]
        return out


@dataclasses.dataclass
class Outcome:
    scenario: Scenario
    true_saving: float = 0.0
    true_slowdown: float = 0.0
    window: Tuple[int, int] = (0, 0)
    reported_saving: Optional[float] = None
    reported_slowdown: Optional[float] = None
    reported_ci: Optional[List[float]] = None
    final_truth_saving: float = 0.0  # over the rounds the final report covers
    final_truth_slowdown: float = 0.0
    history_saving_error: float = 0.0  # the largest |reported - true| over the run's reports
    history_slowdown_error: float = 0.0
    false_negative_slowdown: bool = False  # reported < 0 while training did not run faster
    ideal: Optional[float] = None
    first_deployed_round: Optional[int] = None
    all_max_excess: int = 0  # rounds at all-max beyond the disturbances in the longest such run after deployment
    step_ups: int = 0
    retries: int = 0
    phase: str = ""
    reason: str = ""
    wall: float = 0.0
    error: str = ""

    @property
    def share(self) -> Optional[float]:
        return None if not self.ideal else self.true_saving / self.ideal

    @property
    def reported_error(self) -> Optional[float]:
        return None if self.reported_saving is None else self.reported_saving - self.final_truth_saving

    def passes(self, max_slowdown=0.005, max_error=0.005, max_excess=50) -> List[str]:
        """What fails the issue's acceptance check (empty: passes)."""
        out = []
        if self.error:
            return [self.error]
        min_share = self.scenario.min_share
        if self.true_slowdown > max_slowdown:
            out.append(f"slowdown {100 * self.true_slowdown:.2f}%")
        if self.ideal is None:
            out.append("no plan")
        elif min_share is None:
            pass
        elif self.ideal < TINY_IDEAL:  # whatif finds (next to) nothing to save: at least as much
            if self.true_saving < self.ideal - 0.002:
                out.append(f"saving {100 * self.true_saving:.2f}% below the ideal {100 * self.ideal:.2f}%")
        elif self.share < min_share:
            out.append(f"share {100 * self.share:.0f}%")
        if self.reported_error is None or abs(self.reported_error) > max_error:
            out.append("reported " + ("-" if self.reported_error is None else f"{100 * self.reported_error:+.2f}pp"))
        if self.history_saving_error > max_error:
            out.append(f"history saving off by {100 * self.history_saving_error:.2f}pp")
        if self.history_slowdown_error > 0.003:
            out.append(f"history slowdown off by {100 * self.history_slowdown_error:.2f}pp")
        if self.all_max_excess > max_excess and min_share is not None:
            out.append(f"all-max {self.all_max_excess} rounds past the disturbances")
        return out


def run_simulation(perseus, scenario: Scenario, scheduler: str) -> Tuple[List[dict], dict, List[dict], list]:
    """One server and one simulation: (per-round reports, the final server status, the decisions, the GPUs' speeds
    as the summary gives them: empty without a spread)."""
    args = json.dumps({"wait_for_plan": True, **scenario.scheduler_args}) if scheduler == "Perseus" else "{}"
    with tempfile.TemporaryDirectory() as dump:
        server, url = serve(perseus, ["--scheduler", scheduler, "--dump-dir", dump, "--scheduler-args", args])
        try:
            run = subprocess.run([perseus, "simulate", scenario.profile, *scenario.shape(), "--p2p-power",
                                  str(scenario.p_block), "--pipelines", str(scenario.pipelines), "--iterations",
                                  str(scenario.iterations), "--report-every", str(ROUND), "--round-iterations",
                                  str(ROUND), "--server", url, "--json", *scenario.simulate_args],
                                 capture_output=True, text=True)
            if run.returncode != 0:
                raise RuntimeError(f"perseus simulate failed ({run.returncode}): {run.stderr.strip()[-600:]}")
            lines = run.stdout.splitlines()
            decisions = []
            for root, _, files in os.walk(dump):
                if "decisions.json" in files:
                    with open(os.path.join(root, "decisions.json")) as f:
                        decisions = json.load(f)
            if os.environ.get("TURNKEY_DECISIONS") and scheduler == "Perseus":  # for looking into one scenario
                with open(os.environ["TURNKEY_DECISIONS"], "w") as f:
                    json.dump({"decisions": decisions, "reports": lines}, f)
        finally:
            server.terminate()
            server.wait()
    reports = [json.loads(line)["report"] for line in lines if line.startswith('{"report"')]
    summary = json.loads(lines[-1])["summary"]
    return reports, summary.get("server") or {}, decisions, summary.get("gpu_speeds") or []


def mean_over(reports, first, last, excluded=()):
    """Mean time and energy per iteration over the reports within iterations first..last that overlap no
    (first, last) range in `excluded`."""
    t = e = n = 0
    for r in reports:
        if any(r["first_iteration"] <= b and a <= r["last_iteration"] for a, b in excluded):
            continue
        if r["first_iteration"] >= first and r["last_iteration"] <= last:
            k = r["last_iteration"] - r["first_iteration"] + 1
            t += r["iteration_time"] * k
            e += r["energy"] * k
            n += k
    if n == 0:
        raise RuntimeError(f"no report within iterations {first}-{last}")
    return t / n, e / n


def window_slowdowns(scenario: Scenario, first: int, last: int) -> List[float]:
    """Per pipeline, the product of the `--straggler` factors active over the whole of iterations first..last (a
    straggler slows time and energy alike, as a slower GPU does); one that covers only part of them counts not."""
    out = [1.0] * scenario.pipelines
    args = scenario.simulate_args
    for spec in (args[i + 1] for i, a in enumerate(args) if a == "--straggler"):
        who, rest = spec.split(":")
        factor, span = rest.split("@")
        begin, _, end = span.partition("-")
        if int(begin) <= first and (not end or int(end) >= last):
            for d in range(scenario.pipelines):
                if who in ("all", "*") or int(who) == d:
                    out[d] *= float(factor)
    return out


def ideal_saving(perseus, scenario: Scenario, unit_time, gpu_speeds=(), slowdowns=(), cache={}):
    """whatif's saving at T'/T = 1, or, on GPUs of different speeds or under stragglers that last the whole window,
    each pipeline's own frontier on the GPUs as they ran (whatif_saving_on_gpus)."""
    if gpu_speeds or any(f != 1 for f in slowdowns):
        base = gpu_speeds or [[[1.0]] * scenario.stages] * scenario.pipelines
        factors = list(slowdowns) or [1.0] * len(base)
        gpu_speeds = [[[x * factors[d] for x in ranks] for ranks in stages] for d, stages in enumerate(base)]
    speeds = tuple(tuple(tuple(ranks) for ranks in stages) for stages in gpu_speeds)
    key = (scenario.profile, tuple(scenario.shape()), scenario.p_block, unit_time, speeds)
    if key not in cache:
        if speeds:
            cache[key] = whatif_saving_on_gpus(perseus, scenario.profile, scenario.shape(), scenario.schedule,
                                               scenario.p_block, unit_time, speeds)
        else:
            cache[key] = whatif_saving(perseus, scenario.profile, scenario.shape(), scenario.p_block, unit_time)
    return cache[key]


def judge(perseus, scenario: Scenario, reports, twin, status, decisions, gpu_speeds=(), as_ran=True) -> Outcome:
    """The outcome against the twin. `as_ran`: the ideal on the GPUs as they ran over the judged window (their
    `gpu_speeds` and the stragglers over all of it); otherwise the undisturbed cluster's."""
    out = Outcome(scenario)
    n = scenario.iterations
    last_disturbance = max([b for _, b in scenario.disturbances], default=0)
    first = max(n // 2 + 1, last_disturbance + 50 * ROUND + 1) if last_disturbance < n else n // 2 + 1
    first = min(first, n - 20 * ROUND + 1)
    out.window = (first, n)
    # A disturbance that ends within the window, or just before it: the loop sees a round of it ended before it
    # reacts, so the round it ends in and the next one are left out where they lie in the window.
    reaction = [(b + 1, (b + ROUND - 1) // ROUND * ROUND + ROUND) for _, b in scenario.disturbances
                if b < n and (b + ROUND - 1) // ROUND * ROUND + ROUND >= first]
    t, e = mean_over(reports, first, n, reaction)
    t0, e0 = mean_over(twin, first, n, reaction)
    out.true_saving, out.true_slowdown = 1 - e / e0, t / t0 - 1
    plan = status.get("plan") or {}
    out.step_ups = plan.get("step_ups", 0)
    out.reason = plan.get("reason", "")
    out.phase = status.get("phase", "")
    lowest_ideal = None
    if plan.get("unit_time"):
        speeds, slowdowns = (gpu_speeds, window_slowdowns(scenario, first, n)) if as_ran else ((), ())
        out.ideal = ideal_saving(perseus, scenario, plan["unit_time"], speeds, slowdowns)
        # A straggler over the whole window may have begun after the first plans: before it, the undisturbed
        # cluster's ideal is what a round could save.
        lowest_ideal = min(out.ideal, ideal_saving(perseus, scenario, plan["unit_time"], speeds))
    out.reported_saving, out.reported_slowdown = status.get("saving"), status.get("slowdown")
    out.reported_ci = status.get("saving_ci")
    report_rounds = scenario.scheduler_args.get("report_rounds", 60)
    # Per round r (0-based): iterations r*ROUND+1 .. (r+1)*ROUND.
    by_round = {r["first_iteration"] // ROUND: r for r in reports if r["last_iteration"] - r["first_iteration"] == ROUND - 1}
    twin_round = {r["first_iteration"] // ROUND: r for r in twin if r["last_iteration"] - r["first_iteration"] == ROUND - 1}
    rounds = sorted(set(by_round) & set(twin_round))

    def truth(last_round, count):
        rs = [r for r in rounds if last_round - count < r <= last_round]
        te = sum(by_round[r]["energy"] for r in rs) / max(len(rs), 1)
        ee = sum(twin_round[r]["energy"] for r in rs) / max(len(rs), 1)
        tt = sum(by_round[r]["iteration_time"] for r in rs) / max(len(rs), 1)
        tw = sum(twin_round[r]["iteration_time"] for r in rs) / max(len(rs), 1)
        return 1 - te / ee, tt / tw - 1

    if rounds:
        out.final_truth_saving, out.final_truth_slowdown = truth(rounds[-1], report_rounds)
    # What the server reported after each deployed round, against the truth over the same rounds (once the
    # reporting window is full of deployed rounds).
    history = status.get("history") or []
    deployed = [d["round"] for d in decisions if d.get("event") == "deployed"]
    out.first_deployed_round = deployed[0] if deployed else None
    for h in history:
        last = h["round"] - 1  # the round count after observing round `last`
        if out.first_deployed_round is None or last - report_rounds < out.first_deployed_round:
            continue
        s, d = truth(last, report_rounds)
        out.history_saving_error = max(out.history_saving_error, abs(h["saving"] - s))
        out.history_slowdown_error = max(out.history_slowdown_error, abs(h["slowdown"] - d))
        if h["slowdown"] < -0.001 and d > -0.0005:
            out.false_negative_slowdown = True
    out.retries = sum(1 for d in decisions if d.get("event") == "retrying")
    # Rounds at all-max after the first deployment: their saving below a fifth of the ideal (all-max rounds run
    # the twin's very draws, so their saving is 0 up to the twin's noise).
    if out.first_deployed_round is not None and lowest_ideal is not None and lowest_ideal >= TINY_IDEAL:
        disturbed = set()
        for a, b in scenario.disturbances:
            disturbed.update(range((a - 1) // ROUND, (min(b, scenario.iterations) - 1) // ROUND + 1))
        run = excess = 0
        for r in rounds:
            if r < out.first_deployed_round:
                continue
            at_max = 1 - by_round[r]["energy"] / twin_round[r]["energy"] < lowest_ideal / 5
            if at_max:
                run += 1
                if r not in disturbed:
                    excess += 1
                out.all_max_excess = max(out.all_max_excess, excess)
            else:
                run = excess = 0
    elif out.first_deployed_round is None:
        out.all_max_excess = 10 ** 6
    return out


def run_scenario(perseus, scenario: Scenario) -> Outcome:
    started = time.time()
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            mine = pool.submit(run_simulation, perseus, scenario, "Perseus")
            other = pool.submit(run_simulation, perseus, scenario, "AllMaxFrequency")
            reports, status, decisions, gpu_speeds = mine.result()
            twin, _, _, _ = other.result()
        out = judge(perseus, scenario, reports, twin, status, decisions, gpu_speeds)
    except Exception as e:  # noqa: BLE001 - a failed scenario is a row that says why
        out = Outcome(scenario, error=f"{type(e).__name__}: {e}")
    out.wall = time.time() - started
    return out


def pc(value, digits=2):
    return "-" if value is None else f"{100 * value:.{digits}f}%"


HEADER = ("| scenario | true saving | true slowdown | reported saving [95%] | reported slowdown | ideal | share of ideal | "
          "reported-true (pp) | worst reported-true during the run (pp) | all-max rounds past disturbances | "
          "step-ups | retries | wall (s) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def row(o: Outcome) -> str:
    if o.error:
        return f"| {o.scenario.label} | error: {o.error} |"
    ci = "" if not o.reported_ci else f" [{100 * o.reported_ci[0]:.2f}, {100 * o.reported_ci[1]:.2f}]"
    err = "-" if o.reported_error is None else f"{100 * o.reported_error:+.2f}"
    return (f"| {o.scenario.label} | {pc(o.true_saving)} | {pc(o.true_slowdown)} | {pc(o.reported_saving)}{ci} | "
            f"{pc(o.reported_slowdown)} | {pc(o.ideal)} | {pc(o.share, 0)} | {err} | "
            f"{100 * o.history_saving_error:.2f} / {100 * o.history_slowdown_error:.2f} | {o.all_max_excess} | "
            f"{o.step_ups} | {o.retries} | {o.wall:.0f} |")


MEASURED = {  # name: (file under data/sosp24/stage_profile, P_block W)
    "gpt3-a100": ("gpt3-175b+a100_sxm_bf16.csv", 83.64),
    "bloom-a100": ("bloom+a100_sxm_bf16.csv", 83.64),
    "gpt3-a40": ("gpt3-175b+a40_bf16.csv", 70.38),
    "bloom-a40": ("bloom+a40_bf16.csv", 70.38),
}


def measured_profile(shared, name):
    """(path, P_block) of one of the Perseus authors' measured profiles."""
    file, p_block = MEASURED[name]
    return os.path.join(shared, "data/sosp24/stage_profile", file), p_block


def synth_profile(perseus, out, args):
    """Writes `perseus synth-profile ARGS --out OUT`; returns OUT."""
    subprocess.run([perseus, "synth-profile", *args, "--out", out], check=True, capture_output=True, text=True)
    return out
