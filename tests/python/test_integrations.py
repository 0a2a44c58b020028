"""The DeepSpeed and Megatron-LM integrations against stand-ins with the frameworks' method names
and call order (neither framework is in Debian)."""
import types

import pytest

from fakegpu import FAKE_NVML, locked_clocks

import perseus
from perseus.integrations import deepspeed, megatron


class Recorder:
    """A client that records the hooks it gets."""

    def __init__(self, pipe_schedule=("forward", "backward")):
        self.calls = []
        self.pipe_schedule = list(pipe_schedule)
        self.enabled = True
        self.synchronize = None

    def on_step_begin(self):
        self.calls.append("step_begin")

    def on_step_end(self):
        self.calls.append("step_end")

    def instruction(self, name):
        return perseus.Client.instruction(self, name)

    def on_instruction_begin(self, name):
        self.calls.append(f"begin {name}")

    def on_instruction_end(self, name):
        self.calls.append(f"end {name}")


# --- DeepSpeed: PipelineEngine dispatches its schedule through _INSTRUCTION_MAP ----------------------

class ForwardPass:
    pass


class BackwardPass:
    pass


class OptimizerStep:
    pass


class PipelineEngine:
    """DeepSpeed's shape: train_batch runs _exec_schedule, which binds each instruction's function
    from self._INSTRUCTION_MAP to the engine (as types.MethodType) and calls it."""

    def __init__(self, micro_batches=2):
        self.micro_batches = micro_batches
        self.ran = []

    def _exec_forward_pass(self, buffer_id):
        self.ran.append(f"F{buffer_id}")

    def _exec_backward_pass(self, buffer_id):
        self.ran.append(f"B{buffer_id}")

    def _exec_optimizer_step(self):
        self.ran.append("step")

    _INSTRUCTION_MAP = {
        ForwardPass: _exec_forward_pass,
        BackwardPass: _exec_backward_pass,
        OptimizerStep: _exec_optimizer_step,
    }

    def _exec_schedule(self, commands):
        for command, kwargs in commands:
            self._exec_instr = types.MethodType(self._INSTRUCTION_MAP[command], self)
            self._exec_instr(**kwargs)

    def train_batch(self, data_iter=None):
        self._exec_schedule([(ForwardPass, {"buffer_id": 0}), (ForwardPass, {"buffer_id": 1}),
                             (BackwardPass, {"buffer_id": 0}), (BackwardPass, {"buffer_id": 1}),
                             (OptimizerStep, {})])
        return 0.5

    def eval_batch(self, data_iter=None):
        self._exec_forward_pass(buffer_id=0)  # called directly, as an instance method
        return 0.25


def test_deepspeed_train_batch_is_a_step_of_measured_instructions():
    engine, client = PipelineEngine(), Recorder(["forward", "forward", "backward", "backward"])
    deepspeed.attach(engine, client)
    assert engine.train_batch() == 0.5
    assert engine.ran == ["F0", "F1", "B0", "B1", "step"]
    assert client.calls == ["step_begin", "begin forward", "end forward", "begin forward", "end forward",
                            "begin backward", "end backward", "begin backward", "end backward", "step_end"]


def test_deepspeed_evaluation_is_not_measured_and_detach_restores():
    engine, client = PipelineEngine(), Recorder(["forward", "forward", "backward", "backward"])
    attachment = deepspeed.attach(engine, client)
    assert engine.eval_batch() == 0.25 and client.calls == []
    attachment.detach()
    engine.train_batch()
    assert client.calls == [] and "_INSTRUCTION_MAP" not in vars(engine) and "train_batch" not in vars(engine)


def test_deepspeed_refuses_what_is_not_a_pipeline_engine():
    with pytest.raises(TypeError, match="not a DeepSpeed PipelineEngine.*_exec_backward_pass"):
        deepspeed.attach(types.SimpleNamespace(train_batch=lambda: None, _exec_forward_pass=lambda: None), Recorder())


def test_deepspeed_warns_when_the_schedule_cannot_be_the_engines():
    with pytest.warns(UserWarning, match="2 forwards per iteration but the engine runs 4 microbatches"):
        deepspeed.attach(PipelineEngine(micro_batches=4), Recorder(["forward", "forward", "backward", "backward"]))


def test_deepspeed_with_a_real_client_follows_the_schedule(serve):
    url = serve("TwoFrequencies", '{"forward_freq": 1110, "backward_freq": 990}')
    engine = PipelineEngine()
    with perseus.Client(rank=0, server_url=url, num_microbatches=2, report_every=1, nvml_library=FAKE_NVML,
                        pipe_schedule=["forward", "forward", "backward", "backward"], fail_open=False) as client:
        deepspeed.attach(engine, client)
        before = len(locked_clocks())
        for _ in range(3):  # rounds after the first begin with a switch-over iteration
            engine.train_batch()
        assert client.round == 2
    assert locked_clocks()[before:] == [1110, 990] * 3


# --- Megatron-LM: the schedules module calls forward_step / backward_step by name -------------------

def megatron_schedules():
    """A stand-in for megatron.core.pipeline_parallel.schedules: the schedule functions look
    forward_step and backward_step up in the module at call time, as Megatron's do."""
    module = types.ModuleType("schedules")
    module.ran = []

    def forward_step(forward_step_func, data_iterator, model, num_microbatches, input_tensor, *rest, **kwargs):
        module.ran.append("F")
        return forward_step_func(data_iterator, model)

    def backward_step(input_tensor, output_tensor, output_tensor_grad, model_type, config):
        module.ran.append("B")

    def forward_backward_pipelining_without_interleaving(*, forward_step_func, data_iterator, model,
                                                         num_microbatches, forward_only=False, **kwargs):
        for _ in range(num_microbatches):
            module.forward_step(forward_step_func, data_iterator, model, num_microbatches, None)
            if not forward_only:
                module.backward_step(None, None, None, None, None)
        return ["losses"]

    module.forward_step = forward_step
    module.backward_step = backward_step
    module.forward_backward_pipelining_without_interleaving = forward_backward_pipelining_without_interleaving
    return module


def test_megatron_schedule_call_is_a_step_of_measured_instructions():
    schedules, client = megatron_schedules(), Recorder()
    megatron.attach(client, schedules)
    result = schedules.forward_backward_pipelining_without_interleaving(
        forward_step_func=lambda data, model: "loss", data_iterator=None, model=None, num_microbatches=2)
    assert result == ["losses"] and schedules.ran == ["F", "B", "F", "B"]
    assert client.calls == ["step_begin"] + ["begin forward", "end forward", "begin backward", "end backward"] * 2 + [
        "step_end"]


def test_megatron_forward_only_is_not_measured_and_detach_restores():
    schedules, client = megatron_schedules(), Recorder()
    original = schedules.forward_step
    attachment = megatron.attach(client, schedules)
    schedules.forward_backward_pipelining_without_interleaving(
        forward_step_func=lambda data, model: "loss", data_iterator=None, model=None, num_microbatches=2,
        forward_only=True)
    assert schedules.ran == ["F", "F"] and client.calls == []
    attachment.detach()
    assert schedules.forward_step is original


def test_megatron_refuses_another_module():
    with pytest.raises(TypeError, match="not Megatron-LM's schedules module"):
        megatron.attach(Recorder(), types.ModuleType("schedules"))
