"""One rank of the framework-integration tests (test_integrations_real.py): each framework's own
pipeline schedule code trains a small model over gloo on the CPU, one process per pipeline rank,
first without perseus and then with its perseus integration against `perseus serve` on the fake
NVML; what happened goes to `<out>/rank<R>.json` (as real_pipelining_rank.py's records).

    python real_frameworks_rank.py PLAN.json RANK

- `megatron`: megatron-core's `get_forward_backward_func()` (1F1B, or interleaved 1F1B with
  `virtual` model chunks per rank) with `perseus.integrations.megatron.attach`. megatron-core
  allocates its receive buffers and a token counter on the GPU (`torch.cuda.current_device()`,
  `device="cuda"`): `megatron_on_the_cpu()` makes those tensors on the CPU, nothing else.
  Truth: megatron's own timers (`forward-compute` / `backward-compute`, started per microbatch).
- `deepspeed`: DeepSpeed's `PipelineEngine.train_batch` on DeepSpeed's CPU accelerator with
  `perseus.integrations.deepspeed.attach`. Truth: the stage modules' forward and backward hooks.
- `torchtitan`: the schedule torchtitan builds from its `ParallelismConfig`
  (`torchtitan.distributed.pipeline_parallel._build_pipeline_schedule`), perseus turned on through
  torchtitan's own override mechanism from a `Trainer.Config`. Truth: PyTorch's profiler ranges.
"""
import contextlib
import functools
import json
import os
import sys
import time
import types
import warnings

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode
from torch.profiler import ProfilerActivity, profile, record_function

import perseus
import perseus.torch
from real_pipelining_rank import WIDTH, Recorder, digest, profiler_truth

MICROBATCH, SEQUENCE = 2, 3


class _CudaTensorsOnTheCpu(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        device = kwargs.get("device")
        if device is not None and (isinstance(device, int) or str(device).startswith("cuda")):
            kwargs["device"] = "cpu"
        return func(*args, **kwargs)


@contextlib.contextmanager
def megatron_on_the_cpu():
    """The stand-in for the GPU megatron-core asks for: `torch.cuda.current_device()` answers 0,
    and every tensor made on a CUDA device (`device=0`, `"cuda"`) is made on the CPU."""
    current = torch.cuda.current_device
    torch.cuda.current_device = lambda: 0
    try:
        with _CudaTensorsOnTheCpu():
            yield
    finally:
        torch.cuda.current_device = current


class MegatronTimers:
    """megatron's `config.timers`: records which timers start, in order."""

    def __init__(self):
        self.started = []

    def __call__(self, name, log_level=None):
        started = self.started

        class Timer:
            def start(self, barrier=False):
                started.append(name)

            def stop(self, barrier=False):
                pass

        return Timer()


def client_options(run, **shape):
    return dict(shape, server_url=run["server"], nvml_library=os.environ["PERSEUS_FAKE_NVML"], report_every=1,
                model_name=run["name"], request_timeout=10.0, heartbeat_interval=0.0)


def data(step, shape, microbatches):
    """A step's microbatches of (input, target)."""
    generator = torch.Generator().manual_seed(step)
    return [(torch.randn(*shape, generator=generator), torch.randn(*shape, generator=generator))
            for _ in range(microbatches)]


def megatron(run, rank, ranks, hooked):
    from megatron.core import parallel_state
    from megatron.core.enums import ModelType
    from megatron.core.pipeline_parallel import schedules
    from megatron.core.transformer import TransformerConfig

    import perseus.integrations.megatron

    virtual = run.get("virtual", 1)
    parallel_state.initialize_model_parallel(pipeline_model_parallel_size=ranks,
                                             virtual_pipeline_model_parallel_size=virtual if virtual > 1 else None)
    timers = MegatronTimers()
    config = TransformerConfig(num_layers=ranks * virtual, hidden_size=WIDTH, num_attention_heads=1,
                               pipeline_model_parallel_size=ranks, pipeline_dtype=torch.float32,
                               use_cpu_initialization=True, batch_p2p_comm=False,
                               virtual_pipeline_model_parallel_size=virtual if virtual > 1 else None)
    config.timers = timers

    class Chunk(torch.nn.Module):
        def __init__(self, chunk):
            super().__init__()
            torch.manual_seed(2000 + rank + ranks * chunk)
            self.layer, self.chunk, self.input_tensor = torch.nn.Linear(WIDTH, WIDTH), chunk, None
            self.config, self.model_type = config, ModelType.encoder_or_decoder

        def set_input_tensor(self, tensor):
            self.input_tensor = tensor[0] if isinstance(tensor, list) else tensor

        def forward(self, x):
            first = parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=self.chunk)
            return torch.tanh(self.layer(x if first else self.input_tensor))

    chunks = [Chunk(c) for c in range(virtual)]
    optimizer = torch.optim.SGD([p for c in chunks for p in c.parameters()], lr=0.05)

    def loss(target, output):
        value = ((output - target) ** 2).mean()
        return value, {"loss": value.detach()}

    def forward_step(iterator, model):
        inputs, target = next(iterator)
        return model(inputs), functools.partial(loss, target)

    def megatron_functions():
        return [getattr(schedules, name) for name in ("forward_step", "backward_step", "get_forward_backward_func",
                                                      *perseus.integrations.megatron.SCHEDULE_FUNCTIONS)]

    original = megatron_functions()
    handle = client = None
    if hooked:
        pipe_schedule = perseus.default_pipe_schedule(rank, ranks, run["microbatches"], "interleaved", virtual) \
            if virtual > 1 else ()
        client = perseus.torch.Client(**client_options(run, pp_rank=parallel_state.get_pipeline_model_parallel_rank(),
                                                       pp_degree=ranks, num_microbatches=run["microbatches"],
                                                       pipe_schedule=pipe_schedule))
        handle = perseus.integrations.megatron.attach(client)

    def train_step(step):
        timers.started.clear()
        batch = data(step, (SEQUENCE, MICROBATCH, WIDTH), run["microbatches"])
        with megatron_on_the_cpu():
            stored = schedules.get_forward_backward_func()(
                forward_step_func=forward_step, data_iterator=[iter(batch) for _ in chunks] if virtual > 1
                else iter(batch), model=chunks, num_microbatches=run["microbatches"], seq_length=SEQUENCE,
                micro_batch_size=MICROBATCH)
        optimizer.step()
        optimizer.zero_grad()
        truth = [{"forward-compute": "forward", "backward-compute": "backward"}[n] for n in timers.started
                 if n in ("forward-compute", "backward-compute")]
        return [s["loss"].item().hex() for s in stored], truth

    def evaluate(recorder):
        """An evaluation call (forward_only=True) is no step; detach() puts megatron's functions back."""
        before = len(recorder.calls)
        batch = data(0, (SEQUENCE, MICROBATCH, WIDTH), run["microbatches"])
        with megatron_on_the_cpu(), torch.no_grad():
            schedules.get_forward_backward_func()(
                forward_step_func=forward_step, data_iterator=[iter(batch) for _ in chunks] if virtual > 1
                else iter(batch), model=chunks, num_microbatches=run["microbatches"], seq_length=SEQUENCE,
                micro_batch_size=MICROBATCH, forward_only=True)
        measured = len(recorder.calls) - before
        handle.detach()
        return {"evaluation_calls": measured, "restored": original == megatron_functions()}

    result = train(run, client, train_step, evaluate if hooked else None)
    result["digest"] = digest(chunks)
    parallel_state.destroy_model_parallel()
    return result


