"""Zeus's power-limit optimizer with data parallelism, written as for Zeus with only the import
changed: one process per GPU (``torchrun``), each monitoring its own GPU; the optimizer all-reduces
the measurements (energy summed, time the longest) so every rank settles on the same limit.

The model trains on CPU (gloo). Each rank drives the GPU the driver's NVML finds; where there is
none (or with ``--fake-gpu``) perseus's fake NVML stands in, one simulated GPU per rank, and each
rank's first line says which. Under ``torchrun`` each process is one rank; run directly, it starts
``--nproc`` ranks itself:

    python3 examples/power_limit/data_parallel.py --nproc 2 [--fake-gpu]
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import time

import torch
import torch.distributed as dist
from torch import nn

import perseus
from perseus.zeus.monitor import ZeusMonitor
from perseus.zeus.optimizer.power_limit import Done, GlobalPowerLimitOptimizer


def rank_main(local_rank: int, world_size: int, port: int, fake_gpu: bool) -> None:
    """One rank started by this script (torchrun sets the same variables itself)."""
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    train(fake_gpu)


def train(fake_gpu: bool) -> None:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # A fake NVML shows one simulated GPU per rank of this node.
    library = perseus.select_gpu_library(fake=fake_gpu, fake_gpus=int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    print(f"rank {os.environ.get('RANK', '0')}: {library}", flush=True)
    dist.init_process_group("gloo")
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
          f"measured {[(m.power_limit, round(m.time, 4)) for m in plo.measurements]}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=2, help="ranks to start when not run by torchrun")
    parser.add_argument("--fake-gpu", action="store_true", help="perseus's fake NVML even where a GPU is found")
    args = parser.parse_args()
    if "RANK" in os.environ:  # started by torchrun
        train(args.fake_gpu)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    context = multiprocessing.get_context("spawn")
    ranks = [context.Process(target=rank_main, args=(rank, args.nproc, port, args.fake_gpu)) for rank in range(args.nproc)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join()
    if any(process.exitcode != 0 for process in ranks):
        raise SystemExit(f"a rank failed: exit codes {[process.exitcode for process in ranks]}")


if __name__ == "__main__":
    main()
