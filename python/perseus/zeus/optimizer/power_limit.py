"""Zeus's ``zeus.optimizer.power_limit``: ``from perseus.zeus.optimizer.power_limit import GlobalPowerLimitOptimizer``."""
from __future__ import annotations

from ...power_limit import (
    Done,
    Energy,
    GlobalPowerLimitOptimizer,
    HFGlobalPowerLimitOptimizer,
    MaxSlowdownConstraint,
    OptimumSelector,
    PowerLimitMeasurement,
    Profiling,
    Ready,
    Time,
    Warmup,
    ZeusCost,
)

__all__ = [
    "Done",
    "Energy",
    "GlobalPowerLimitOptimizer",
    "HFGlobalPowerLimitOptimizer",
    "MaxSlowdownConstraint",
    "OptimumSelector",
    "PowerLimitMeasurement",
    "Profiling",
    "Ready",
    "Time",
    "Warmup",
    "ZeusCost",
]