def deepspeed_run(run, rank, ranks, hooked):
    import deepspeed
    from deepspeed.pipe import PipelineModule

    import perseus.integrations.deepspeed

    deepspeed.init_distributed(dist_backend="gloo")  # over the process group this rank already has
    torch.manual_seed(3000)
    layers = [torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()) for _ in range(ranks)]
    module = PipelineModule(layers=layers, num_stages=ranks, partition_method="uniform",
                            loss_fn=lambda output, target: ((output - target) ** 2).mean())
    config = {"train_micro_batch_size_per_gpu": MICROBATCH, "gradient_accumulation_steps": run["microbatches"],
              "optimizer": {"type": "SGD", "params": {"lr": 0.05}}, "steps_per_print": 10 ** 6}
    engine, *_ = deepspeed.initialize(model=module, config=config, model_parameters=list(module.parameters()))
    linear = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    seen = []
    linear[0].register_forward_pre_hook(lambda m, a: seen.append("forward"))
    linear[-1].register_full_backward_pre_hook(lambda m, g: seen.append("backward"))
    handle = client = None
    if hooked:
        client = perseus.torch.Client(**client_options(run, pp_rank=engine.stage_id, pp_degree=engine.num_stages,
                                                       num_microbatches=engine.micro_batches))
        handle = perseus.integrations.deepspeed.attach(engine, client)

    def train_step(step):
        seen.clear()
        loss = engine.train_batch(data_iter=iter(data(step, (MICROBATCH, WIDTH), run["microbatches"])))
        return [loss.item().hex()] if engine.is_last_stage() else [], list(seen)

    def evaluate(recorder):
        """eval_batch is no step; a client whose order has other microbatches is warned about;
        detach() puts the engine back."""
        before = len(recorder.calls)
        engine.eval_batch(data_iter=iter(data(0, (MICROBATCH, WIDTH), run["microbatches"])))
        measured = len(recorder.calls) - before
        handle.detach()
        other = perseus.integrations.deepspeed.attach(engine, types.SimpleNamespace(
            pipe_schedule=perseus.default_pipe_schedule(engine.stage_id, engine.num_stages, 2), enabled=True))
        other.detach()
        return {"evaluation_calls": measured,
                "restored": not {"train_batch", "_INSTRUCTION_MAP", "_exec_forward_pass"} & set(vars(engine))}

    result = train(run, client, train_step, evaluate if hooked else None)
    result["digest"] = digest([module])
    return result


