#!/usr/bin/env python3
"""Generates option sets that no one tuned to and fits them as the reference planner does.

Each set is one (stage, instruction)'s Pareto options: quantized time q and effective energy e
(energy minus the blocking power times the time), drawn from a small GPU model with seeded noise,
few or many Pareto clocks, unbalanced stages and both unit times. For every set, scipy's
curve_fit is run from the reference's 54 starting points (lowtime's ExponentialModel grid,
maxfev 50000) and the fit with the least mean squared error among those with a finite covariance
and a >= 0 is kept -- the reference's choice rule. A start where curve_fit raises (it does not
converge) is skipped; the reference would stop there.

Writes tests/data/exp_fit_reference.csv: set,unit_time,q,e rows, and
tests/data/exp_fit_scipy.csv: set,a,b,c,mse (empty a,b,c,mse where nothing fits).
Needs python3-scipy (Debian); the test that reads the files does not.

    python3 bench/fit_reference.py [--sets 300] [--seed 7] [--out tests/data]

With --profile, fits a stage profile's options instead (Pareto filter, quantization, noise
factor and effective energy as perseus and the reference build them) and, given the plans.json
of `perseus optimize` on it, prints each (stage, instruction)'s parameters and mean squared
error beside perseus's:

    python3 bench/fit_reference.py --profile P.csv --unit-time 0.001 --p2p-power 83.64 \
        --plans OUT/plans.json
"""
import argparse
import csv
import itertools
import math
import os
import random
import warnings

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit


