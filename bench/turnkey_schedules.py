#!/usr/bin/env python3
"""The turnkey loop on every pipeline schedule (docs/benchmarks.md): for each, `perseus serve --scheduler
Perseus` and `perseus simulate --schedule S` with 2 pipelines on the shipped GPT-3 175B A100 profile (its
backwards split 50/50 for the zero-bubble and V schedules), then the server's measured saving next to
`perseus whatif --schedule S`'s (its non-straggler saving at T'/T = 1, with the loop's time quantum).

    python3 bench/turnkey_schedules.py [--perseus build/src/perseus] [--microbatches 16]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_server import serve  # noqa: E402
from whatif_saving import whatif_saving  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
P_BLOCK = 83.64
CASES = [  # schedule, stages, extra shape arguments, split backwards
    ("1f1b", 8, [], False),
    ("interleaved", 4, ["--virtual-stages", "2"], False),
    ("zb-h1", 8, [], True),
    ("zbv", 4, [], True),
    ("dualpipev", 4, [], True),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--perseus", default="build/src/perseus")
    parser.add_argument("--microbatches", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=400)
    args = parser.parse_args()
    print(f"{'schedule':12} {'stages':>6} {'rounds':>6} {'saving':>7} {'whatif':>7} {'diff(pp)':>8} {'slowdown':>8} "
          f"{'wall(s)':>7}")
    with tempfile.TemporaryDirectory() as scratch:
        whole = os.path.join(ROOT, "examples", "gpt3-175b-a100.csv")
        split = os.path.join(scratch, "gpt3-split.csv")
        subprocess.run([args.perseus, "synth-profile", "--from", whole, "--split-backward", "0.5", "--out", split],
                       check=True, capture_output=True)
        for schedule, stages, extra, split_backward in CASES:
            profile = split if split_backward else whole
            shape = ["--stages", str(stages), "--microbatches", str(args.microbatches), "--schedule", schedule, *extra]
            with tempfile.TemporaryDirectory() as dump:
                server, url = serve(args.perseus, ["--scheduler", "Perseus", "--dump-dir", dump, "--scheduler-args",
                                                   json.dumps({"wait_for_plan": True})])
                try:
                    started = time.time()
                    lines = subprocess.run([args.perseus, "simulate", profile, *shape, "--p2p-power", str(P_BLOCK),
                                            "--pipelines", "2", "--iterations", str(args.iterations), "--server", url,
                                            "--json"], check=True, capture_output=True, text=True).stdout.splitlines()
                    wall = time.time() - started
                finally:
                    server.terminate()
                    server.wait()
            status = json.loads(lines[-1])["summary"]["server"]
            if status.get("saving") is None:
                print(f"{schedule:12} {stages:6d} not deployed: phase {status.get('phase')}")
                continue
            predicted = whatif_saving(args.perseus, profile, shape, P_BLOCK, status["plan"]["unit_time"])
            saving = status["saving"]
            print(f"{schedule:12} {stages:6d} {status['profiling']['rounds']:6d} {100 * saving:6.2f}% "
                  f"{100 * predicted:6.2f}% {100 * (predicted - saving):8.2f} {100 * status['slowdown']:7.3f}% "
                  f"{wall:7.1f}")


if __name__ == "__main__":
    sys.exit(main())
