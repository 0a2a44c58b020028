#!/usr/bin/env python3
"""Checks that this interpreter holds the packages requirements/test.txt pins, at those versions, and
says how to make it otherwise (CTest's python_env: the Python tests need it and run after it).

Usage: PYTHON scripts/check_python_env.py requirements/test.txt"""
import re
import sys
from importlib import metadata


def pins(path):
    """(name, version) of every `name==version` line (comments and blank lines skipped)."""
    result = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            match = re.fullmatch(r"([A-Za-z0-9_.\-\[\],]+?)(\[[^\]]*\])?==([^\s;]+)", line)
            if not match:
                sys.exit(f"{path}:{number}: '{line}' is not pinned as name==version")
            result.append((match.group(1), match.group(3)))
    return result


def main():
    wrong = []
    for name, version in pins(sys.argv[1]):
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            wrong.append(f"{name} is not installed (wants {version})")
            continue
        if installed != version:
            wrong.append(f"{name} {installed} is installed, requirements/test.txt pins {version}")
    if wrong:
        print(f"{sys.executable}: the test environment is not the pinned one:", file=sys.stderr)
        for line in wrong:
            print(f"  {line}", file=sys.stderr)
        print("make it with: scripts/setup.sh --python   (or scripts/python_env.sh)", file=sys.stderr)
        return 1
    print(f"{sys.executable}: every pinned package of {sys.argv[1]} at its version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