def gpu_options(rng, unit_time):
    """One instruction's (q, e) Pareto options from a GPU model with noise."""
    top = rng.choice([1410, 1740, 1980])
    step = rng.choice([15, 15, 30, 60, 90])
    bottom = rng.choice([600, 800, 900, 1100])
    clocks = list(range(top, bottom - 1, -step))
    t_top = rng.uniform(0.005, 0.2) * rng.choice([1, 1, 3, 10])  # unbalanced stages
    phi = rng.uniform(0.4, 0.98)
    p_idle = rng.uniform(40, 90)
    p_dyn = rng.uniform(100, 350)
    v_low = rng.uniform(0.6, 0.9)
    noise = rng.choice([0.0, 0.002, 0.01, 0.03, 0.06])
    p_block = rng.uniform(40, 100)
    points = []
    for f in clocks:
        t = t_top * (phi * top / f + 1 - phi)
        v = v_low + (1 - v_low) * (f - bottom) / max(top - bottom, 1)
        p = p_idle + p_dyn * (f / top) * v * v
        t *= math.exp(rng.gauss(0, noise))
        energy = p * t * math.exp(rng.gauss(0, noise))
        points.append((t, energy))
    # Pareto filter on measured (time, energy), then quantize and keep the cheapest per step.
    points.sort()
    pareto = []
    for t, energy in points:
        if not pareto or energy < pareto[-1][1]:
            pareto.append((t, energy))
    by_q = {}
    for t, energy in pareto:
        q = int(t // unit_time)
        e = energy - p_block * q * unit_time
        if q not in by_q or e < by_q[q]:
            by_q[q] = e
    return sorted(by_q.items(), reverse=True)  # descending q, as the planner holds them


def reference_fit(q, e, unit_time):
    fn = lambda t, a, b, c: a * np.exp(b * t) + c  # noqa: E731
    q = np.array(q, dtype=np.int64)
    e = np.array(e, dtype=float)
    best, best_error = None, np.inf
    a_candidates = [1e1, 1e2, 1e3]
    b_candidates = [-c * unit_time / 0.001 for c in [0.01, 0.02, 0.03, 0.04, 0.05, 0.1]]
    c_candidates = [1e1, 1e2, 1e3]
    for p0 in itertools.product(a_candidates, b_candidates, c_candidates):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                (a, b, c), pcov = curve_fit(fn, q, e, p0=list(p0), maxfev=50000)
        except (RuntimeError, OptimizeWarning, ValueError, FloatingPointError):
            continue
        if np.inf in pcov:
            continue
        with np.errstate(all="ignore"):
            error = np.mean(np.square(e - np.array([fn(t, a, b, c) for t in q])))
        if error == np.inf or a < 0.0:
            continue
        if error < best_error:
            best, best_error = (a, b, c), error
    return best, best_error


def profile_options(path, unit_time, p_block, noise_factor=0.95):
    """(stage, kind) -> [(q, e)], descending q, as perseus's build_options makes them."""
    rows = {}
    with open(path, newline="", encoding="utf-8-sig") as f:
        for row in csv.DictReader(f):
            key = (int(row["stage"]), row["instruction"])
            rows.setdefault(key, []).append((float(row["time"]), float(row["energy"])))

    def pareto(points, slack):
        ordered = sorted(points, key=lambda p: -p[0])
        kept = [p for p in ordered
                if not any(o[0] < p[0] * slack and o[1] < p[1] * slack for o in ordered)]
        kept.sort(key=lambda p: -p[1])
        unique = {}
        for t, energy in kept:
            unique.setdefault(int(t // unit_time), (t, energy))
        return sorted(unique.items(), key=lambda item: -item[0])

    result = {}
    for key, points in sorted(rows.items(), key=lambda item: (item[0][0], item[0][1] != "forward")):
        options = pareto(points, 1.0)
        if len(options) <= 3:
            options = pareto(points, noise_factor)
        result[key] = [(q, energy - p_block * q * unit_time) for q, (t, energy) in options]
    return result


def compare_profile(args):
    import json
    import re
    models = json.load(open(args.plans))["models"] if args.plans else None
    for index, ((stage, kind), points) in enumerate(profile_options(args.profile, args.unit_time, args.p2p_power).items()):
        q = [p[0] for p in points]
        e = [p[1] for p in points]
        fit, error = reference_fit(q, e, args.unit_time) if len(points) > 3 else (None, np.inf)
        line = f"stage {stage} {kind} ({len(points)} options): scipy "
        line += "no fit" if fit is None else f"{fit[0]:.17g} * exp({fit[1]:.17g} * q) + {fit[2]:.17g}, mse {error:.17g}"
        if models:
            text = models[index]
            numbers = [float(x) for x in re.findall(r"[-+]?\d[\d.]*(?:e[-+]?\d+)?", text.split(":", 1)[1])]
            if text.startswith("exp") and len(numbers) == 3:
                a, b, c = numbers
                mse = np.mean([(ei - (a * np.exp(b * qi) + c)) ** 2 for qi, ei in zip(q, e)])
                line += f"\n    perseus {a:.17g} * exp({b:.17g} * q) + {c:.17g}, mse {mse:.17g}"
            else:
                line += f"\n    perseus {text[:60]}"
        print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", type=int, default=240)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data"))
    parser.add_argument("--profile", help="fit a stage profile's options instead")
    parser.add_argument("--unit-time", type=float, default=0.001)
    parser.add_argument("--p2p-power", type=float, default=0.0)
    parser.add_argument("--plans", help="plans.json of perseus optimize on --profile, to compare")
    args = parser.parse_args()
    if args.profile:
        compare_profile(args)
        return
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    fitted = 0
    with open(os.path.join(args.out, "exp_fit_reference.csv"), "w", newline="") as options_file, \
            open(os.path.join(args.out, "exp_fit_scipy.csv"), "w", newline="") as fits_file:
        options = csv.writer(options_file, lineterminator="\n")
        fits = csv.writer(fits_file, lineterminator="\n")
        options.writerow(["set", "unit_time", "q", "e"])
        fits.writerow(["set", "a", "b", "c", "mse"])
        made = 0
        while made < args.sets:
            unit_time = rng.choice([0.001, 0.0001])
            points = gpu_options(rng, unit_time)
            if len(points) < 4:
                continue  # the reference needs four to fit at all
            for q, e in points:
                options.writerow([made, unit_time, q, repr(e)])
            fit, error = reference_fit([p[0] for p in points], [p[1] for p in points], unit_time)
            if fit is None:
                fits.writerow([made, "", "", "", ""])
            else:
                fitted += 1
                fits.writerow([made, repr(float(fit[0])), repr(float(fit[1])), repr(float(fit[2])), repr(float(error))])
            made += 1
    print(f"{args.sets} sets, scipy fits {fitted}")


if __name__ == "__main__":
    main()