def torchtitan_run(run, rank, ranks, hooked):
    from torchtitan.config.configs import ParallelismConfig
    from torchtitan.config.override import apply_overrides, parse_cli_imports
    from torchtitan.distributed import pipeline_parallel
    from torchtitan.trainer import Trainer

    from real_pipelining_rank import stage_indices, chunk
    from torch.distributed.pipelining import PipelineStage

    if hooked:  # what torchtitan's Trainer does with its configuration, before it builds anything
        config = Trainer.Config()
        # The documented command-line form: --override.imports 'perseus.integrations.torchtitan.perseus={...}'
        config.override.imports = parse_cli_imports(
            [f"perseus.integrations.torchtitan.perseus={json.dumps(client_options(run))}"])
        apply_overrides(config.override, config)
    parallelism = ParallelismConfig(pipeline_parallel_degree=ranks, pipeline_parallel_schedule=run["schedule"],
                                    pipeline_parallel_microbatch_size=MICROBATCH)
    stages = 2 * ranks
    indices = stage_indices("ScheduleZBVZeroBubble" if "ZBV" in run["schedule"] else run["schedule"], rank, ranks, 2)
    modules = [chunk(i, stages) for i in indices]
    pipeline_stages = [PipelineStage(m, i, stages, torch.device("cpu")) for m, i in zip(modules, indices)]
    schedule = pipeline_parallel._build_pipeline_schedule(
        parallelism=parallelism, local_batch_size=MICROBATCH * run["microbatches"], stages=pipeline_stages,
        loss_fn=lambda output, target: (((output - target) ** 2).mean(), None))
    optimizer = torch.optim.SGD([p for m in modules for p in m.parameters()], lr=0.05)
    client = None
    if hooked:
        import perseus.integrations.torchtitan as titan

        client = titan.instrumented()[-1].client
    prof = profile(activities=[ProfilerActivity.CPU]) if hooked else contextlib.nullcontext()

    def train_step(step):
        generator = torch.Generator().manual_seed(step)
        inputs = torch.randn(MICROBATCH * run["microbatches"], WIDTH, generator=generator)
        losses = []
        with record_function(f"test step {step}"):
            schedule.step(*((inputs,) if 0 in indices else ()), target=torch.sin(inputs) if stages - 1 in indices
                          else None, losses=losses)
        optimizer.step()
        optimizer.zero_grad()
        return [loss.item().hex() for loss in losses], None

    with prof:
        result = train(run, client, train_step)
    if hooked:
        result["truth"] = profiler_truth(prof, run["steps"])
        import perseus.integrations.torchtitan as titan

        result["perseus_schedule"] = titan.instrumented()[-1].perseus_schedule
        titan.disable()
    result["digest"] = digest(modules)
    return result


def train(run, client, train_step, after=None):
    """`run["steps"]` steps of `train_step(step) -> (losses, truth)`; with a client, what it got
    (and what `after(recorder)` returns, called before the client closes)."""
    log = os.environ["PERSEUS_FAKE_NVML_LOG"]
    result = {"name": run["name"], "losses": [], "truth": [], "steps": run["steps"]}
    recorder = None
    if client is not None:
        result["log_start"] = os.path.getsize(log) if os.path.exists(log) else 0
        recorder = Recorder(client)
        result["pipe_schedule"] = list(client.pipe_schedule)
    for step in range(run["steps"]):
        losses, truth = train_step(step)
        result["losses"].append(losses)
        result["truth"].append(truth)
        if client is not None and client.enabled:
            client.wait_for_server(10.0)
    if client is not None:
        result["enabled"] = client.enabled
        if after is not None:
            result.update(after(recorder))
        dist.barrier()
        client.close()
        result["log_end"] = os.path.getsize(log) if os.path.exists(log) else 0
        result["calls"], result["schedules"] = recorder.calls, recorder.schedules
    return result


RUNNERS = {"megatron": megatron, "deepspeed": deepspeed_run, "torchtitan": torchtitan_run}


def main():
    plan_path, rank = sys.argv[1], int(sys.argv[2])
    with open(plan_path) as f:
        plan = json.load(f)
    ranks = plan["ranks"]
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(ranks))  # what DeepSpeed reads
    dist.init_process_group("gloo", init_method=f"file://{plan['store']}", rank=rank, world_size=ranks)
    results = []
    for run in plan["runs"]:
        began = time.monotonic()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = RUNNERS[run["framework"]](run, rank, ranks, run["mode"] == "hooked")
        result["warnings"] = [str(w.message) for w in caught if "perseus" in str(w.message)]
        result["seconds"] = round(time.monotonic() - began, 3)
        results.append(result)
        dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(plan["out"], f"rank{rank}.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
