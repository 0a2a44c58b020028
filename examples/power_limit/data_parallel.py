"""Zeus's power-limit optimizer with data parallelism, written as for Zeus with only the import
changed: one process per GPU (``torchrun``), each monitoring its own GPU; the optimizer all-reduces
the measurements (energy summed, time the longest) so every rank settles on the same limit.

Without GPUs it runs on CPU (gloo) and perseus's fake NVML with one fake GPU per rank:

    torchrun --nproc_per_node 2 examples/power_limit/data_parallel.py
"""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from torch import nn

import perseus
from perseus.zeus.monitor import ZeusMonitor
from perseus.zeus.optimizer.power_limit import Done, GlobalPowerLimitOptimizer


def main() -> None:
    if "PERSEUS_NVML_LIBRARY" not in os.environ:  # no GPU here: fake ones, one per rank
        os.environ["PERSEUS_NVML_LIBRARY"] = perseus.fake_nvml_library()
        os.environ.setdefault("PERSEUS_FAKE_NVML_GPUS", os.environ.get("LOCAL_WORLD_SIZE", "1"))
    dist.init_process_group("gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    monitor = ZeusMonitor(gpu_indices=[local_rank])  # pass in local rank to gpu_indices
    plo = GlobalPowerLimitOptimizer(monitor, warmup_steps=1, profile_steps=2, pl_step=125)
    for epoch in range(2):
        plo.on_epoch_begin()
        for step in range(12):
            plo.on_step_begin()
            x, y = torch.randn(16, 32), torch.randn(16, 1)
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            torch.autograd.backward(loss)
            optimizer.step()
            time.sleep(0.002 * (1 + local_rank))  # rank 1 is slower: only the all-reduced times agree
            plo.on_step_end()
        plo.on_epoch_end()
    assert isinstance(plo.state, Done)
    print(f"rank {dist.get_rank()}: optimal power limit {plo.state.optimal_power_limit // 1000} W, "
          f"measured {[(m.power_limit, round(m.time, 4)) for m in plo.measurements]}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
