"""perseus for PyTorch: a :class:`Client` that takes what ``torch.distributed`` and CUDA know.

``import perseus.torch`` does not import torch; creating a client does. ::

    import perseus.torch
    client = perseus.torch.Client(pp_rank=stage, pp_degree=stages, num_microbatches=8,
                                  server_url="http://perseus-host:7787")
    with client:
        for batch in loader:
            with client.step():
                for kind, run in schedule:            # forward / backward in schedule order
                    with client.instruction(kind):    # synchronises CUDA around the energy reading
                        run()

With ``torch.distributed.pipelining``, one call hooks a schedule's actions and builds the client
from it (the training loop stays as it is)::

    schedule = ScheduleZBVZeroBubble(stages, n_microbatches=8, loss_fn=loss_fn)
    with perseus.torch.instrument_pipelining(schedule, server_url="http://perseus-host:7787"):
        for x, y in loader:
            schedule.step(x, target=y)
            optimizer.step()
"""
from __future__ import annotations

import os
from typing import Any, Callable, Optional, Sequence

import perseus
from perseus import _perseus
from perseus._pipelining import Pipelining, perseus_schedule_of, pipe_schedule_of
from perseus._pipelining import instrument_pipelining as _instrument_pipelining

__all__ = ["Client", "Pipelining", "broadcast_job_id", "instrument_pipelining", "nvml_device_index",
           "perseus_schedule_of", "pipe_schedule_of"]


def broadcast_job_id(job_id: str) -> str:
    """The job-id broadcast over ``torch.distributed`` (rank 0 sends, every other rank receives).

    A collective: every rank of the default process group must call it once, as the client's
    constructor does on every rank.

    Args:
        job_id: what rank 0's client shares (the new job id, and the job's secret after a
            newline), ``""`` elsewhere.

    Returns:
        Rank 0's value, on every rank.
    """
    import torch.distributed as dist

    box = [job_id]
    dist.broadcast_object_list(box, src=0)
    return str(box[0])


_broadcast_over_torch = broadcast_job_id  # the constructor's argument of the same name hides it


def nvml_device_index(cuda_index: int, visible: Optional[str] = None, nvml_library: str = "") -> int:
    """The NVML index of CUDA device ``cuda_index``.

    CUDA numbers only the GPUs in ``CUDA_VISIBLE_DEVICES``, NVML numbers every GPU: with
    ``CUDA_VISIBLE_DEVICES=2,3`` CUDA device 0 is NVML device 2. The list may name GPUs by index
    or by UUID (``GPU-...``, or a unique prefix); as in CUDA it ends at the first entry that names
    no GPU. Every perseus entry point (clients, monitors) maps indices this way itself; this is for
    code that talks to NVML directly.

    Args:
        cuda_index: the CUDA device index (e.g. ``torch.cuda.current_device()``).
        visible: a ``CUDA_VISIBLE_DEVICES`` value; ``None`` reads the environment.
        nvml_library: path of libnvidia-ml (UUIDs and the GPU count come from it); ``""``:
            ``$PERSEUS_NVML_LIBRARY``, else the driver's.

    Raises:
        ValueError: no such CUDA device is visible, or the list names a MIG instance.
    """
    if visible is None and "CUDA_VISIBLE_DEVICES" not in os.environ:
        return cuda_index  # every GPU visible in NVML's order: no need to ask NVML
    return _perseus.nvml_device_index(cuda_index, visible, nvml_library)


def _distributed() -> Any:
    """``torch.distributed`` when it is available and initialised, else None."""
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


