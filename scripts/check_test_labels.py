#!/usr/bin/env python3
"""Checks that every CTest test of a build carries one of the project's labels.

A test without one of them falls out of every `ctest -L` selection, so a quick loop would never
run it. Lists the tests of BUILD_DIR with `ctest --show-only=json-v1` and fails naming each test
that has none.

Usage: check_test_labels.py CTEST BUILD_DIR
"""
import json
import subprocess
import sys

LABELS = {"unit", "process", "slow", "faults", "python"}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ctest, build = sys.argv[1], sys.argv[2]
    listing = subprocess.run([ctest, "--test-dir", build, "--show-only=json-v1"], check=True, capture_output=True,
                             text=True).stdout
    tests = json.loads(listing)["tests"]
    unlabelled = []
    for test in tests:
        labels = set()
        for prop in test.get("properties", []):
            if prop["name"] == "LABELS":
                labels.update(prop["value"])
        if not labels & LABELS:
            unlabelled.append(f"{test['name']} (labels: {sorted(labels) or 'none'})")
    if len(tests) == 0:
        sys.exit(f"check_test_labels: no tests in {build}")
    if unlabelled:
        print(f"{len(unlabelled)} of {len(tests)} tests carry none of {sorted(LABELS)}:", file=sys.stderr)
        for line in unlabelled:
            print(f"  {line}", file=sys.stderr)
        sys.exit(1)
    print(f"all {len(tests)} tests carry one of {sorted(LABELS)}")


if __name__ == "__main__":
    main()
