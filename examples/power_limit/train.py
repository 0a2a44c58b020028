"""Zeus's power-limit optimizer on perseus: a single-GPU training script, written as for Zeus
with only the import changed (``perseus.zeus`` for ``zeus``). A small model trains on CPU while
GlobalPowerLimitOptimizer finds the power limit that minimises Zeus's time-energy cost, then keeps it.

It drives the GPU the driver's NVML finds; where there is none (or with ``--fake-gpu``) it runs on
perseus's fake NVML, whose power limits cap a simulated SM clock. Its first line says which.

    python3 examples/power_limit/train.py --epochs 3 --steps-per-epoch 40 [--profile plo.json] [--fake-gpu]
"""
from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import perseus
from perseus.zeus.monitor import ZeusMonitor
from perseus.zeus.optimizer.power_limit import Done, GlobalPowerLimitOptimizer, ZeusCost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=40)
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--profile-steps", type=int, default=4)
    parser.add_argument("--pl-step", type=int, default=50, help="watts between the power limits explored")
    parser.add_argument("--profile", default=None, help="Zeus-format profile: loaded if it exists, else written")
    parser.add_argument("--fake-gpu", action="store_true", help="perseus's fake NVML even where a GPU is found")
    args = parser.parse_args()
    print(perseus.select_gpu_library(fake=args.fake_gpu), flush=True)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(512, 64), torch.randn(512, 1)

    monitor = ZeusMonitor(gpu_indices=[0])
    plo = GlobalPowerLimitOptimizer(monitor, ZeusCost(eta_knob=0.5), warmup_steps=args.warmup_steps,
                                    profile_steps=args.profile_steps, pl_step=args.pl_step, profile_path=args.profile)
    monitor.begin_window("training")
    for epoch in range(args.epochs):
        plo.on_epoch_begin()
        for step in range(args.steps_per_epoch):
            plo.on_step_begin()
            batch = slice((step * 32) % 512, (step * 32) % 512 + 32)
            loss = nn.functional.mse_loss(model(inputs[batch]), targets[batch])
            optimizer.zero_grad()
            torch.autograd.backward(loss)
            optimizer.step()
            # The GPU's share of a step (here simulated): slower where a power limit holds the clock down.
            time.sleep(0.004 * 1410 / perseus.current_gpu_clock())
            plo.on_step_end()
        plo.on_epoch_end()
        print(f"epoch {epoch}: loss {loss.item():.4f}, power limit optimizer {type(plo.state).__name__} "
              f"at {plo.current_power_limit // 1000} W")
    total = monitor.end_window("training")
    if isinstance(plo.state, Done):
        print(f"optimal power limit: {plo.state.optimal_power_limit // 1000} W")
    print(f"training took {total.time:.2f} s and {total.total_energy:.1f} J")


if __name__ == "__main__":
    main()
