"""One rank of examples/pytorch_pipelining: a small MLP cut into 4 stages and trained with PyTorch's
own pipelining (torch.distributed.pipelining's Schedule1F1B, 8 microbatches) over gloo on the CPU,
every forward and backward running on this rank's simulated GPU (simulated_gpu.py: perseus's fake
NVML and a model of a GPU's time and power per clock), with perseus hooked into the schedule by one
call, `perseus.torch.instrument_pipelining`.

It trains until the measured window is over: `--window` iterations, after `--warmup` iterations
or, with `--after-deployed`, once `perseus serve --scheduler Perseus` has deployed its plan (rank 0
asks the server after every iteration and tells the others). Each rank writes the window's time and
GPU energy per iteration to `--out` as JSON and prints them.

Run one process per stage with the torch.distributed environment (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) and PERSEUS_NVML_LIBRARY naming the fake NVML, as run.sh does.
"""
from __future__ import annotations

import argparse
import json
import os
import time
import urllib.parse
import urllib.request
from typing import Any, Dict, List

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

import perseus.torch
from simulated_gpu import STAGE_TIMES, SimulatedGpu

WIDTH, MICROBATCHES, ROWS = 64, 8, 4


def stage_model(stage: int, stages: int) -> nn.Module:
    torch.manual_seed(1234 + stage)
    if stage == stages - 1:
        return nn.Linear(WIDTH, WIDTH)
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh())


def batch(iteration: int) -> List[torch.Tensor]:
    """The iteration's inputs and targets (a smooth function of the inputs), 4 batches seen in turn."""
    generator = torch.Generator().manual_seed(iteration % 4)
    inputs = torch.randn(MICROBATCHES * ROWS, WIDTH, generator=generator)
    return [inputs, torch.sin(inputs)]


def phase(server: str, job_id: str) -> str:
    with urllib.request.urlopen(f"{server}/jobs/{urllib.parse.quote(job_id, safe='')}", timeout=10) as reply:
        return str(json.load(reply)["phase"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="perseus serve's URL")
    parser.add_argument("--window", type=int, default=10, help="iterations measured")
    parser.add_argument("--warmup", type=int, default=2, help="iterations before the window")
    parser.add_argument("--after-deployed", action="store_true",
                        help="the window begins two iterations after the server deployed its plan")
    parser.add_argument("--max-iterations", type=int, default=400)
    parser.add_argument("--report-every", type=int, default=2, help="iterations per perseus round")
    parser.add_argument("--time-scale", type=float, default=1.0, help="the GPU model's times, scaled")
    parser.add_argument("--out", required=True, help="this rank's window as JSON")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, stages = dist.get_rank(), dist.get_world_size()
    assert stages == len(STAGE_TIMES), f"the GPU model has {len(STAGE_TIMES)} stages"
    module = stage_model(rank, stages)
    stage = PipelineStage(module, rank, stages, torch.device("cpu"))
    gpu = SimulatedGpu(os.environ["PERSEUS_NVML_LIBRARY"], rank, args.time_scale)
    gpu.attach(stage)
    schedule = Schedule1F1B(stage, n_microbatches=MICROBATCHES, loss_fn=nn.functional.mse_loss)
    optimizer = torch.optim.Adam(module.parameters(), lr=3e-3)

    with perseus.torch.instrument_pipelining(schedule, server_url=args.server, model_name="mlp-4stage",
                                             report_every=args.report_every) as pipelining:
        window: Dict[str, Any] = {"rank": rank, "iterations": 0, "seconds": 0.0, "joules": 0.0, "losses": []}
        measuring, started_at, deployed_at = False, None, None
        for iteration in range(args.max_iterations):
            inputs, targets = batch(iteration)
            losses: List[torch.Tensor] = []
            began, energy = time.perf_counter(), gpu.energy_j()
            schedule.step(*([inputs] if rank == 0 else []), target=targets if rank == stages - 1 else None,
                          losses=losses)
            optimizer.step()
            optimizer.zero_grad()
            if measuring:
                window["iterations"] += 1
                window["seconds"] += time.perf_counter() - began
                window["joules"] += gpu.energy_j() - energy
            if losses:
                window["losses"].append(float(torch.stack(losses).mean()))
            # Rank 0 decides when the window begins and ends; every rank hears it.
            decision = torch.tensor([0])
            if rank == 0:
                if args.after_deployed and deployed_at is None and pipelining.client.enabled and \
                        phase(args.server, pipelining.client.job_id) == "deployed":
                    deployed_at = iteration
                begin = deployed_at + 2 if args.after_deployed and deployed_at is not None else \
                    None if args.after_deployed else args.warmup
                decision[0] = 2 if measuring and window["iterations"] >= args.window else \
                    1 if begin is not None and iteration + 1 >= begin else 0
            dist.broadcast(decision, src=0)
            if decision.item() == 2:
                break
            if decision.item() == 1 and not measuring:
                measuring, started_at = True, iteration + 1
        window.update(perseus_on=pipelining.enabled and pipelining.client.enabled, iterations_run=iteration + 1,
                      window_from=started_at, job_id=pipelining.client.job_id)
        dist.barrier()
    with open(args.out, "w") as out:
        json.dump(window, out)
    count = max(window["iterations"], 1)
    print(f"rank {rank}: perseus {'on' if window['perseus_on'] else 'OFF'}; window of {window['iterations']} "
          f"iterations from iteration {started_at}: {window['seconds'] / count:.4f} s and "
          f"{window['joules'] / count:.2f} J per iteration", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
