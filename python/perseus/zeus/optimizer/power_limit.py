"""Zeus's ``zeus.optimizer.power_limit``: ``from perseus.zeus.optimizer.power_limit import GlobalPowerLimitOptimizer``."""
from __future__ import annotations

from ...power_limit import *  # noqa: F401,F403
from ...power_limit import __all__ as __all__  # noqa: F401
