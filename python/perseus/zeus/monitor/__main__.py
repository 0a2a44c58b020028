"""Zeus's monitor command line, ``python -m perseus.zeus.monitor energy|power``: measures the GPUs until
Ctrl-C, then prints the totals.

    python -m perseus.zeus.monitor energy [--gpu-indices 0 1]
    python -m perseus.zeus.monitor power [--gpu-indices 0 1] [--update-period 1.0]
"""
from __future__ import annotations

import argparse
import time
from datetime import datetime
from typing import Dict, List, Optional

from .energy import ZeusMonitor
from .power import PowerMonitor

__all__ = ["energy", "power"]


def energy(gpu_indices: Optional[List[int]] = None) -> None:
    """Measures the GPUs' time and energy from now until Ctrl-C, then prints the measurement.

    Args:
        gpu_indices: GPUs to measure, as CUDA numbers them; None: every visible GPU.
    """
    monitor = ZeusMonitor(gpu_indices)
    monitor.begin_window("zeus.monitor.energy")
    try:
        time.sleep(365 * 24 * 60 * 60)
    except KeyboardInterrupt:
        print("Total energy (J):", monitor.end_window("zeus.monitor.energy"), flush=True)


def power(gpu_indices: Optional[List[int]] = None, update_period: float = 1.0) -> None:
    """Prints the GPUs' power every ``update_period`` seconds until Ctrl-C, then the time and energy.

    Args:
        gpu_indices: GPUs to sample, as CUDA numbers them; None: every visible GPU.
        update_period: seconds between samples (and lines printed).
    """
    monitor = PowerMonitor(gpu_indices=gpu_indices, update_period=update_period)
    start = time.time()

    def by_name(values: Dict[int, float]) -> Dict[str, float]:
        return {f"GPU{index}": value for index, value in values.items()}

    try:
        while True:
            time.sleep(monitor.update_period)
            watts = monitor.get_power()
            if watts is not None:
                print(datetime.now(), by_name(watts), flush=True)
    except KeyboardInterrupt:
        end = time.time()
        print("\nTotal time (s):", end - start, flush=True)
        joules = monitor.get_energy(start, end)
        if joules is not None:
            print("Total energy (J):", by_name(joules), flush=True)
    finally:
        monitor.stop()


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m perseus.zeus.monitor", description="Zeus Monitor CLI")
    commands = parser.add_subparsers(dest="subcommand", required=True, help="energy or power")
    energy_parser = commands.add_parser("energy", help="Measure the time and energy of the GPUs until Ctrl-C.")
    energy_parser.add_argument("--gpu-indices", nargs="+", type=int, help="GPUs to measure (default: all).")
    power_parser = commands.add_parser("power", help="Print the GPUs' power until Ctrl-C, then the energy.")
    power_parser.add_argument("--gpu-indices", nargs="+", type=int, help="GPUs to sample (default: all).")
    power_parser.add_argument("--update-period", type=float, default=1.0, help="Seconds between samples.")
    args = parser.parse_args(argv)
    if args.subcommand == "energy":
        energy(args.gpu_indices)
    else:
        power(args.gpu_indices, args.update_period)


if __name__ == "__main__":
    main()
