#!/usr/bin/env python3
"""The turnkey loop on the four published real profiles (docs/benchmarks.md): for each, `perseus serve
--scheduler Perseus` and `perseus simulate` with 2 pipelines, then the server's verdict next to the
plan planned from the full profile (`perseus whatif`'s non-straggler saving at T'/T = 1, the same
choice rule) and the rounds a one-round-per-clock profiler takes.

    python3 bench/turnkey_profiles.py [--perseus build/src/perseus] [--shared ../shared]
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
from whatif_saving import whatif_saving  # noqa: E402

CASES = [  # profile, microbatches, P_block (W)
    ("gpt3-175b+a100_sxm_bf16.csv", 12, 83.64),
    ("bloom+a100_sxm_bf16.csv", 12, 83.64),
    ("gpt3-175b+a40_bf16.csv", 12, 70.38),
    ("bloom+a40_bf16.csv", 12, 70.38),
]




def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--perseus", default="build/src/perseus")
    parser.add_argument("--shared", default="../shared")
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--scheduler-args", default="{}", help="more Perseus arguments, JSON")
    args = parser.parse_args()
    print(f"{'profile':32} {'rounds':>6} {'1/clock':>7} {'ratio':>6} {'saving':>7} {'full':>7} {'diff(pp)':>8} "
          f"{'slowdown':>8} {'wall(s)':>7}")
    for name, microbatches, p_block in CASES:
        profile = os.path.join(args.shared, "data/sosp24/stage_profile", name)
        with tempfile.TemporaryDirectory() as dump:
            server, url = serve(args.perseus, ["--scheduler", "Perseus", "--dump-dir", dump, "--scheduler-args",
                                               json.dumps({"wait_for_plan": True, **json.loads(args.scheduler_args)})])
            try:
                started = time.time()
                lines = subprocess.run([args.perseus, "simulate", profile, "--stages", "8", "--microbatches",
                                        str(microbatches), "--p2p-power", str(p_block), "--pipelines", "2",
                                        "--iterations", str(args.iterations), "--server", url, "--json"],
                                       check=True, capture_output=True, text=True).stdout.splitlines()
                wall = time.time() - started
            finally:
                server.terminate()
                server.wait()
        status = json.loads(lines[-1])["summary"]["server"]
        rounds = status["profiling"]["rounds"]
        clocks = status["profiling"]["clocks_available"]
        full = whatif_saving(args.perseus, profile, ["--stages", "8", "--microbatches", str(microbatches)], p_block,
                             status["plan"]["unit_time"])
        saving = status["saving"]
        print(f"{name:32} {rounds:6d} {clocks:7d} {rounds / clocks:6.2f} {100 * saving:6.2f}% {100 * full:6.2f}% "
              f"{100 * (full - saving):8.2f} {100 * status['slowdown']:7.3f}% {wall:7.1f}")


if __name__ == "__main__":
    sys.exit(main())
