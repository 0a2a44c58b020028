"""Zeus's ``zeus.utils``: ``from perseus.zeus.utils.env import get_env``."""
from __future__ import annotations

from typing import List

__all__: List[str] = []
