"""Zeus's ``zeus.callback``: ``from perseus.zeus.callback import Callback, CallbackSet``."""
from __future__ import annotations

from .._callback import Callback, CallbackSet

__all__ = ["Callback", "CallbackSet"]
