#!/usr/bin/env python3
"""A power budget for the cluster (docs/benchmarks.md#a-power-budget-for-the-cluster): three jobs of different
shapes train against one `perseus serve --scheduler Perseus` (one `perseus simulate` each, GPUs of their own);
once every job is deployed the budget goes to 95, 90, 85 and 80% of the cluster's all-max power. Per budget:
the measured cluster power over the last half of the period (mean, and the worst round), each job's throughput
and the aggregate (weighted by GPUs) against all-max; and the same cluster under
(a) a uniform power limit on every GPU at the same total (budget / GPUs, as a datacenter sets it),
(a*) the highest uniform power limit whose measured power fits the budget (the best a uniform limit can do),
(b) the highest uniform locked SM clock whose measured power fits the budget.
Then 100% (every job back to its zero-slowdown plan) and 100% -> 80% at once (the power-limit backstop),
and a verdict per budget on the acceptance's checks. --jobs picks the cluster (the published one, the
authors' A40 profiles, or synthetic shapes), --weights the jobs' priorities; --dynamics instead has a job
arrive, crash and end under 80% of all-max.

    python3 bench/power_budget.py [--perseus build/src/perseus] [--shared ../shared] [--rounds 40]
        [--jobs shipped|other|synthetic] [--weights W1,W2,W3] [--budgets 0.95,0.9,...] [--uniform-only]
    python3 bench/power_budget.py --dynamics [--jobs ...] [--weights ...] [--time-scale 0.02]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_server import serve  # noqa: E402

BUDGETS = [0.95, 0.90, 0.85, 0.80]


def jobs(args, scratch):
    """The three jobs: (name, simulate arguments, GPUs), with --weights' weights (default equal)."""
    the_jobs = {"other": other_jobs, "synthetic": synthetic_jobs, "shipped": shipped_jobs}[args.jobs](args, scratch)
    weights = [float(w) for w in args.weights.split(",")] if args.weights else [1.0] * len(the_jobs)
    if len(weights) != len(the_jobs) or min(weights) <= 0:
        raise SystemExit(f"--weights: {len(the_jobs)} positive numbers, one per job")
    return [(name + (f", weight {w:g}" if args.weights else ""), [*flags, "--weight", str(w)], g, w)
            for (name, flags, g), w in zip(the_jobs, weights)]


def other_jobs(args, scratch):
    """Shapes the budget was not tuned on: the authors' A40 profiles and a deeper synthetic model."""
    data = os.path.join(args.shared, "data/sosp24/stage_profile")
    gpt3, bloom = (os.path.join(data, f) for f in ("gpt3-175b+a40_bf16.csv", "bloom+a40_bf16.csv"))
    if not (os.path.exists(gpt3) and os.path.exists(bloom)):
        raise SystemExit(f"--jobs other needs the shared data set's A40 profiles in {data}")
    deep = os.path.join(scratch, "synthetic-6stage.csv")
    subprocess.run([args.perseus, "synth-profile", "--stages", "6", "--forward-time", "0.045", "--bottom-clock", "750",
                    "--clock-step", "30", "--out", deep], check=True, capture_output=True)
    return [
        ("gpt3-a40 (8x16)", [gpt3, "--stages", "8", "--microbatches", "16", "--p2p-power", "70.38"], 8),
        ("bloom-a40 (8x8, dp2)", [bloom, "--stages", "8", "--microbatches", "8", "--p2p-power", "70.38",
                                  "--pipelines", "2"], 16),
        ("synthetic (6x12)", [deep, "--stages", "6", "--microbatches", "12", "--p2p-power", "55"], 6),
    ]


