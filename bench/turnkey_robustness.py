#!/usr/bin/env python3
"""The turnkey loop under noise and disturbances: each scenario runs `perseus simulate` against
`perseus serve --scheduler Perseus` and against an `AllMaxFrequency` twin with the same profile,
noise, seed and disturbances; truth is simulate's own time and energy (bench/turnkey_truth.py). Prints
the true saving and slowdown, what the server reported (with its interval), the share of the ideal
saving (`perseus whatif`'s noise-free saving at T'/T = 1 for the same schedule and shape), how far what
the server reported after each round was from the truth over the same rounds, and how many rounds past
the disturbances it ran at all-max.

    python3 bench/turnkey_robustness.py [--perseus build/src/perseus] [--shared ../shared]
                                        [--only noise|disturbances|classes] [--classes phase,spread,...]
                                        [--seeds 3] [--first-seed 1] [--iterations 1000]
                                        [--sigmas 0,0.01,0.02,0.03] [--profiles gpt3-a100,...]
                                        [--scheduler-args '{"refine_passes": 1}']
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from turnkey_truth import HEADER, Scenario, measured_profile, row, run_scenario, synth_profile  # noqa: E402

# name: (extra simulate arguments, disturbed iterations)
DISTURBANCES = [
    ("1 iteration 1.3x in the baseline", ["--straggler", "all:1.3@8-8"], [(8, 8)]),
    ("baseline round 1.3x on pipeline 0", ["--straggler", "0:1.3@6-10"], [(6, 10)]),
    ("cluster 1.1x for 501-650", ["--straggler", "all:1.1@501-650"], [(501, 650)]),
    ("straggler 1.02x 501-650", ["--straggler", "1:1.02@501-650"], [(501, 650)]),
    ("straggler 1.03x 501-650", ["--straggler", "1:1.03@501-650"], [(501, 650)]),
    ("straggler 1.04x 501-650", ["--straggler", "1:1.04@501-650"], [(501, 650)]),
    ("straggler 1.3x while profiling", ["--straggler", "1:1.3@30-90"], [(30, 90)]),
    ("gpu speed spread 0.02", ["--gpu-speed-spread", "0.02"], []),
]


def stragglers(*specs):
    """simulate arguments and disturbed ranges for PIPELINE:FACTOR@FROM-UNTIL specs (UNTIL 0: to the end)."""
    extra, ranges = [], []
    for spec in specs:
        who, rest = spec.split(":")
        factor, when = rest.split("@")
        first, last = (int(x) for x in when.split("-"))
        extra += ["--straggler", f"{who}:{factor}@{first}" + (f"-{last}" if last else "")]
        ranges.append((first, last or 10 ** 9))
    return extra, ranges


def class_scenarios(args, scratch):
    """The issue's classes, one or a few instances each (2 pipelines, noise 0.01-0.02)."""
    gpt3, gpt3_pb = measured_profile(args.shared, "gpt3-a100")
    a40, a40_pb = measured_profile(args.shared, "gpt3-a40")
    bloom, bloom_pb = measured_profile(args.shared, "bloom-a100")
    out = []

    def add(group, label, profile, p_block, extra, ranges=(), stages=8, microbatches=12, **kw):
        out.append(Scenario(label=label, profile=profile, stages=stages, microbatches=microbatches, p_block=p_block,
                            iterations=args.iterations, simulate_args=extra, disturbances=list(ranges), group=group,
                            scheduler_args=json.loads(args.scheduler_args), **kw))

    noise = lambda sigma, seed: ["--noise", str(sigma), "--seed", str(seed)]  # noqa: E731
    # Transient slowdowns of the whole cluster in each phase (warm-up ~ iterations 1-45, profiling ~ 46-120).
    for label, spec in [("warm-up", "all:1.05@3-40"), ("warm-up and profiling", "all:1.03@1-150"),
                        ("profiling", "all:1.04@50-100"), ("deployed", "all:1.1@501-650")]:
        extra, ranges = stragglers(spec + ("" if spec.count("-") else "-0"))
        add("phase", f"cluster {spec.split(':')[1]} ({label})", gpt3, gpt3_pb, noise(0.01, 1) + extra, ranges)
    extra, ranges = stragglers("all:1.03@1-150")
    add("phase", "cluster 1.03@1-150 (A40)", a40, a40_pb, noise(0.02, 2) + extra, ranges)
    # GPU speed spread, with and without stragglers.
    add("spread", "spread 0.03", bloom, bloom_pb, noise(0.02, 2) + ["--gpu-speed-spread", "0.03"])
    add("spread", "spread 0.02 (A40)", a40, a40_pb, noise(0.01, 3) + ["--gpu-speed-spread", "0.02"])
    extra, ranges = stragglers("1:1.05@300-0")
    add("spread", "spread 0.03, straggler 1.05@300", a40, a40_pb,
        noise(0.02, 1) + ["--gpu-speed-spread", "0.03"] + extra, ranges)
    extra, ranges = stragglers("0:1.1@300-600")
    add("spread", "spread 0.03, straggler 1.1@300-600", gpt3, gpt3_pb,
        noise(0.01, 4) + ["--gpu-speed-spread", "0.03"] + extra, ranges)
    # Permanent stragglers.
    for spec, profile, p_block in [("1:1.1@300-0", gpt3, gpt3_pb), ("0:1.2@200-0", bloom, bloom_pb)]:
        extra, ranges = stragglers(spec)
        add("permanent", f"straggler {spec.split(':', 1)[1].replace('-0', '')} for good", profile, p_block,
            noise(0.01, 1) + extra, ranges)
    # Stragglers from iteration 1: in the baseline.
    for spec, profile, p_block in [("1:1.1@1-0", gpt3, gpt3_pb), ("0:1.07@1-0", a40, a40_pb),
                                   ("1:1.2@1-400", gpt3, gpt3_pb)]:
        extra, ranges = stragglers(spec)
        add("from-start", f"straggler {spec.split(':', 1)[1].replace('-0', '')}", profile, p_block,
            noise(0.01, 2) + extra, ranges)
    # Drift in steps.
    extra, ranges = stragglers("all:1.01@200-399", "all:1.02@400-599", "all:1.03@600-799", "all:1.04@800-0")
    add("drift", "drift 1.01, 1.02, 1.03, 1.04 from 200, every 200", gpt3, gpt3_pb, noise(0.01, 1) + extra)
    extra, _ = stragglers("all:1.01@150-0", "all:1.01@300-0", "all:1.01@450-0", "all:1.01@600-0")
    add("drift", "drift +1% every 150 (A40)", a40, a40_pb, noise(0.02, 3) + extra)
    # Short and uneven pipelines, made with perseus synth-profile.
    two = synth_profile(args.perseus, os.path.join(scratch, "two.csv"), ["--stages", "2"])
    add("shape", "2 stages (synthetic)", two, 60, noise(0.01, 1), stages=2, microbatches=8)
    two_m = synth_profile(args.perseus, os.path.join(scratch, "two-m.csv"), ["--from", gpt3, "--pick-stages", "0,7"])
    add("shape", "2 stages (GPT-3 A100's first and last)", two_m, gpt3_pb, noise(0.01, 2), stages=2, microbatches=8)
    uneven = synth_profile(args.perseus, os.path.join(scratch, "uneven.csv"),
                           ["--stages", "8", "--stage-weights", "1.3,0.8,1,1.2,0.7,1,0.9,1.1", "--compute-share",
                            "0.7"])
    add("shape", "8 uneven stages (synthetic)", uneven, 60, noise(0.02, 1))
    uneven_m = synth_profile(args.perseus, os.path.join(scratch, "uneven-m.csv"),
                             ["--from", bloom, "--pick-stages", "0,3,3,5,7"])
    add("shape", "5 stages of Bloom A100", uneven_m, bloom_pb, noise(0.02, 1), stages=5, microbatches=10)
    # Every schedule under noise (the split backwards for the zero-bubble and V schedules).
    split = synth_profile(args.perseus, os.path.join(scratch, "split.csv"), ["--from", gpt3, "--split-backward", "0.5"])
    for schedule, stages, extra, profile in [("1f1b", 8, {}, gpt3), ("gpipe", 8, {}, gpt3),
                                             ("interleaved", 4, {"virtual_stages": 2}, gpt3),
                                             ("zb-h1", 8, {}, split), ("zbv", 4, {}, split),
                                             ("dualpipev", 4, {}, split)]:
        add("schedules", f"{schedule}, noise 0.02", profile, gpt3_pb, noise(0.02, 1), stages=stages, microbatches=16,
            schedule=schedule, **extra)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--perseus", default="build/src/perseus")
    parser.add_argument("--shared", default="../shared")
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--only", choices=["noise", "disturbances", "classes"])
    parser.add_argument("--classes", default="", help="with --only classes: these groups only (comma-separated)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--sigmas", default="0,0.01,0.02,0.03")
    parser.add_argument("--profiles", default="gpt3-a100,bloom-a100,gpt3-a40,bloom-a40")
    parser.add_argument("--scheduler-args", default="{}", help="more Perseus scheduler arguments (JSON object)")
    args = parser.parse_args()
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        cases = []
        if args.only in (None, "noise"):
            for name in args.profiles.split(","):
                profile, p_block = measured_profile(args.shared, name)
                for sigma in [float(s) for s in args.sigmas.split(",")]:
                    for seed in range(args.first_seed, args.first_seed + (args.seeds if sigma > 0 else 1)):
                        cases.append(Scenario(label=f"noise {sigma} seed {seed} ({name})", profile=profile, stages=8,
                                              microbatches=12, p_block=p_block, iterations=args.iterations,
                                              simulate_args=["--noise", str(sigma), "--seed", str(seed)],
                                              scheduler_args=json.loads(args.scheduler_args), group="noise"))
        if args.only in (None, "disturbances"):
            profile, p_block = measured_profile(args.shared, "gpt3-a100")
            for label, extra, ranges in DISTURBANCES:
                cases.append(Scenario(label=label, profile=profile, stages=8, microbatches=12, p_block=p_block,
                                      iterations=args.iterations, disturbances=ranges, group="disturbances",
                                      simulate_args=["--noise", "0.01", "--seed", "1"] + extra,
                                      scheduler_args=json.loads(args.scheduler_args)))
        if args.only in (None, "classes"):
            wanted = set(filter(None, args.classes.split(",")))
            cases += [c for c in class_scenarios(args, scratch) if not wanted or c.group in wanted]
        for case in cases:
            print(row(run_scenario(args.perseus, case)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
