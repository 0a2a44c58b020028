"""Zeus's ``zeus.optimizer.pipeline_frequency``: :class:`PipelineFrequencyOptimizer` speaking Zeus's
protocol, so it works against ``perseus serve`` (whose Zeus dialect answers it) and Zeus's own server."""
from __future__ import annotations

import json
import logging
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterator, List, Optional, Tuple

from ..._callback import Callback
from ..._perseus import _Gpus

__all__ = ["PipelineFrequencyOptimizer"]

_log = logging.getLogger("perseus.zeus")


class PipelineFrequencyOptimizer(Callback):
    """Zeus's ``PipelineFrequencyOptimizer``: same constructor, hooks and protocol.

    Rank 0 registers the job (``POST /register_job`` with Zeus's JobInfo), the job id goes to every
    rank over ``torch.distributed``, each rank registers (``POST /register_rank/{job_id}`` with its
    GPU's clocks) and fetches its plan (``GET /schedule/{job_id}?rank=N``): one iteration's
    ``(instruction, clock)`` pairs, applied from the first iteration on, each clock locked at the
    ``on_instruction_begin`` of its instruction. The GPU goes back to its default clocks at
    :meth:`close` and at exit.

    Unlike Zeus's, a server that cannot be reached or refuses the job, or an iteration whose
    instructions differ from the plan's, does not stop training: the optimizer warns and the GPU
    runs at its default clocks (``fail_open=False``: Zeus's ``RuntimeError``).

    Args:
        rank, dp_rank, pp_rank, tp_rank: this process's ranks.
        device_id: its CUDA device (mapped to the NVML index through ``CUDA_VISIBLE_DEVICES``).
        dp_degree, pp_degree, tp_degree, world_size: the job's shape.
        server_url: the server's URL.
        job_metadata: appended to the job id (e.g. the model's name).
        fail_open: see above.
        request_timeout: seconds each request may take (the schedule waits for every rank).
        nvml_library, gpud_socket: where the GPU is controlled ("" reads the environment).
    """

    def __init__(self, rank: int, dp_rank: int, pp_rank: int, tp_rank: int, device_id: int, dp_degree: int,
                 pp_degree: int, tp_degree: int, world_size: int, server_url: str,
                 job_metadata: Optional[str] = None, *, fail_open: bool = True, request_timeout: float = 300.0,
                 nvml_library: str = "", gpud_socket: str = "") -> None:
        import perseus.torch

        dist = perseus.torch._distributed()
        if dist is None:
            raise RuntimeError("Instantiate `PipelineFrequencyOptimizer` after `init_process_group`.")
        self.server_url = server_url.rstrip("/")
        self.rank, self.dp_rank, self.pp_rank, self.tp_rank = rank, dp_rank, pp_rank, tp_rank
        self.device_id = device_id
        self.fail_open = fail_open
        self.request_timeout = request_timeout
        self.enabled = False
        self.job_id: Optional[str] = None
        self.freq_schedule: List[Tuple[str, int]] = []
        self._iterator: Iterator[Tuple[str, int]] = iter(())
        self._locked = 0
        self._gpus: Optional[_Gpus] = None
        self._device = perseus.torch.nvml_device_index(device_id)

        job_id: Optional[str] = None
        if rank == 0:
            job = {"job_id": "", "pp_degree": pp_degree, "dp_degree": dp_degree, "tp_degree": tp_degree,
                   "world_size": world_size, "job_metadata": job_metadata}
            job_id = self._guard(lambda: self._register_job(job))
        objects: List[Optional[str]] = [job_id]
        dist.broadcast_object_list(objects, src=0)  # every rank, even when rank 0 failed
        self.job_id = objects[0]
        if self.job_id is None:
            self._fail(RuntimeError("Failed to broadcast job ID to all ranks"))
            return
        schedule = self._guard(self._register_rank_and_fetch)
        if schedule is None:
            return
        self.freq_schedule = schedule
        self._iterator = iter(self.freq_schedule)
        self.enabled = True
        import atexit

        atexit.register(self.close)

    def _guard(self, action: Any) -> Any:
        """``action()``, or None after :meth:`_fail` where it raised."""
        try:
            return action()
        except (OSError, ValueError, RuntimeError) as error:
            self._fail(error)
            return None

    def _fail(self, error: BaseException) -> None:
        if not self.fail_open:
            raise error if isinstance(error, RuntimeError) else RuntimeError(str(error))
        _log.warning("perseus: pipeline frequency optimizer disabled, training continues at default clocks: %s", error)
        self.close()

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server_url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.request_timeout) as reply:
                return json.loads(reply.read().decode())
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"PFO server returned status code {error.code}: {error.read().decode(errors='replace')}")

    def _register_job(self, job: Any) -> str:
        job_id = self._request("POST", "/register_job", job)
        if not isinstance(job_id, str):
            raise RuntimeError(f"PFO server returned a strange job ID: {job_id!r}")
        return job_id

    def _register_rank_and_fetch(self) -> List[Tuple[str, int]]:
        assert self.job_id is not None
        self._gpus = _Gpus()
        clocks = sorted(self._gpus.supported_graphics_clocks(self._device), reverse=True)
        job = urllib.parse.quote(self.job_id, safe="/+")  # as Zeus's client sends it
        self._request("POST", f"/register_rank/{job}", {"rank": self.rank, "dp_rank": self.dp_rank,
                                                        "pp_rank": self.pp_rank, "tp_rank": self.tp_rank,
                                                        "available_frequencies": clocks})
        reply = self._request("GET", f"/schedule/{job}?rank={self.rank}")
        if not isinstance(reply, dict) or reply.get("rank") != self.rank:
            raise RuntimeError(f"PFO server returned a schedule for another rank than {self.rank}: {reply!r}")
        try:
            return [(str(name), int(clock)) for name, clock in reply["frequencies"]]
        except (KeyError, TypeError, ValueError):
            raise RuntimeError(f"PFO server returned a malformed schedule: {reply!r}") from None

    def on_step_begin(self) -> None:
        """Marks the beginning of an iteration."""

    def on_step_end(self) -> None:
        """Marks the end of an iteration: every instruction of the plan must have run."""
        if not self.enabled:
            return
        item = next(self._iterator, None)
        if item is not None:
            self._fail(RuntimeError("PFO server returned more frequencies than expected. "
                                    f"Next expected instruction and frequency is {item}"))
            return
        self._iterator = iter(self.freq_schedule)

    def on_instruction_begin(self, name: str) -> None:
        """Marks the beginning of an instruction (``"forward"`` or ``"backward"``): locks its clock."""
        if not self.enabled:
            return
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the previous instruction's kernels run at its own clock
        item = next(self._iterator, None)
        if item is None:
            self._fail(RuntimeError("PFO server returned fewer frequencies than expected"))
            return
        instruction, clock = item
        if instruction != name:
            self._fail(RuntimeError(f"The next expected instruction is not {name}: {instruction}"))
            return
        if clock != 0 and clock != self._locked:
            try:
                assert self._gpus is not None
                self._gpus.lock_graphics_clock(self._device, clock)
                self._locked = clock
            except RuntimeError as error:
                self._fail(error)

    def on_instruction_end(self, name: str) -> None:
        """Marks the end of an instruction."""

    def close(self) -> None:
        """Puts the GPU back to its default clocks; later hooks do nothing."""
        self.enabled = False
        if self._locked and self._gpus is not None:
            try:
                self._gpus.reset_graphics_clock(self._device)
            except RuntimeError as error:
                _log.warning("perseus: could not reset the GPU's clocks: %s", error)
            self._locked = 0
