"""Zeus's ``zeus.optimizer``: the power-limit and pipeline-frequency optimizers."""
from __future__ import annotations

from .pipeline_frequency import PipelineFrequencyOptimizer
from .power_limit import GlobalPowerLimitOptimizer, HFGlobalPowerLimitOptimizer

__all__ = ["GlobalPowerLimitOptimizer", "HFGlobalPowerLimitOptimizer", "PipelineFrequencyOptimizer"]
