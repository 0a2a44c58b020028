"""Zeus's callback interface (``zeus.callback``), kept outside :mod:`perseus.zeus` so that
:mod:`perseus.power_limit` can use it without importing that package."""
from __future__ import annotations

from typing import List


class Callback:
    """Base class of training-loop callbacks: every hook does nothing until overridden."""

    def on_train_begin(self) -> None:
        """Called at the beginning of training."""

    def on_train_end(self) -> None:
        """Called at the end of training."""

    def on_epoch_begin(self) -> None:
        """Called at the beginning of each epoch."""

    def on_epoch_end(self) -> None:
        """Called at the end of each epoch."""

    def on_step_begin(self) -> None:
        """Called at the beginning of each step."""

    def on_step_end(self) -> None:
        """Called at the end of each step."""

    def on_evaluate(self, metric: float) -> None:
        """Called after evaluating the model."""

    def on_instruction_begin(self, name: str) -> None:
        """Called at the beginning of a pipeline instruction (``"forward"``, ``"backward"``)."""

    def on_instruction_end(self, name: str) -> None:
        """Called at the end of a pipeline instruction."""


class CallbackSet(Callback):
    """Several callbacks called as one, in the order given."""

    def __init__(self, callbacks: List[Callback]) -> None:
        self.callbacks = callbacks

    def on_train_begin(self) -> None:
        for callback in self.callbacks:
            callback.on_train_begin()

    def on_train_end(self) -> None:
        for callback in self.callbacks:
            callback.on_train_end()

    def on_epoch_begin(self) -> None:
        for callback in self.callbacks:
            callback.on_epoch_begin()

    def on_epoch_end(self) -> None:
        for callback in self.callbacks:
            callback.on_epoch_end()

    def on_step_begin(self) -> None:
        for callback in self.callbacks:
            callback.on_step_begin()

    def on_step_end(self) -> None:
        for callback in self.callbacks:
            callback.on_step_end()

    def on_evaluate(self, metric: float) -> None:
        for callback in self.callbacks:
            callback.on_evaluate(metric)

    def on_instruction_begin(self, name: str) -> None:
        for callback in self.callbacks:
            callback.on_instruction_begin(name)

    def on_instruction_end(self, name: str) -> None:
        for callback in self.callbacks:
            callback.on_instruction_end(name)
