#!/usr/bin/env python3
"""The turnkey loop under noise and disturbances: each scenario runs `perseus simulate` against
`perseus serve --scheduler Perseus` and against an `AllMaxFrequency` twin with the same profile,
noise, seed and disturbances; truth is simulate's own time and energy over the stated iterations.
Prints the true saving and slowdown, what the server reported (with its interval), and the share of
the ideal saving (`perseus whatif`'s noise-free saving at T'/T = 1, the same choice rule).

    python3 bench/turnkey_robustness.py [--perseus build/src/perseus] [--shared ../shared]
                                        [--only noise|disturbances] [--seeds 3] [--first-seed 1]
                                        [--iterations 1000] [--report-every 50]
                                        [--sigmas 0,0.01,0.02,0.03] [--profiles gpt3-a100,...]
                                        [--scheduler-args '{"refine_passes": 1}']
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_server import free_port, wait_for  # noqa: E402

PROFILES = {  # name: (file, microbatches, P_block W)
    "gpt3-a100": ("gpt3-175b+a100_sxm_bf16.csv", 12, 83.64),
    "bloom-a100": ("bloom+a100_sxm_bf16.csv", 12, 83.64),
    "gpt3-a40": ("gpt3-175b+a40_bf16.csv", 12, 70.38),
    "bloom-a40": ("bloom+a40_bf16.csv", 12, 70.38),
}

# name: (extra simulate arguments, first iteration of the truth window)
DISTURBANCES = [
    ("1 iteration 1.3x in the baseline", ["--straggler", "all:1.3@8-8"], 701),
    ("baseline round 1.3x on pipeline 0", ["--straggler", "0:1.3@6-10"], 701),
    ("cluster 1.1x for 501-650", ["--straggler", "all:1.1@501-650"], 701),
    ("straggler 1.02x 501-650", ["--straggler", "1:1.02@501-650"], 701),
    ("straggler 1.03x 501-650", ["--straggler", "1:1.03@501-650"], 701),
    ("straggler 1.04x 501-650", ["--straggler", "1:1.04@501-650"], 701),
    ("straggler 1.3x while profiling", ["--straggler", "1:1.3@30-90"], 701),
    ("gpu speed spread 0.02", ["--gpu-speed-spread", "0.02"], 701),
]




def simulate(args, scheduler, profile, microbatches, p_block, extra):
    """Runs one server and one simulation; (reports, final server status)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    sched_args = json.dumps({"wait_for_plan": True, **json.loads(args.scheduler_args)}) if scheduler == "Perseus" else "{}"
    with tempfile.TemporaryDirectory() as dump:
        server = subprocess.Popen([args.perseus, "serve", "--scheduler", scheduler, "--port", str(port), "--dump-dir",
                                   dump, "--scheduler-args", sched_args],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(url)
            lines = subprocess.run([args.perseus, "simulate", profile, "--stages", "8", "--microbatches",
                                    str(microbatches), "--p2p-power", str(p_block), "--pipelines", "2",
                                    "--iterations", str(args.iterations), "--report-every", str(args.report_every), "--server", url,
                                    "--json"] + extra,
                                   check=True, capture_output=True, text=True).stdout.splitlines()
        finally:
            server.terminate()
            server.wait()
    reports = [json.loads(line)["report"] for line in lines if line.startswith('{"report"')]
    summary = json.loads(lines[-1])["summary"]
    return reports, summary["server"]


def window(reports, first):
    """Mean time and energy per iteration over iterations first..end."""
    t = e = n = 0
    for r in reports:
        if r["first_iteration"] >= first:
            k = r["last_iteration"] - r["first_iteration"] + 1
            t += r["iteration_time"] * k
            e += r["energy"] * k
            n += k
    return t / n, e / n


def ideal_saving(args, profile, microbatches, p_block, unit_time, cache={}):
    key = (profile, unit_time)
    if key not in cache:
        out = subprocess.run([args.perseus, "whatif", profile, "--stages", "8", "--microbatches", str(microbatches),
                              "--p2p-power", str(p_block), "--pipelines", "2", "--slowdowns", "1", "--unit-time",
                              str(unit_time), "--baselines", "all-max"], check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            if re.match(r"\s*1\.000\s+perseus\s", line):
                cache[key] = float(line.split()[-1].rstrip("%")) / 100
                break
        else:
            raise RuntimeError("no perseus row in whatif's output:\n" + out)
    return cache[key]


def run_case(args, label, name, extra, first):
    file, microbatches, p_block = PROFILES[name]
    profile = os.path.join(args.shared, "data/sosp24/stage_profile", file)
    started = time.time()
    reports, status = simulate(args, "Perseus", profile, microbatches, p_block, extra)
    twin_reports, _ = simulate(args, "AllMaxFrequency", profile, microbatches, p_block, extra)
    t, e = window(reports, first)
    t0, e0 = window(twin_reports, first)
    true_saving, true_slowdown = 1 - e / e0, t / t0 - 1
    ideal = ideal_saving(args, profile, microbatches, p_block, status["plan"]["unit_time"]) if status.get("plan") else None
    saving, slowdown = status.get("saving"), status.get("slowdown")
    ci = status.get("saving_ci") or [None, None]
    fmt_pc = lambda v: "-" if v is None else f"{100 * v:6.2f}%"
    share = "-" if not ideal else f"{100 * true_saving / ideal:5.0f}%"
    off = "-" if saving is None else f"{100 * abs(saving - true_saving):5.2f}"
    ci_text = "-" if ci[0] is None else f"[{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]"
    plan = status.get("plan") or {}
    print(f"| {label} | {name} | {fmt_pc(true_saving)} | {fmt_pc(true_slowdown)} | {fmt_pc(saving)} {ci_text} | "
          f"{fmt_pc(slowdown)} | {fmt_pc(ideal)} | {share} | {off} | {plan.get('step_ups', '-')} | "
          f"{time.time() - started:.0f} |", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--perseus", default="build/src/perseus")
    parser.add_argument("--shared", default="../shared")
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--report-every", type=int, default=50, help="iterations per round (the client's report_every)")
    parser.add_argument("--only", choices=["noise", "disturbances"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--sigmas", default="0,0.01,0.02,0.03")
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--scheduler-args", default="{}", help="more Perseus scheduler arguments (JSON object)")
    args = parser.parse_args()
    print("| scenario | profile | true saving | true slowdown | reported saving [95%] | reported slowdown | ideal | "
          "share of ideal | reported-true (pp) | step-ups | wall (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    if args.only != "disturbances":
        for name in args.profiles.split(","):
            for sigma in [float(s) for s in args.sigmas.split(",")]:
                for seed in range(args.first_seed, args.first_seed + (args.seeds if sigma > 0 else 1)):
                    run_case(args, f"noise {sigma} seed {seed}", name,
                             ["--noise", str(sigma), "--seed", str(seed)], 501)
    if args.only != "noise":
        for label, extra, first in DISTURBANCES:
            run_case(args, label, "gpt3-a100", ["--noise", "0.01", "--seed", "1"] + extra, first)


if __name__ == "__main__":
    sys.exit(main())