def synthetic_jobs(args, scratch):
    """Three `perseus synth-profile` models of other shapes: a shallow wide job, a deep noisy one, a short one."""
    def synth(name, *flags):
        out = os.path.join(scratch, name + ".csv")
        subprocess.run([args.perseus, "synth-profile", *flags, "--out", out], check=True, capture_output=True)
        return out
    shallow = synth("synthetic-2stage", "--stages", "2", "--forward-time", "0.025")
    deep = synth("synthetic-12stage", "--stages", "12", "--forward-time", "0.02", "--bottom-clock", "1000",
                 "--noise", "0.02", "--seed", "7")
    short = synth("synthetic-3stage", "--stages", "3", "--forward-time", "0.06", "--top-clock", "1980",
                  "--bottom-clock", "1200")
    return [
        ("synthetic (2x6, dp4)", [shallow, "--stages", "2", "--microbatches", "6", "--p2p-power", "60",
                                  "--pipelines", "4"], 8),
        ("synthetic noisy (12x24)", [deep, "--stages", "12", "--microbatches", "24", "--p2p-power", "75"], 12),
        ("synthetic (3x4, dp2)", [short, "--stages", "3", "--microbatches", "4", "--p2p-power", "50",
                                  "--pipelines", "2"], 6),
    ]


def shipped_jobs(args, scratch):
    gpt3 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "gpt3-175b-a100.csv")
    bloom = os.path.join(args.shared, "data/sosp24/stage_profile/bloom+a100_sxm_bf16.csv")
    if not os.path.exists(bloom):  # without the shared data set: a synthetic deep pipeline instead
        bloom = os.path.join(scratch, "synthetic-8stage.csv")
        subprocess.run([args.perseus, "synth-profile", "--stages", "8", "--forward-time", "0.04", "--out", bloom],
                       check=True, capture_output=True)
    small = os.path.join(scratch, "synthetic-4stage.csv")
    subprocess.run([args.perseus, "synth-profile", "--stages", "4", "--forward-time", "0.03", "--bottom-clock", "600",
                    "--out", small], check=True, capture_output=True)
    return [
        ("gpt3-a100 (8x12, dp2)", [gpt3, "--stages", "8", "--microbatches", "12", "--p2p-power", "83.64",
                                   "--pipelines", "2"], 16),
        ("bloom-a100 (8x12)" if "bloom" in bloom else "synthetic (8x12)",
         [bloom, "--stages", "8", "--microbatches", "12", "--p2p-power", "83.64"], 8),
        ("synthetic (4x8, dp2)", [small, "--stages", "4", "--microbatches", "8", "--p2p-power", "60",
                                  "--pipelines", "2"], 8),
    ]


