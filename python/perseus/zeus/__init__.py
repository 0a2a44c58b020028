"""Zeus's names for perseus's objects, so that a Zeus user switches by changing an import:
``from perseus.zeus import ZeusMonitor, GlobalPowerLimitOptimizer, ZeusCost, PipelineFrequencyOptimizer``."""
from __future__ import annotations

import re
from typing import Any, List, Optional

from . import power_limit as _power_limit
from .power_limit import *  # noqa: F401,F403
from .power_limit import EnergyMonitor as ZeusMonitor

__all__ = ["PipelineFrequencyOptimizer", "ZeusMonitor"]
__all__ += _power_limit.__all__


class PipelineFrequencyOptimizer:
    """Zeus's ``PipelineFrequencyOptimizer`` (same constructor and hooks) over perseus's client.

    Zeus's client does not tell the server its instruction order; this one learns it from the
    first iteration (the hooks' names, run at the GPU's default clocks) and then registers with
    ``perseus serve`` as :class:`perseus.torch.Client` does — rank 0 registers the job and the id
    goes to every rank over ``torch.distributed`` at the end of that iteration, on every rank — so
    every perseus scheduler serves it, with results reported and the server's whole loop. Like
    Zeus's, it needs ``torch.distributed`` initialised.

    Args:
        rank, dp_rank, pp_rank, tp_rank: this process's ranks.
        device_id: its CUDA device (mapped to the NVML index through ``CUDA_VISIBLE_DEVICES``).
        dp_degree, pp_degree, tp_degree, world_size: the job's shape.
        server_url: ``perseus serve``'s URL.
        job_metadata: ends up in the job id (as the model name; characters a job id cannot hold
            become ``-``).
        options: further :class:`perseus.Client` arguments (e.g. ``report_every``, ``nvml_library``).
    """

    def __init__(self, rank: int, dp_rank: int, pp_rank: int, tp_rank: int, device_id: int, dp_degree: int,
                 pp_degree: int, tp_degree: int, world_size: int, server_url: str,
                 job_metadata: Optional[str] = None, **options: Any) -> None:
        import perseus.torch

        if perseus.torch._distributed() is None:
            raise RuntimeError("Instantiate `PipelineFrequencyOptimizer` after `init_process_group`.")
        self._arguments = dict(rank=rank, dp_rank=dp_rank, pp_rank=pp_rank, tp_rank=tp_rank,
                               device=device_id, dp_degree=dp_degree,
                               pp_degree=pp_degree, tp_degree=tp_degree, world_size=world_size, server_url=server_url,
                               framework="zeus", model_name=re.sub(r"[/\\+\x00-\x1f]", "-", job_metadata or "") or "model",
                               **options)
        self.client: Optional[perseus.torch.Client] = None
        self._first_iteration: List[str] = []

    def on_step_begin(self) -> None:
        """Marks the beginning of an iteration."""
        if self.client is not None:
            self.client.on_step_begin()
        else:
            self._first_iteration = []

    def on_step_end(self) -> None:
        """Marks the end of an iteration; after the first, registers with the server."""
        if self.client is not None:
            self.client.on_step_end()
            return
        import perseus.torch

        names = self._first_iteration
        self.client = perseus.torch.Client(pipe_schedule=names, num_microbatches=max(1, names.count("forward")),
                                           **self._arguments)

    def on_instruction_begin(self, name: str) -> None:
        """Marks the beginning of an instruction (``"forward"`` or ``"backward"``)."""
        if self.client is None:
            self._first_iteration.append(name)
            return
        if self.client.synchronize is not None:
            self.client.synchronize()
        self.client.on_instruction_begin(name)

    def on_instruction_end(self, name: str) -> None:
        """Marks the end of an instruction."""
        if self.client is None:
            return
        if self.client.synchronize is not None:
            self.client.synchronize()
        self.client.on_instruction_end(name)
