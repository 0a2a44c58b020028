"""Zeus's ``zeus.monitor``: ``from perseus.zeus.monitor import ZeusMonitor``."""
from __future__ import annotations

from ...power_limit import EnergyMonitor as ZeusMonitor
from ...power_limit import Measurement

__all__ = ["Measurement", "ZeusMonitor"]
