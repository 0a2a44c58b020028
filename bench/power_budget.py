#!/usr/bin/env python3
"""A power budget for the cluster (docs/benchmarks.md#a-power-budget-for-the-cluster): three jobs of different
shapes train against one `perseus serve --scheduler Perseus` (one `perseus simulate` each, GPUs of their own);
once every job is deployed the budget goes to 95, 90, 85 and 80% of the cluster's all-max power. Per budget:
the measured cluster power over the last half of the period (mean, and the worst round), each job's throughput
and the aggregate (weighted by GPUs) against all-max; and the same cluster under
(a) a uniform power limit on every GPU at the same total (budget / GPUs, as a datacenter sets it),
(a*) the highest uniform power limit whose measured power fits the budget (the best a uniform limit can do),
(b) the highest uniform locked SM clock whose measured power fits the budget.
Then 100% (every job back to its zero-slowdown plan) and 100% -> 80% at once (the power-limit backstop).

    python3 bench/power_budget.py [--perseus build/src/perseus] [--shared ../shared] [--rounds 40]
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
from local_server import free_port, wait_for  # noqa: E402

BUDGETS = [0.95, 0.90, 0.85, 0.80]


def jobs(args, scratch):
    """The three jobs: (name, simulate arguments, GPUs)."""
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
    def __init__(self, args, scheduler, scheduler_args):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dump = tempfile.TemporaryDirectory()
        self.process = subprocess.Popen(
            [args.perseus, "serve", "--scheduler", scheduler, "--scheduler-args", json.dumps(scheduler_args),
             "--port", str(self.port), "--dump-dir", self.dump.name, "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self.url)

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
    start = {j["job_id"]: j["round"] for j in call(url, "GET", "/jobs")}
    deadline = time.time() + timeout
    while time.time() < deadline:
        now = {j["job_id"]: j["round"] for j in call(url, "GET", "/jobs")}
        if all(now.get(k, 0) >= v + n for k, v in start.items()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the jobs did not run {n} rounds in {timeout} s")


def period(url, ids, base_times):
    """The last half of the samples since the budget was set: cluster power mean and most, per job throughput."""
    status = call(url, "GET", "/power_budget")
    history = status["history"]
    half = history[len(history) // 2:]
    powers = [s["measured"] for s in half]
    throughput = []
    for job_id, base in zip(ids, base_times):
        times = [s["iteration_time"] for s in half if s["job_id"] == job_id]
        throughput.append(base / (sum(times) / len(times)) if times else float("nan"))
    return status, sum(powers) / len(powers), max(powers), throughput


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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        the_jobs = jobs(args, scratch)
        gpus = sum(job[2] for job in the_jobs)

        # All-max alone, then the power-limit range the simulated GPUs take (the narrowest of the jobs').
        all_max = measure_fixed(args, the_jobs, lambda job: [])
        all_max_power = sum(p for _, p in all_max)
        base_times = [t for t, _ in all_max]
        print(f"cluster: {gpus} GPUs, all-max {all_max_power:.0f} W "
              f"({', '.join(f'{j[0]} {p:.0f} W' for j, (_, p) in zip(the_jobs, all_max))})")

        # perseus: one server, three jobs, the budget changed as they run.
        server = Server(args, "Perseus", {"wait_for_plan": True})
        runs = [simulate(args, server.url, job, [], 10 ** 7) for job in the_jobs]
        results = {}
        try:
            deadline = time.time() + 1800
            while time.time() < deadline:
                listed = call(server.url, "GET", "/jobs")
                if len(listed) == 3 and all(j["phase"] == "deployed" for j in listed):
                    break
                time.sleep(0.5)
            ids = [None] * 3
            for j in call(server.url, "GET", "/jobs"):  # by model name: the profile's file name
                for i, job in enumerate(the_jobs):
                    if os.path.splitext(os.path.basename(job[1][0]))[0].replace("+", "-") in j["job_id"]:
                        ids[i] = j["job_id"]
            wait_rounds(server.url, 3)
            unbudgeted = call(server.url, "GET", "/power_budget")["measured"]
            print(f"perseus unbudgeted (every job on its zero-slowdown plan): {unbudgeted:.0f} W "
                  f"({100 * unbudgeted / all_max_power:.1f}% of all-max)")
            for fraction in BUDGETS:
                budget = fraction * all_max_power
                call(server.url, "PUT", "/power_budget", {"watts": budget, "seconds": 1e6})
                wait_rounds(server.url, args.rounds)
                status, mean, most, throughput = period(server.url, ids, base_times)
                results[fraction] = {"budget": budget, "mean": mean, "most": most, "throughput": throughput,
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
        for fraction in BUDGETS:
            r = results[fraction]
            budget = r["budget"]
            limit = budget / gpus
            uniform = measure_fixed(args, the_jobs, lambda job, w=limit: ["--power-limit", limit_flag(job, w)])
            best_w, best = highest_fitting(
                [limit * (1 + 0.01 * k) for k in range(0, 121)],
                lambda w: measure_fixed(args, the_jobs, lambda job: ["--power-limit", limit_flag(job, w)]), budget)
            clock, locked = highest_fitting(
                list(range(600, 1411, 15)),
                lambda f: measure_fixed(args, the_jobs, lambda job: ["--max-clock", str(f)]), budget)
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
