"""The ``perseus`` command installed with the Python package: runs the bundled C++ binary."""
from __future__ import annotations

import os
import sys


def binary() -> str:
    """Path of the ``perseus`` executable shipped inside the package."""
    return os.path.join(os.path.dirname(__file__), "bin", "perseus")


def main() -> None:
    """Replaces this process with the bundled ``perseus`` binary (same arguments, same exit code,
    signals such as Ctrl-C go straight to it)."""
    path = binary()
    if not os.access(path, os.X_OK):
        sys.exit(f"perseus: the package has no executable at {path}; reinstall it with `pip install .`")
    os.execv(path, ["perseus", *sys.argv[1:]])


if __name__ == "__main__":
    main()
