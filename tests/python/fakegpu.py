"""What the Python tests share: where the perseus binary and the fake NVML are, and readers of the
fake NVML's call log.

Against the build tree (CTest) PERSEUS_BINARY and PERSEUS_FAKE_NVML name them; against an
installed package they default to the package's own (`perseus` on PATH and
perseus.fake_nvml_library())."""
import os
import shutil
from typing import Dict, List, Optional, Tuple

# The fake NVML reads its settings when first initialised: set the call log before any client exists.
LOG_DIR = os.environ.setdefault("PERSEUS_TEST_TMP", "/tmp")
os.environ["PERSEUS_FAKE_NVML_LOG"] = os.path.join(LOG_DIR, "pytest-fake-nvml-%p.log")

import perseus  # noqa: E402

FAKE_NVML = os.environ.get("PERSEUS_FAKE_NVML") or perseus.fake_nvml_library()
BINARY = os.environ.get("PERSEUS_BINARY") or shutil.which("perseus") or ""
TOP_CLOCK = 1410


def log_lines(path: Optional[str] = None) -> List[List[str]]:
    """The fake NVML call log, one split line per call: ns, function, device, arguments..., '->', result."""
    path = path or os.environ["PERSEUS_FAKE_NVML_LOG"].replace("%p", str(os.getpid()))
    with open(path) as log:
        return [line.split() for line in log]


def locked_clocks(path: Optional[str] = None) -> List[int]:
    """Every SM clock locked, in order."""
    return [int(fields[3]) for fields in log_lines(path) if fields[1] == "nvmlDeviceSetGpuLockedClocks"]


def clocks_at_energy_reads(path: str) -> List[int]:
    """The SM clock the GPU ran at when each energy-counter read happened (the log must have been
    written with PERSEUS_FAKE_NVML_LOG_READS=1); an unlocked GPU runs at the top clock."""
    clock, seen = TOP_CLOCK, []
    for fields in log_lines(path):
        if fields[1] == "nvmlDeviceSetGpuLockedClocks" and fields[-1] == "0":
            clock = int(fields[3])
        elif fields[1] == "nvmlDeviceResetGpuLockedClocks" and fields[-1] == "0":
            clock = TOP_CLOCK
        elif fields[1] == "nvmlDeviceGetTotalEnergyConsumption":
            seen.append(clock)
    return seen


def ends_at_default_clocks(path: str) -> bool:
    """True when the last clock call of the log resets the SM and memory clocks."""
    last: Dict[str, Tuple[int, str]] = {}
    for index, fields in enumerate(log_lines(path)):
        if "LockedClocks" in fields[1]:
            kind = "memory" if "Memory" in fields[1] else "graphics"
            last[kind] = (index, fields[1])
    return all(kind in last and last[kind][1].startswith("nvmlDeviceReset") for kind in ("memory", "graphics"))


# Set by the build tree's runs (CTest python_bindings, python_side_by_side, python_turnkey_random), not by the
# run against the installed wheel (python_package): a test that checks nothing about packaging runs once, in the
# build tree's runs.
BUILD_TREE_RUN = bool(os.environ.get("PERSEUS_BINARY"))