def call(url, method, path, body=None):
    request = urllib.request.Request(url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


class Server:
    def __init__(self, args, scheduler, scheduler_args, extra=()):
        self.dump = tempfile.TemporaryDirectory()
        self.process, self.url = serve(args.perseus, [
            "--scheduler", scheduler, "--scheduler-args", json.dumps(scheduler_args), "--dump-dir", self.dump.name,
            "--log-level", "error", *extra])

    def close(self):
        self.process.terminate()
        self.process.wait()
        self.dump.cleanup()


def simulate(args, url, job, extra, iterations):
    return subprocess.Popen([args.perseus, "simulate", *job[1], "--server", url, "--iterations", str(iterations),
                             "--report-every", "100000", "--json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def measure_fixed(args, the_jobs, extra_of, iterations=40):
    """Every job alone under AllMaxFrequency with per-job simulate flags: per job (iteration time, power)."""
    server = Server(args, "AllMaxFrequency", {})
    try:
        runs = [simulate(args, server.url, job, extra_of(job), iterations) for job in the_jobs]
        out = []
        for run in runs:
            summary = json.loads(run.communicate()[0].splitlines()[-1])["summary"]["whole"]
            out.append((summary["iteration_time"], summary["energy"] / summary["iteration_time"]))
        return out
    finally:
        server.close()


def aggregate(the_jobs, throughputs):
    gpus = [job[2] for job in the_jobs]
    return sum(g * t for g, t in zip(gpus, throughputs)) / sum(gpus)


def wait_rounds(url, n, timeout=1800):
    """Until every job still running ran `n` more rounds."""
    def running():
        return {j["job_id"]: j["round"] for j in call(url, "GET", "/jobs") if j["phase"] not in ("done", "failed")}
    start = running()
    deadline = time.time() + timeout
    while time.time() < deadline:
        now = running()
        if all(k not in now or now[k] >= v + n for k, v in start.items()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the jobs did not run {n} rounds in {timeout} s")


def period(url, ids, base_times):
    """The last half of the samples since the budget was set: cluster power mean and most, per job throughput."""
    status = call(url, "GET", "/power_budget")
    history = status["history"]
    half = history[len(history) // 2:]
    powers = [s["measured"] for s in half]
    late = [s["measured"] for s in history if s["rounds"] >= 2]
    throughput = []
    for job_id, base in zip(ids, base_times):
        times = [s["iteration_time"] for s in half if s["job_id"] == job_id]
        throughput.append(base / (sum(times) / len(times)) if times else float("nan"))
    return status, sum(powers) / len(powers), max(powers), max(late, default=0.0), throughput


def highest_fitting(candidates, measure, budget):
    """The highest of `candidates` (ascending; power grows with them) whose measured cluster power fits the
    budget, with its measurements (bisection); the lowest when none does."""
    low, high, best = 0, len(candidates) - 1, None
    while low <= high:
        mid = (low + high) // 2
        results = measure(candidates[mid])
        if sum(p for _, p in results) <= budget:
            best, low = (candidates[mid], results), mid + 1
        else:
            high = mid - 1
    return best if best else (candidates[0], measure(candidates[0]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--perseus", default="build/src/perseus")
    parser.add_argument("--shared", default="../shared")
    parser.add_argument("--rounds", type=int, default=40, help="rounds of every job per budget")
    parser.add_argument("--jobs", choices=["shipped", "other", "synthetic"], default="shipped",
                        help="shipped: the published table's three jobs; other: the authors' A40 profiles and a "
                             "deeper synthetic model; synthetic: three synth-profile models of other shapes")
    parser.add_argument("--weights", default="", help="the jobs' priority weights, comma-separated (default equal)")
    parser.add_argument("--budgets", default=",".join(f"{b:g}" for b in BUDGETS),
                        help="fractions of the cluster's all-max power, comma-separated")
    parser.add_argument("--dynamics", action="store_true",
                        help="instead: jobs arriving, ending and crashing under 80%% of all-max")
    parser.add_argument("--time-scale", type=float, default=0.02,
                        help="with --dynamics: simulated time paced at this factor of wall time")
    parser.add_argument("--history", help="with --dynamics: write the server's samples to this JSON file")
    parser.add_argument("--uniform-only", action="store_true",
                        help="compare with (a) alone: skip the searches for (a*) and (b)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        the_jobs = jobs(args, scratch)
        budgets = [float(b) for b in args.budgets.split(",")]
        gpus = sum(job[2] for job in the_jobs)

        # All-max alone, then the power-limit range the simulated GPUs take (the narrowest of the jobs').
        all_max = measure_fixed(args, the_jobs, lambda job: [])
        all_max_power = sum(p for _, p in all_max)
        base_times = [t for t, _ in all_max]
        print(f"cluster: {gpus} GPUs, all-max {all_max_power:.0f} W "
              f"({', '.join(f'{j[0]} {p:.0f} W' for j, (_, p) in zip(the_jobs, all_max))})")
        if args.dynamics:
            return dynamics(args, the_jobs, all_max_power)

        # perseus: one server, three jobs, the budget changed as they run.
        server = Server(args, "Perseus", {"wait_for_plan": True})
        runs = [simulate(args, server.url, job, [], 10 ** 7) for job in the_jobs]
        results = {}
        try:
            deadline = time.time() + 1800
            while time.time() < deadline:
                listed = call(server.url, "GET", "/jobs")
                if len(listed) == len(the_jobs) and all(j["phase"] == "deployed" for j in listed):
                    break
                time.sleep(0.5)
            ids = [None] * len(the_jobs)
            for j in call(server.url, "GET", "/jobs"):  # by model name: the profile's file name
                for i, job in enumerate(the_jobs):
                    if os.path.splitext(os.path.basename(job[1][0]))[0].replace("+", "-") in j["job_id"]:
                        ids[i] = j["job_id"]
            wait_rounds(server.url, 3)
            unbudgeted = call(server.url, "GET", "/power_budget")["measured"]
            print(f"perseus unbudgeted (every job on its zero-slowdown plan): {unbudgeted:.0f} W "
                  f"({100 * unbudgeted / all_max_power:.1f}% of all-max)")
            for fraction in budgets:
                budget = fraction * all_max_power
                call(server.url, "PUT", "/power_budget", {"watts": budget, "seconds": 1e6})
                wait_rounds(server.url, args.rounds)
                status, mean, most, late_most, throughput = period(server.url, ids, base_times)
                results[fraction] = {"budget": budget, "mean": mean, "most": most, "late_most": late_most,
                                     "throughput": throughput,
                                     "rounds": status["since_set"]["complied_after_rounds"],
                                     "backstop": status["backstop"]["active"]}
            call(server.url, "PUT", "/power_budget", {"watts": all_max_power, "seconds": 1e6})
            wait_rounds(server.url, 3)
            back = [j["pace"] for j in call(server.url, "GET", "/power_budget")["jobs"]]
            at_once = call(server.url, "PUT", "/power_budget", {"watts": 0.8 * all_max_power, "seconds": 0})
            wait_rounds(server.url, 6)
            after = call(server.url, "GET", "/power_budget")
        finally:
            for run in runs:
                run.terminate()
                run.wait()
            server.close()

        def tp(measured):
            return [b / t for b, (t, _) in zip(base_times, measured)]

        def cells(throughputs):
            return f"{', '.join(f'{100 * t:.1f}%' for t in throughputs)} | {100 * aggregate(the_jobs, throughputs):.2f}%"

        power_rows, throughput_rows = [], []
        verdicts = []
        for fraction in budgets:
            r = results[fraction]
            budget = r["budget"]
            limit = budget / gpus
            uniform = measure_fixed(args, the_jobs, lambda job, w=limit: ["--power-limit", limit_flag(job, w)])
            if args.uniform_only:
                best_w, best, clock, locked = limit, uniform, 0, all_max
            else:
                best_w, best = highest_fitting(
                    [limit * (1 + 0.01 * k) for k in range(0, 121)],
                    lambda w: measure_fixed(args, the_jobs, lambda job: ["--power-limit", limit_flag(job, w)]), budget)
                clock, locked = highest_fitting(
                    list(range(600, top_clock(the_jobs) + 1, 15)),
                    lambda f: measure_fixed(args, the_jobs, lambda job: ["--max-clock", str(f)]), budget)
            verdicts.append(verdict(fraction, r, the_jobs, tp(uniform)))
            name = f"{100 * fraction:.0f}% ({budget:.0f} W)"
            power_rows.append(
                f"| {name} | {r['mean']:.0f} W ({100 * r['mean'] / budget:.1f}%) | {r['most']:.0f} W "
                f"({100 * r['most'] / budget:.1f}%) | {r['rounds']} | {sum(p for _, p in uniform):.0f} W at "
                f"{limit:.0f} W/GPU | {sum(p for _, p in best):.0f} W at {best_w:.0f} W/GPU "
                f"| {sum(p for _, p in locked):.0f} W at {clock} MHz |")
            throughput_rows.append(f"| {name} | {cells(r['throughput'])} | {cells(tp(uniform))} | {cells(tp(best))} "
                                   f"| {cells(tp(locked))} |")
        names = " · ".join(j[0] for j in the_jobs)
        print()
        print("| budget | perseus: mean | perseus: worst round | rounds to comply | (a) uniform limit B/GPUs "
              "| (a*) best uniform limit | (b) best locked clock |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(power_rows))
        print()
        print(f"| budget | perseus: per job ({names}) | perseus: aggregate | (a) per job | (a) aggregate "
              "| (a*) per job | (a*) aggregate | (b) per job | (b) aggregate |")
        print("|---|---|---|---|---|---|---|---|---|")
        print("\n".join(throughput_rows))
        print()
        print("throughput against all-max alone; aggregate weighted by GPUs")
        print(f"back at 100%: paces {back} (null: unpaced, the zero-slowdown plan)")
        since = after["since_set"]
        print(f"100% -> 80% at once: backstop {at_once['backstop']['active']} at "
              f"{at_once['backstop']['power_limit'] or 0:.0f} W/GPU ({at_once['backstop']['reason']}); after 6 rounds: "
              f"backstop {after['backstop']['active']}, within 1% since every job ran {since['complied_after_rounds']} "
              f"rounds, worst round after the deadline {since['worst_after_deadline'] or 0:.0f} W of "
              f"{0.8 * all_max_power:.0f} W, mean {since['mean_measured']:.0f} W")
        print()
        print("\n".join(verdicts))
        print(f"back at 100%: every job on its zero-slowdown plan: {'yes' if all(p is None for p in back) else 'NO'}")
        ok = (after["backstop"]["active"] is False and since["worst_after_deadline"] is not None
              and since["worst_after_deadline"] <= 1.05 * 0.8 * all_max_power
              and since["mean_measured"] <= 1.01 * 0.8 * all_max_power)
        print(f"100% -> 80% at once: met through power limits, lifted after the plans followed: {'yes' if ok else 'NO'}")


def job_id_of(url, job):
    """The server's id of `job` (by model name: the profile's file name), once it registered."""
    name = os.path.splitext(os.path.basename(job[1][0]))[0].replace("+", "-")
    for j in call(url, "GET", "/jobs"):
        if name in j["job_id"] and j["phase"] not in ("done", "failed"):
            return j["job_id"]
    return None


def wait_until(done, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if done():
            return
        time.sleep(0.1)
    raise RuntimeError("timed out")


def follow(url, budget, since, others):
    """After an event (the history's length `since`, the cluster steady before it): within how many rounds
    of every one of `others`, from the first sample the event changed (a job counted from its registration,
    or gone), the cluster was within 1% of the budget for good: 1 + the fewest rounds any of them had run
    at the last sample over it (0: none over), as the server's complied_after_rounds counts."""
    history = call(url, "GET", "/power_budget")["history"]
    before = history[since - 1]["measured"] if since > 0 else 0
    history = history[since:]
    changed = next((i for i, s in enumerate(history) if abs(s["measured"] - before) > 0.01 * before), len(history))
    history = history[changed:]
    over = [i for i, s in enumerate(history) if s["measured"] > 1.01 * budget]
    if not over:
        return 0
    upto = history[:over[-1] + 1]
    return 1 + min(sum(1 for s in upto if s["job_id"] == j) for j in others)


def dynamics(args, the_jobs, all_max_power):
    """Under 80% of all-max: the first two jobs run; the third arrives, then ends (a finite run); it arrives
    again and crashes (SIGKILL: the server finds its rank dead after --dead-rank-timeout). Per event: the
    rounds the others ran until the cluster stayed within 1% of the budget, and their paces and limits."""
    budget = 0.8 * all_max_power
    server = Server(args, "Perseus", {"wait_for_plan": True}, ["--dead-rank-timeout", "3"])
    runs = []
    try:
        paced = ["--time-scale", str(args.time_scale)]  # every job's rounds in wall time: rounds compare
        runs = [simulate(args, server.url, job, paced, 10 ** 7) for job in the_jobs[:2]]
        wait_until(lambda: all(job_id_of(server.url, j) for j in the_jobs[:2]) and all(
            j["phase"] == "deployed" for j in call(server.url, "GET", "/jobs")))
        others = [job_id_of(server.url, j) for j in the_jobs[:2]]
        call(server.url, "PUT", "/power_budget", {"watts": budget, "seconds": 1e6})
        wait_rounds(server.url, 6)
        alone = {j["job_id"]: j["pace"] for j in call(server.url, "GET", "/power_budget")["jobs"]}
        print(f"budget {budget:.0f} W (80% of all-max); the first two jobs alone: paces {list(alone.values())}")

        def arrive(iterations):
            since = len(call(server.url, "GET", "/power_budget")["history"])
            run = simulate(args, server.url, the_jobs[2], paced, iterations)
            wait_until(lambda: job_id_of(server.url, the_jobs[2]) is not None)
            third = job_id_of(server.url, the_jobs[2])
            wait_until(lambda: next((j["phase"] for j in call(server.url, "GET", "/jobs") if j["job_id"] == third),
                                    "done") in ("deployed", "done", "failed"))
            if iterations < 10 ** 7:  # it ends soon after its deployment
                return run, third, 0
            wait_rounds(server.url, 6)
            status = call(server.url, "GET", "/power_budget")
            rounds = next(j["round"] for j in call(server.url, "GET", "/jobs") if j["job_id"] == third)
            if args.history:
                with open(args.history, "w") as f:
                    json.dump(status["history"][since:], f)
            print(f"arrives: within {follow(server.url, budget, since, others)} rounds of "
                  f"the others from its registration the cluster was within 1% of the budget for good (its warm-up and profiling at "
                  f"all-max included); paces "
                  f"{[j['pace'] for j in status['jobs']]}, backstop {status['backstop']['active']}")
            return run, third, rounds

        def gone(event, third, started):
            since = len(call(server.url, "GET", "/power_budget")["history"])
            wait_until(lambda: all(j["job_id"] != third for j in call(server.url, "GET", "/power_budget")["jobs"]))
            left = f"{time.time() - started:.1f} s later" if started else "at its end"
            wait_rounds(server.url, 2)
            status = call(server.url, "GET", "/power_budget")
            paces = {j["job_id"]: j["pace"] for j in status["jobs"]}
            back = all((paces[k] is None) == (alone[k] is None) and (paces[k] is None or alone[k] is None or abs(
                paces[k] / alone[k] - 1) < 0.02) for k in others)
            limits = [j["power_limit"] for j in status["jobs"]]
            print(f"{event}: it left the budget {left}; two rounds on, the others' paces "
                  f"{list(paces.values())} ({'as before it came' if back else 'NOT as before it came'}), "
                  f"power limits {limits}, cluster {status['measured']:.0f} W, over 1% "
                  f"until the others' round {follow(server.url, budget, since, others)}")

        run, third, rounds = arrive(10 ** 7)
        run.kill()
        gone("crashes (SIGKILL)", third, time.time())
        run.wait()
        # Again, for as many iterations as it took to deploy and run 6 rounds, plus 4: it ends on its own.
        run, third, _ = arrive(rounds + 4)
        gone("ends (its last iteration)", third, None)
        run.wait()
    finally:
        for run in runs:
            run.terminate()
            run.wait()
        server.close()


def verdict(fraction, r, the_jobs, uniform):
    """The issue's checks at one budget, from perseus's run and (a)'s throughputs."""
    budget = r["budget"]
    lines = [f"{100 * fraction:.0f}%: last half mean {100 * r['mean'] / budget:.1f}% of the budget "
             f"({'ok' if r['mean'] <= 1.01 * budget else 'OVER'}); worst round once every job ran two rounds "
             f"{100 * r['late_most'] / budget:.1f}% ({'ok' if r['late_most'] <= 1.05 * budget else 'OVER'})"]
    lost, lost_uniform = 1 - aggregate(the_jobs, r["throughput"]), 1 - aggregate(the_jobs, uniform)
    weighted = [j[2] * j[3] for j in the_jobs]
    lost_w = 1 - sum(w * t for w, t in zip(weighted, r["throughput"])) / sum(weighted)
    lost_w_uniform = 1 - sum(w * t for w, t in zip(weighted, uniform)) / sum(weighted)
    worse = [j[0] for j, p, u in zip(the_jobs, r["throughput"], uniform) if p < u]
    lines.append(f"  aggregate throughput lost: perseus {100 * lost:.2f}%, uniform limit {100 * lost_uniform:.2f}% "
                 f"(ratio {lost / lost_uniform if lost_uniform > 0 else float('nan'):.3f}; weighted by priority "
                 f"{100 * lost_w:.2f}% against {100 * lost_w_uniform:.2f}%); jobs losing more than under the "
                 f"uniform limit: {', '.join(worse) if worse else 'none'}")
    return "\n".join(lines)


def top_clock(the_jobs):
    """The highest SM clock any job's profile has: the locked clocks searched go up to it."""
    import csv
    top = 0
    for job in the_jobs:
        with open(job[1][0]) as f:
            top = max(top, max(int(float(r["frequency"])) for r in csv.DictReader(f)))
    return top


def limit_flag(job, watts):
    """--power-limit for `watts` on the job's simulated GPUs: within the limits they take, from
    max(P_block + 1, a quarter of the profile's highest power) to that highest power."""
    import csv
    import math
    with open(job[1][0]) as f:
        highest = max(float(r["energy"]) / float(r["time"]) for r in csv.DictReader(f))
    p_block = float(job[1][job[1].index("--p2p-power") + 1])
    top = max(1.0, math.ceil(highest))
    bottom = min(top, math.ceil(max(p_block + 1, top / 4)))
    return f"{min(max(watts, bottom), top):.3f}"


if __name__ == "__main__":
    sys.exit(main())
