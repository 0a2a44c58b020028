"""Zeus's names for perseus's objects, so that a Zeus user switches by changing an import:
``from perseus.zeus import ZeusMonitor, GlobalPowerLimitOptimizer, ZeusCost``."""
from __future__ import annotations

from .power_limit import (
    Energy,
    EnergyMonitor as ZeusMonitor,
    GlobalPowerLimitOptimizer,
    HFGlobalPowerLimitOptimizer,
    MaxSlowdownConstraint,
    Measurement,
    OptimumSelector,
    PowerLimitMeasurement,
    Time,
    ZeusCost,
)

__all__ = [
    "Energy",
    "GlobalPowerLimitOptimizer",
    "HFGlobalPowerLimitOptimizer",
    "MaxSlowdownConstraint",
    "Measurement",
    "OptimumSelector",
    "PowerLimitMeasurement",
    "Time",
    "ZeusCost",
    "ZeusMonitor",
]
