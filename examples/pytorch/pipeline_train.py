"""A real pipeline-parallel training job with perseus: a small MLP cut into stages over
torch.distributed (gloo, CPU), trained with synchronous 1F1B (activations and gradients sent
between stages with send/recv) and an optimizer step per iteration.

perseus takes four lines: a client (rank, world size, the job-id broadcast and the device come
from torch), `client.step()` around each iteration, `client.instruction(name)` around each
forward and backward, and `perseus.ProfilingDone` to stop when the server says so.

At the end each rank prints one line: whether perseus was on for every iteration (fail-open turns it
off, with a warning, when the server or the GPU fails it; training goes on at default clocks), the
iterations' time and the GPU energy they took (`perseus.EnergyMonitor`), e.g.
    rank 3: perseus on for 12 of 12 iterations; 12 iterations in 0.412 s, GPU energy 171.3 J

Run one process per stage with the usual torch.distributed environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), e.g. through examples/pytorch/run.sh or torchrun. Without a GPU set
PERSEUS_NVML_LIBRARY to perseus's fake NVML (`perseus.fake_nvml_library()`).
"""
from __future__ import annotations

import argparse
import os
from typing import List, Optional

import torch
import torch.distributed as dist
from torch import nn

import perseus
import perseus.torch

WIDTH = 32


def stage_model(stage: int, stages: int) -> nn.Module:
    """Stage `stage` of the pipeline: two hidden layers, plus the output layer on the last stage."""
    torch.manual_seed(1234 + stage)
    layers: List[nn.Module] = [nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, WIDTH), nn.Tanh()]
    if stage == stages - 1:
        layers.append(nn.Linear(WIDTH, 1))
    return nn.Sequential(*layers)


def _sent(work: Optional[dist.Work]) -> dist.Work:
    """The handle of a send started with isend (None only for a rank outside the group, never here)."""
    assert work is not None
    return work


def batch(iteration: int, microbatches: int, size: int) -> List[torch.Tensor]:
    """The iteration's microbatches of inputs and targets (the same on every rank: the first stage
    uses the inputs, the last the targets), from a small data set of 4 batches seen in turn. The
    target is a smooth function of the input."""
    generator = torch.Generator().manual_seed(iteration % 4)
    inputs = torch.randn(microbatches, size, WIDTH, generator=generator)
    targets = torch.sin(inputs[..., :4]).sum(dim=-1, keepdim=True)
    return [inputs, targets]


class Stage:
    """One rank's stage: runs its forwards and backwards in the order of its pipe schedule,
    exchanging activations and gradients with its neighbours."""

    def __init__(self, stage: int, stages: int, microbatches: int, microbatch_size: int) -> None:
        self.stage, self.stages = stage, stages
        self.microbatches, self.microbatch_size = microbatches, microbatch_size
        self.model = stage_model(stage, stages)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-2)
        self.first, self.last = stage == 0, stage == stages - 1

    def run_iteration(self, iteration: int, client: perseus.Client, order: List[str]) -> Optional[float]:
        inputs, targets = batch(iteration, self.microbatches, self.microbatch_size)
        stage_inputs: List[torch.Tensor] = []
        stage_outputs: List[torch.Tensor] = []
        pending: List[dist.Work] = []  # sends in flight: non-blocking, so 1F1B cannot deadlock
        losses: List[float] = []
        self.optimizer.zero_grad()
        forwards = backwards = 0
        for name in order:
            if name == "forward":
                m = forwards
                forwards += 1
                if self.first:
                    x = inputs[m]
                else:
                    x = torch.empty(self.microbatch_size, WIDTH)
                    dist.recv(x, src=self.stage - 1)
                    x.requires_grad_(True)
                with client.instruction("forward"):
                    y = self.model(x)
                    if self.last:
                        y = nn.functional.mse_loss(y, targets[m]) / self.microbatches
                stage_inputs.append(x)
                stage_outputs.append(y)
                if self.last:
                    losses.append(float(y.detach()) * self.microbatches)
                else:
                    pending.append(_sent(dist.isend(y.detach(), dst=self.stage + 1)))
            else:
                m = backwards
                backwards += 1
                grad: Optional[torch.Tensor] = None
                if not self.last:
                    grad = torch.empty(self.microbatch_size, WIDTH)
                    dist.recv(grad, src=self.stage + 1)
                with client.instruction("backward"):
                    torch.autograd.backward(stage_outputs[m], grad)
                if not self.first:
                    input_grad = stage_inputs[m].grad
                    assert input_grad is not None
                    pending.append(_sent(dist.isend(input_grad, dst=self.stage - 1)))
                stage_outputs[m] = stage_inputs[m] = torch.empty(0)  # free the activations
        for work in pending:
            work.wait()
        self.optimizer.step()
        return sum(losses) / len(losses) if losses else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=20, help="training iterations (default 20)")
    parser.add_argument("--microbatches", type=int, default=4, help="microbatches per iteration (default 4)")
    parser.add_argument("--microbatch-size", type=int, default=16, help="samples per microbatch (default 16)")
    parser.add_argument("--server", default=os.environ.get("PERSEUS_SERVER", "http://127.0.0.1:7787"),
                        help="perseus serve URL (default $PERSEUS_SERVER or http://127.0.0.1:7787)")
    parser.add_argument("--report-every", type=int, default=2, help="iterations per perseus round (default 2)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    stage, stages = dist.get_rank(), dist.get_world_size()
    pipeline = Stage(stage, stages, args.microbatches, args.microbatch_size)
    # The order the stage runs its forwards and backwards is the one registered with perseus.
    order = perseus.default_pipe_schedule(stage, stages, args.microbatches)
    client = perseus.torch.Client(pp_rank=stage, pp_degree=stages, num_microbatches=args.microbatches,
                                  microbatch_size=args.microbatch_size, model_name="mlp", framework="torch",
                                  pipe_schedule=order, report_every=args.report_every, server_url=args.server)
    device = torch.cuda.current_device() if torch.cuda.is_available() else 0
    monitor = perseus.EnergyMonitor(gpu_indices=[device])  # CUDA's numbering, as the client's
    iterations = iterations_on = 0
    with client:
        monitor.begin_window("training")
        try:
            for iteration in range(args.iterations):
                with client.step():
                    loss = pipeline.run_iteration(iteration, client, order)
                iterations += 1
                iterations_on += client.enabled
                if loss is not None:
                    print(f"iteration {iteration} loss {loss:.6f}", flush=True)
        except perseus.ProfilingDone as done:
            iterations += 1
            iterations_on += 1
            print(f"stage {stage}: perseus says training is done: {done}", flush=True)
    # Closed after the client: its worker thread has then made its last energy reads.
    used = monitor.end_window("training")
    state = "on" if iterations_on == iterations else "OFF"
    print(f"rank {stage}: perseus {state} for {iterations_on} of {iterations} iterations; {iterations} iterations "
          f"in {used.time:.3f} s, GPU energy {used.total_energy:.1f} J", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
