"""Zeus's ``zeus.utils.env``: typed environment variables (``get_env("ZEUS_MAX_SLOWDOWN", float, 1.1)``)."""
from __future__ import annotations

import os
from typing import Optional, Type, TypeVar

__all__ = ["get_env"]

T = TypeVar("T")


def get_env(name: str, valtype: Type[T], default: Optional[T] = None) -> T:
    """The environment variable ``name`` converted by ``valtype``, else ``default``.

    A ``bool`` must read ``true`` or ``false`` (any case). ValueError where the variable is missing
    and ``default`` is None, or where its value does not convert (the message names both).
    """
    if name not in os.environ:
        if default is not None:
            return default
        raise ValueError(f"Missing environment variable '{name}'")
    text = os.environ[name]
    if valtype is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"Strange boolean environment variable value '{text.lower()}'")
        return text.lower() == "true"  # type: ignore[return-value]
    try:
        return valtype(text)  # type: ignore[call-arg]
    except (TypeError, ValueError) as error:
        raise ValueError(f"Environment variable '{name}={text}' is not a {getattr(valtype, '__name__', valtype)}: "
                         f"{error}") from None
