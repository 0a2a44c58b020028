"""Zeus's ``zeus.optimizer.pipeline_frequency``."""
from __future__ import annotations

from .. import PipelineFrequencyOptimizer

__all__ = ["PipelineFrequencyOptimizer"]
