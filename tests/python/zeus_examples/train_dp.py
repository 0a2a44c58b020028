"""Zeus's examples/power_limit_optimizer/train_dp.py, as its documentation uses the API, on a model and
data small enough for a test: one process per GPU under torchrun, DistributedDataParallel over gloo,
each rank's power-limit optimizer measuring its own GPU (`ZeusMonitor(gpu_indices=[local_rank])`, as
GlobalPowerLimitOptimizer's documentation says) and all-reducing the measurements, so every rank
ends at the same limit. tests/python/test_zeus_side_by_side.py runs it as written (`zeus`) and with
only the imports changed to `perseus.zeus`.

Zeus's own script differs in two places that keep it from running: it passes
`ZeusMonitor(gpu_indices=args.gpu)` (an int, not a list) and gives the optimizer to rank 0 alone,
whose all-reduce then waits for ranks that never join it.

Without a GPU (the tests), fake_cuda lets PyTorch see the fake NVML's GPUs, and gpu_work stands for
the kernels of a step: it takes longer when the power limit holds the SM clock down."""
import argparse
import os
import random

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from fake_cuda import gpu_work, toy_dataset

# ZEUS
from zeus.monitor import ZeusMonitor
from zeus.optimizer.power_limit import MaxSlowdownConstraint, GlobalPowerLimitOptimizer
from zeus.utils.env import get_env
from zeus.callback import Callback, CallbackSet


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A small classifier, data parallel, with the power-limit optimizer")
    parser.add_argument("--epochs", default=3, type=int)
    parser.add_argument("-b", "--batch_size", default=32, type=int, help="global mini-batch size")
    parser.add_argument("--lr", default=0.1, type=float)
    parser.add_argument("--seed", default=0, type=int)
    parser.add_argument("--warmup_steps", default=1, type=int)
    parser.add_argument("--profile_steps", default=3, type=int)
    parser.add_argument("--pl_step", default=50, type=int)
    parser.add_argument("--step_time", default=0.04, type=float, help="seconds of GPU work per step at the top clock")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    random.seed(args.seed)
    torch.manual_seed(args.seed)

    args.gpu = int(os.environ["LOCAL_RANK"])
    args.local_world_size = int(os.environ["LOCAL_WORLD_SIZE"])
    if args.batch_size % args.local_world_size != 0:
        raise ValueError("The global batch size should be divisible by the number of GPUs.")
    dist.init_process_group(backend="gloo")

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    torch.cuda.set_device(args.gpu)
    model.cuda(args.gpu)
    args.batch_size = args.batch_size // args.local_world_size
    model = nn.parallel.DistributedDataParallel(model)
    criterion = nn.CrossEntropyLoss().cuda(args.gpu)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9)
    scheduler = StepLR(optimizer, step_size=2, gamma=0.1)

    train_dataset = toy_dataset(640, args.seed)
    train_sampler = DistributedSampler(train_dataset, seed=args.seed)
    train_loader = DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)
    val_dataset = toy_dataset(160, args.seed + 1)
    val_loader = DataLoader(val_dataset, batch_size=args.batch_size,
                            sampler=DistributedSampler(val_dataset, shuffle=False, drop_last=True))

    # Every rank monitors its own GPU; the optimizers all-reduce their measurements.
    plo = GlobalPowerLimitOptimizer(
        monitor=ZeusMonitor(gpu_indices=[args.gpu]),
        optimum_selector=MaxSlowdownConstraint(factor=get_env("ZEUS_MAX_SLOWDOWN", float, 1.1)),
        warmup_steps=args.warmup_steps,
        profile_steps=args.profile_steps,
        pl_step=args.pl_step,
    )
    callback_set: list[Callback] = [plo]
    callbacks = CallbackSet(callback_set)

    for epoch in range(args.epochs):
        train_sampler.set_epoch(epoch)

        callbacks.on_epoch_begin()
        loss = train(train_loader, model, criterion, optimizer, args, callbacks)
        callbacks.on_epoch_end()

        acc1 = validate(val_loader, model)
        print(f"rank {dist.get_rank()} epoch {epoch}: loss {loss:.6f}, top-1 accuracy {acc1:.2f}, "
              f"{type(plo.state).__name__}")
        scheduler.step()
    print(f"rank {dist.get_rank()} power limit optimizer: {plo.state!r}, measured "
          f"{[m.power_limit for m in plo.measurements]}")
    dist.destroy_process_group()


def train(loader, model, criterion, optimizer, args, callbacks) -> float:
    model.train()
    total = 0.0
    for images, target in loader:
        callbacks.on_step_begin()  # Mark the beginning of the training step.

        images, target = images.cuda(args.gpu), target.cuda(args.gpu)
        loss = criterion(model(images), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        gpu_work(args.step_time, args.gpu)
        total += loss.item()

        callbacks.on_step_end()
    return total / len(loader)


def validate(loader, model) -> float:
    model.eval()
    correct = torch.zeros(2)
    with torch.no_grad():
        for images, target in loader:
            correct += torch.tensor([float((model(images).argmax(dim=1) == target).sum()), float(len(target))])
    dist.all_reduce(correct)
    return 100.0 * float(correct[0] / correct[1])


if __name__ == "__main__":
    main()
