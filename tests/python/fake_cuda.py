"""PyTorch on the fake GPUs, for running the real Zeus on a machine without any: importing this module
makes `torch.cuda` report the fake NVML's GPUs (PERSEUS_FAKE_NVML_GPUS) as CUDA devices whose queued
work is always done (synchronize returns at once) and whose tensors and modules stay in host memory
(`.cuda()` is the identity), so Zeus's synchronisation and all-reduce run as they would on a GPU node.

`gpu_work(seconds_at_top_clock)` stands for a kernel: it takes longer at a lower SM clock (read from
the fake GPU, whose clock a power limit caps), as compute-bound work does. `toy_dataset(samples, seed)`
is the examples' data: 32 features, 10 classes a small model learns in a few epochs."""
from __future__ import annotations

import os
import time

import torch
from torch.utils.data import TensorDataset

TOP_CLOCK = 1410
_device = [0]


def _set_device(device: object) -> None:
    _device[0] = int(getattr(device, "index", device) or 0)


torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: int(os.environ.get("PERSEUS_FAKE_NVML_GPUS", "1"))
torch.cuda.synchronize = lambda device=None: None
torch.cuda.set_device = _set_device
torch.cuda.current_device = lambda: _device[0]
torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
torch.nn.Module.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]


def gpu_work(seconds_at_top_clock: float, device: int = 0) -> None:
    """Busy for the time this much compute takes at the GPU's current SM clock."""
    import perseus

    clock = perseus.current_gpu_clock(device)
    time.sleep(seconds_at_top_clock * TOP_CLOCK / clock)


def toy_dataset(samples: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, 32, generator=generator)
    targets = (inputs[:, :10].argmax(dim=1) + (inputs[:, 10] > 0).long()) % 10
    return TensorDataset(inputs, targets)
