"""The framework integrations refuse what is not their framework, without importing it (the
integrations on the frameworks themselves: test_integrations_real.py)."""
import types

import pytest

from perseus.integrations import deepspeed, megatron


class Client:
    pipe_schedule = ["forward", "backward"]
    enabled = True


def test_deepspeed_refuses_what_is_not_a_pipeline_engine():
    with pytest.raises(TypeError, match="not a DeepSpeed PipelineEngine.*_exec_backward_pass"):
        deepspeed.attach(types.SimpleNamespace(train_batch=lambda: None, _exec_forward_pass=lambda: None), Client())


def test_megatron_refuses_another_module():
    with pytest.raises(TypeError, match="not Megatron-LM's schedules module"):
        megatron.attach(Client(), types.ModuleType("schedules"))
