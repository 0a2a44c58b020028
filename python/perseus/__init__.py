"""perseus: per-instruction GPU clock plans for pipeline-parallel training.

The training side of perseus: one :class:`Client` per rank talks to ``perseus serve``, locks the
GPU clock the server's plan gives each forward and backward, and measures what each cost.

- :mod:`perseus.torch` fills in what PyTorch already knows (rank, world size, the job-id broadcast
  over ``torch.distributed``, the CUDA device) and synchronises CUDA around each instruction.
- :mod:`perseus.integrations.deepspeed` and :mod:`perseus.integrations.megatron` attach a client to
  those frameworks' pipeline engines without touching the training script's loop.
- :class:`GlobalPowerLimitOptimizer` and :class:`EnergyMonitor` are Zeus's power-limit optimizer and
  energy monitor; :mod:`perseus.zeus` gives them Zeus's names.
- The ``perseus`` command (planner, server, emulator) is installed with the package.
"""
from __future__ import annotations

import os
from types import TracebackType
from typing import Callable, Optional, Type

from ._perseus import Client as _CompiledClient
from ._perseus import _Gpus
from ._perseus import ProfilingDone, ScheduleMismatch, __version__, current_gpu_clock, default_pipe_schedule, gpu_clocks
from . import power_limit as _power_limit
from .power_limit import *  # noqa: F401,F403  Zeus's power-limit optimizer and energy monitor

__all__ = [
    "Client",
    "ProfilingDone",
    "ScheduleMismatch",
    "__version__",
    "current_gpu_clock",
    "default_pipe_schedule",
    "fake_nvml_library",
    "gpu_clocks",
    "select_gpu_library",
]
__all__ += _power_limit.__all__


class _Instruction:
    """The context manager :meth:`Client.instruction` returns (a class, not a generator: it runs
    twice per forward and backward, so it stays cheap)."""

    __slots__ = ("_client", "_name")

    def __init__(self, client: "Client", name: str) -> None:
        self._client = client
        self._name = name

    def __enter__(self) -> None:
        client = self._client
        if client.synchronize is not None:
            client.synchronize()  # work queued before the instruction is not charged to it
        client.on_instruction_begin(self._name)

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        client = self._client
        if client.synchronize is not None:
            client.synchronize()  # the energy reading must cover the instruction's kernels
        client.on_instruction_end(self._name)


class _Step:
    """The context manager :meth:`Client.step` returns."""

    __slots__ = ("_client",)

    def __init__(self, client: "Client") -> None:
        self._client = client

    def __enter__(self) -> None:
        self._client.on_step_begin()

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        # An iteration that raised is not reported as a measured one; the error propagates.
        if exc_type is None:
            self._client.on_step_end()


class Client(_CompiledClient):
    __doc__ = _CompiledClient.__doc__

    #: Called before every instruction begins and ends when set (``perseus.torch.Client`` sets it
    #: to the current CUDA stream's ``synchronize`` so the energy reading covers the kernels).
    synchronize: Optional[Callable[[], None]] = None

    def instruction(self, name: str) -> _Instruction:
        """A context manager around one instruction: ``with client.instruction("forward"): ...``.

        Calls :attr:`synchronize` (when set), then ``on_instruction_begin(name)``; at the end
        :attr:`synchronize` again, then ``on_instruction_end(name)``.

        Args:
            name: the instruction, e.g. ``"forward"`` or ``"backward"``.
        """
        return _Instruction(self, name)

    def step(self) -> _Step:
        """A context manager around one training iteration: ``on_step_begin()`` on entry,
        ``on_step_end()`` on a normal exit (which may raise :class:`ProfilingDone`)."""
        return _Step(self)


def fake_nvml_library() -> str:
    """Path of the fake NVML library shipped with perseus (simulated GPUs that log every call),
    for trying perseus without a GPU: pass it as ``nvml_library`` or set
    ``PERSEUS_NVML_LIBRARY``. Raises FileNotFoundError where the build did not include it."""
    path = os.path.join(os.path.dirname(__file__), "lib", "libperseus_fake_nvml.so")
    if not os.path.exists(path):
        raise FileNotFoundError(f"perseus: no fake NVML library at {path}")
    return path


def select_gpu_library(fake: bool = False, fake_gpus: int = 1) -> str:
    """Chooses the GPU library of this process for a script that also runs without a GPU (the
    examples), and says which in one line: print it, so that numbers from simulated GPUs never
    pass for measured ones.

    - ``PERSEUS_NVML_LIBRARY`` set: that library, as given (``$PERSEUS_GPUD_SOCKET`` set: the GPUs
      of that ``perseus gpud``).
    - ``fake`` true (the examples' ``--fake-gpu``): perseus's fake NVML.
    - Otherwise the driver's NVML when it loads and lists a GPU; when it cannot be loaded or lists
      none, the fake NVML, and the line says why.

    Choosing the fake sets ``PERSEUS_NVML_LIBRARY`` (and ``PERSEUS_FAKE_NVML_GPUS`` to ``fake_gpus``
    unless it is set) for this process and the processes it starts.

    Args:
        fake: use the fake NVML even where a GPU is found.
        fake_gpus: how many simulated GPUs the fake NVML shows.

    Returns:
        e.g. ``"GPU library: the driver's NVML (libnvidia-ml.so.1), 8 GPUs"`` or ``"GPU library:
        perseus's fake NVML (simulated GPUs, not measurements), because no GPU was found: ..."``.
    """
    named = os.environ.get("PERSEUS_NVML_LIBRARY", "")
    socket = os.environ.get("PERSEUS_GPUD_SOCKET", "")
    if socket:
        return f"GPU library: the GPUs of perseus gpud at {socket} (PERSEUS_GPUD_SOCKET)"
    if named:
        simulated = " (perseus's fake NVML: simulated GPUs, not measurements)" if "fake_nvml" in named else ""
        return f"GPU library: {named} (PERSEUS_NVML_LIBRARY){simulated}"
    if fake:
        why = "as asked (--fake-gpu)"
    else:
        try:
            count = _Gpus().device_count()
        except RuntimeError as e:
            why = f"because no GPU was found: {e}"
        else:
            if count > 0:
                return f"GPU library: the driver's NVML (libnvidia-ml.so.1), {count} GPU{'s' if count != 1 else ''}"
            why = "because the driver's NVML lists no GPU"
    os.environ["PERSEUS_NVML_LIBRARY"] = fake_nvml_library()
    os.environ.setdefault("PERSEUS_FAKE_NVML_GPUS", str(fake_gpus))
    return f"GPU library: perseus's fake NVML (simulated GPUs, not measurements), {why}"
