#!/usr/bin/env python3
"""Checks that the code's areas form layers: no area includes a higher one.

An area is a folder under src/ and include/perseus/ (src/server/... and include/perseus/server/...
are the area `server`). Reads every `#include "perseus/<area>/..."` line there and fails naming
the file and line where an area includes a higher area, or one of its own tier (areas of a tier
are independent of each other), or an area this order does not name.

With --client-binary (a program that links only the client library, such as tests' fake_trainer),
also checks that neither its link line in the build tree (--build-dir) nor its symbols and shared
libraries hold SQLite, the server or the solver: a training job links the client, nothing above.

The tests mirror the areas: every folder under tests/ must be an area of the order or one of the
test suite's own folders (TEST_FOLDERS), and no test source sits in tests/ itself.

Usage: check_layers.py [--source-dir DIR] [--build-dir DIR --client-binary FILE]
"""
import argparse
import os
import re
import subprocess
import sys

# From the bottom: the planner (util .. plan), its evaluation, the GPU and its daemon, the wire
# protocol, what runs beside training (client, Zeus's API), the online loop, the server, the
# simulated cluster and the command line. Areas on one line form a tier.
LAYERS = [
    ["util"],
    ["profile"],
    ["model"],
    ["pipeline"],
    ["solver"],
    ["plan"],
    ["emulate"],
    ["baselines", "plot"],
    ["gpu", "cpu"],
    ["gpud"],
    ["protocol"],
    ["client", "zeus"],
    ["online"],
    ["server"],
    ["simulate"],
    ["cli"],
]
TIER = {area: tier for tier, areas in enumerate(LAYERS) for area in areas}
INCLUDE = re.compile(r'^\s*#\s*include\s*"perseus/([A-Za-z0-9_]+)/')
SOURCE_SUFFIXES = (".hpp", ".cpp", ".h", ".cc", ".in")
TEST_FOLDERS = {"faults": "fault injection with processes", "fuzz": "libFuzzer harnesses",
                "python": "the Python package's tests", "browser": "the web page in a browser",
                "data": "test inputs"}

# What a client-only program must not hold: the server's database, the server, the solver.
FORBIDDEN_LIBRARIES = ("perseus_server", "perseus_solver", "perseus_online", "sqlite3")
FORBIDDEN_SYMBOLS = re.compile(r"sqlite3_|perseus::server::|PhillipsDessouky|BoundedFlowNetwork|perseus::Dinic")


def areas_of(root, base):
    """Yields (area, path) for the source files under root/base/<area>/."""
    top = os.path.join(root, base)
    for area in sorted(os.listdir(top)):
        folder = os.path.join(top, area)
        if not os.path.isdir(folder):
            continue
        for directory, _, files in os.walk(folder):
            for name in sorted(files):
                if name.endswith(SOURCE_SUFFIXES):
                    yield area, os.path.join(directory, name)


def include_problems(root):
    problems = []
    for base in ("src", os.path.join("include", "perseus")):
        for area, path in areas_of(root, base):
            rel = os.path.relpath(path, root)
            if area not in TIER:
                problems.append(f"{rel}: area '{area}' is not in the layer order (scripts/check_layers.py)")
                continue
            with open(path, encoding="utf-8", errors="replace") as source:
                for number, line in enumerate(source, 1):
                    match = INCLUDE.match(line)
                    if not match or match.group(1) == area:
                        continue
                    target = match.group(1)
                    if target not in TIER:
                        problems.append(f"{rel}:{number}: includes area '{target}', not in the layer order")
                    elif TIER[target] >= TIER[area]:
                        relation = "the same tier as" if TIER[target] == TIER[area] else "above"
                        problems.append(f"{rel}:{number}: {area} includes {target}, {relation} it: {line.strip()}")
    return problems


def test_layout_problems(root):
    tests = os.path.join(root, "tests")
    if not os.path.isdir(tests):
        return []
    problems = []
    for name in sorted(os.listdir(tests)):
        path = os.path.join(tests, name)
        if os.path.isdir(path):
            if name not in TIER and name not in TEST_FOLDERS and not name.startswith((".", "__")):
                problems.append(f"tests/{name}/: neither an area nor one of {sorted(TEST_FOLDERS)}")
        elif name.startswith("test_") and name.endswith(".cpp"):
            problems.append(f"tests/{name}: belongs in tests/<area>/ for the area it tests")
    return problems


def link_line(build_dir, binary):
    """The libraries on `binary`'s link line in the build tree's build.ninja (Ninja generator)."""
    ninja = os.path.join(build_dir, "build.ninja")
    if not os.path.exists(ninja):
        return None
    wanted = os.path.relpath(binary, build_dir)
    with open(ninja, encoding="utf-8") as rules:
        lines = rules.read().split("\n")
    for i, line in enumerate(lines):
        if line.startswith(f"build {wanted}:"):
            block = [line]
            for following in lines[i + 1:]:
                if not following.startswith(" "):
                    break
                block.append(following)
            return "\n".join(block)
    return None


def client_problems(build_dir, binary):
    problems = []
    name = os.path.basename(binary)
    if build_dir:
        line = link_line(build_dir, binary)
        if line is None:
            problems.append(f"{name}: no link rule for it in {build_dir}/build.ninja")
        else:
            for library in FORBIDDEN_LIBRARIES:
                if re.search(rf"\b(lib)?{library}\b", line):
                    problems.append(f"{name}: its link line names {library}")
    shared = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False).stdout
    if "sqlite" in shared:
        problems.append(f"{name}: loads SQLite ({[l.strip() for l in shared.splitlines() if 'sqlite' in l]})")
    symbols = subprocess.run(["nm", "-C", binary], capture_output=True, text=True, check=True).stdout
    found = sorted({m.group(0) for m in FORBIDDEN_SYMBOLS.finditer(symbols)})
    if found:
        problems.append(f"{name}: holds symbols of {', '.join(found)}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source-dir", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--build-dir")
    parser.add_argument("--client-binary")
    args = parser.parse_args()
    problems = include_problems(os.path.abspath(args.source_dir))
    problems += test_layout_problems(os.path.abspath(args.source_dir))
    if args.client_binary:
        problems += client_problems(args.build_dir, args.client_binary)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} layering problem(s)", file=sys.stderr)
        return 1
    print("layers: " + " < ".join("/".join(tier) for tier in LAYERS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
