"""What the framework integrations share: instruction wrappers that measure only inside a
training step, and a handle that undoes the patching."""
from __future__ import annotations

import functools
from typing import Any, Callable, List, Tuple

import perseus


class StepTracker:
    """Knows whether a training step is running: forwards run outside one (evaluation, a
    framework's own sanity checks) are not instructions of the pipe schedule and are not measured."""

    def __init__(self) -> None:
        self.active = False


def wrap_instruction(function: Callable[..., Any], client: perseus.Client, name: str,
                     tracker: StepTracker) -> Callable[..., Any]:
    """``function`` measured as instruction ``name`` while ``tracker`` says a step runs."""

    @functools.wraps(function)
    def measured(*args: Any, **kwargs: Any) -> Any:
        if not tracker.active:
            return function(*args, **kwargs)
        with client.instruction(name):
            return function(*args, **kwargs)

    return measured


def wrap_step(function: Callable[..., Any], client: perseus.Client, tracker: StepTracker) -> Callable[..., Any]:
    """``function`` (one whole training iteration) between ``on_step_begin`` and ``on_step_end``."""

    @functools.wraps(function)
    def step(*args: Any, **kwargs: Any) -> Any:
        if tracker.active:  # re-entered (a framework calling its own step): one step, not two
            return function(*args, **kwargs)
        tracker.active = True
        try:
            client.on_step_begin()
            result = function(*args, **kwargs)
        finally:
            tracker.active = False
        client.on_step_end()  # may raise perseus.ProfilingDone: training should stop
        return result

    return step


class Attachment:
    """Returned by the ``attach`` functions; :meth:`detach` restores what they replaced."""

    def __init__(self) -> None:
        self._restore: List[Tuple[Any, str, Any, bool]] = []

    def replace(self, owner: Any, attribute: str, value: Any) -> None:
        """Sets ``owner.attribute = value``, remembering how to undo it."""
        had_own = attribute in getattr(owner, "__dict__", {})
        self._restore.append((owner, attribute, getattr(owner, attribute, None), had_own))
        setattr(owner, attribute, value)

    def detach(self) -> None:
        """Puts every replaced attribute back, most recent first."""
        while self._restore:
            owner, attribute, old, had_own = self._restore.pop()
            if had_own:
                setattr(owner, attribute, old)
            else:
                delattr(owner, attribute)
