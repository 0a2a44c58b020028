"""Zeus's names, units and module paths for perseus's objects, so that a Zeus user switches by
changing an import: ``from perseus.zeus import ZeusMonitor, GlobalPowerLimitOptimizer, ZeusCost``,
``from perseus.zeus.monitor import ZeusMonitor``, ``from perseus.zeus.callback import Callback``,
``from perseus.zeus.optimizer.power_limit import ...``, ``from perseus.zeus.optimizer.pipeline_frequency
import PipelineFrequencyOptimizer``."""
from __future__ import annotations

from .callback import Callback, CallbackSet
from .monitor import Measurement, ZeusMonitor
from .optimizer import power_limit as _power_limit
from .optimizer.pipeline_frequency import PipelineFrequencyOptimizer
from .optimizer.power_limit import *  # noqa: F401,F403

__all__ = ["Callback", "CallbackSet", "Measurement", "PipelineFrequencyOptimizer", "ZeusMonitor"]
__all__ += _power_limit.__all__
