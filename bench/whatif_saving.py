"""The saving `perseus whatif` predicts for two pipelines at T'/T = 1 (no straggler) against all-max: what the
turnkey loop's measured saving is compared with by the turnkey benchmarks."""
import re
import subprocess
from typing import List


def whatif_saving(perseus: str, profile: str, shape: List[str], p_block: float, unit_time: float) -> float:
    out = subprocess.run([perseus, "whatif", profile, *shape, "--p2p-power", str(p_block), "--pipelines", "2",
                          "--slowdowns", "1", "--unit-time", str(unit_time), "--baselines", "all-max"],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if re.match(r"\s*1\.000\s+perseus\s", line):
            return float(line.split()[-1].rstrip("%")) / 100
    raise RuntimeError("no perseus row in whatif's output:\n" + out)