class Client(perseus.Client):
    """A :class:`perseus.Client` whose arguments default to what PyTorch knows.

    - ``rank`` and ``world_size``: from ``torch.distributed`` when it is initialised (else 0 and
      ``dp_degree * pp_degree * tp_degree``).
    - ``broadcast_job_id``: :func:`broadcast_job_id` over ``torch.distributed`` when it is
      initialised and the world has more than one rank.
    - ``device``: ``torch.cuda.current_device()`` where CUDA is available, else 0 (a CUDA index:
      the client maps it to NVML's through ``CUDA_VISIBLE_DEVICES``).
    - ``synchronize``: the current CUDA stream's ``synchronize`` where CUDA is available, so
      :meth:`instruction` measures the instruction's kernels, not just their launch.

    Every other argument is :class:`perseus.Client`'s; all are keyword arguments.
    """

    def __init__(self, *, rank: Optional[int] = None, world_size: Optional[int] = None,
                 device: Optional[int] = None, broadcast_job_id: Optional[Callable[[str], str]] = None,
                 synchronize: Optional[Callable[[], None]] = None, pipe_schedule: Sequence[str] = (),
                 **options: Any) -> None:
        import torch

        dist = _distributed()
        if rank is None:
            rank = dist.get_rank() if dist is not None else 0
        if world_size is None:
            world_size = (dist.get_world_size() if dist is not None else
                          options.get("dp_degree", 1) * options.get("pp_degree", 1) * options.get("tp_degree", 1))
        if broadcast_job_id is None and dist is not None and world_size > 1 and not options.get("job_id"):
            broadcast_job_id = _broadcast_over_torch
        cuda = torch.cuda.is_available()
        if device is None:
            device = torch.cuda.current_device() if cuda else 0
        if synchronize is None and cuda:
            synchronize = _cuda_synchronize
        super().__init__(rank=rank, world_size=world_size, device=device, broadcast_job_id=broadcast_job_id,
                         pipe_schedule=list(pipe_schedule), **options)
        self.synchronize = synchronize


def _cuda_synchronize() -> None:
    import torch

    torch.cuda.current_stream().synchronize()


def instrument_pipelining(schedule: Any, client: Optional[perseus.Client] = None, **client_options: Any) -> Pipelining:
    """Measures and clocks a ``torch.distributed.pipelining`` schedule's actions on this rank.

    Every training ``schedule.step(...)`` becomes one perseus step, and every compute action it
    runs one instruction: F ``forward``, B ``backward``, I ``backward_input``, W
    ``backward_weight``, an overlapped OVERLAP_F_B pair one ``forward_backward``. The rank's
    order comes from the schedule's (:func:`pipe_schedule_of`). ``schedule.eval()`` is not
    measured. The hooks are fail-open: PyTorch internals other than the ones perseus knows
    (checked before anything is wrapped) leave them off; an action run out of the registered
    order, or an error in them or in the client (other than :class:`perseus.ProfilingDone` from a
    step's end, and :class:`perseus.ScheduleMismatch` with ``strict_schedule=True``), makes them
    stand aside. Either is one ``RuntimeWarning``, and the client is closed (default clocks; the
    server hears the rank left); the step runs unchanged either way.

    Args:
        schedule: this rank's schedule (Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B,
            ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleDualPipeV, or another
            with a ``pipeline_order``), built before the call.
        client: a client made elsewhere; its ``pipe_schedule`` should be
            ``pipe_schedule_of(schedule)`` (a warning says where it differs).
        **client_options: without ``client``: arguments of the :class:`Client` made here
            (``server_url``, ``model_name``, ``dp_rank``, ...); ``pp_rank``, ``pp_degree``,
            ``num_microbatches`` and ``pipe_schedule`` default to the schedule's.

    Returns:
        A :class:`Pipelining`: ``.client``, ``.pipe_schedule``, ``.perseus_schedule`` (the perseus
        ``--schedule`` of the same order, see :func:`perseus_schedule_of`), ``.enabled``,
        ``detach()``, ``close()``; as a context manager it closes on exit.

    Raises:
        TypeError: ``schedule`` is not a pipelining schedule, or has no order and no client was given.
    """
    return _instrument_pipelining(schedule, client, Client, **client_options)
