"""Zeus's examples/power_limit_optimizer/train_single.py, as its documentation uses the API, on a model
and data small enough for a test: the power-limit optimizer profiles every limit while one GPU trains,
keeps the lowest limit within ZEUS_MAX_SLOWDOWN of the fastest, and the script prints each epoch's
loss and accuracy and the optimizer's state. tests/python/test_zeus_side_by_side.py runs it as written
(`zeus`) and with only the imports changed to `perseus.zeus`.

Without a GPU (the tests), fake_cuda lets PyTorch see the fake NVML's GPUs, and gpu_work stands for
the kernels of a step: it takes longer when the power limit holds the SM clock down."""
import argparse
import random

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader

from fake_cuda import gpu_work, toy_dataset

# ZEUS
from zeus.monitor import ZeusMonitor
from zeus.optimizer.power_limit import MaxSlowdownConstraint, GlobalPowerLimitOptimizer
from zeus.utils.env import get_env


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A small classifier, trained with the power-limit optimizer")
    parser.add_argument("--epochs", default=3, type=int)
    parser.add_argument("-b", "--batch_size", default=16, type=int)
    parser.add_argument("--lr", default=0.1, type=float)
    parser.add_argument("--seed", default=0, type=int)
    parser.add_argument("--gpu", default=0, type=int)
    parser.add_argument("--warmup_steps", default=1, type=int)
    parser.add_argument("--profile_steps", default=3, type=int)
    parser.add_argument("--pl_step", default=50, type=int)
    parser.add_argument("--step_time", default=0.04, type=float, help="seconds of GPU work per step at the top clock")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    random.seed(args.seed)
    torch.manual_seed(args.seed)

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    torch.cuda.set_device(args.gpu)
    model.cuda(args.gpu)
    criterion = nn.CrossEntropyLoss().cuda(args.gpu)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9)
    scheduler = StepLR(optimizer, step_size=2, gamma=0.1)
    train_loader = DataLoader(toy_dataset(320, args.seed), batch_size=args.batch_size, shuffle=True,
                              generator=torch.Generator().manual_seed(args.seed))
    val_loader = DataLoader(toy_dataset(160, args.seed + 1), batch_size=args.batch_size)

    ################################## The important part #####################################
    monitor = ZeusMonitor(gpu_indices=[args.gpu])
    plo = GlobalPowerLimitOptimizer(
        monitor=monitor,
        optimum_selector=MaxSlowdownConstraint(factor=get_env("ZEUS_MAX_SLOWDOWN", float, 1.1)),
        warmup_steps=args.warmup_steps,
        profile_steps=args.profile_steps,
        pl_step=args.pl_step,
    )

    for epoch in range(args.epochs):
        plo.on_epoch_begin()
        loss = train(train_loader, model, criterion, optimizer, args, plo)
        plo.on_epoch_end()

        acc1 = validate(val_loader, model)
        print(f"epoch {epoch}: loss {loss:.6f}, top-1 accuracy {acc1:.2f}, {type(plo.state).__name__}")

        scheduler.step()
    ################################## The important part #####################################
    print("power limit optimizer:", repr(plo.state))


def train(loader, model, criterion, optimizer, args, power_limit_optimizer) -> float:
    model.train()
    total = 0.0
    for images, target in loader:
        power_limit_optimizer.on_step_begin()  # Mark the beginning of one training step.

        images, target = images.cuda(args.gpu), target.cuda(args.gpu)
        loss = criterion(model(images), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        gpu_work(args.step_time, args.gpu)
        total += loss.item()

        power_limit_optimizer.on_step_end()  # Mark the end of one training step.
    return total / len(loader)


def validate(loader, model) -> float:
    model.eval()
    correct = seen = 0
    with torch.no_grad():
        for images, target in loader:
            correct += int((model(images).argmax(dim=1) == target).sum())
            seen += len(target)
    return 100.0 * correct / seen


if __name__ == "__main__":
    main()
