"""Zeus's ``zeus.monitor``: ``from perseus.zeus.monitor import ZeusMonitor, PowerMonitor``."""
from __future__ import annotations

from .energy import Measurement, ZeusMonitor
from .power import PowerMonitor

__all__ = ["Measurement", "PowerMonitor", "ZeusMonitor"]
