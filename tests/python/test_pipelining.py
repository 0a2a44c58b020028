"""perseus.torch.instrument_pipelining on PyTorch's own torch.distributed.pipelining, in this
process: the orders perseus registers against PyTorch's schedule generators for many shapes, and
the hooks' behaviour on real schedules of one pipeline rank (a world of one over gloo; the
multi-rank runs against `perseus serve` are test_pipelining_real.py)."""
import itertools
import os
import types

import pytest

from fakegpu import FAKE_NVML

if not os.environ.get("PERSEUS_REQUIRE_TORCH"):  # CI sets it: there, a missing torch is a failure
    pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from torch.distributed import pipelining  # noqa: E402
from torch.distributed.pipelining.schedules import B, F, OVERLAP_F_B, W, _Action  # noqa: E402

import perseus  # noqa: E402
import perseus.torch  # noqa: E402
from real_pipelining_rank import batch, build, digest  # noqa: E402

# PyTorch's schedule class -> perseus's schedule and the stages per rank it takes.
PERSEUS_NAME = {"Schedule1F1B": ("1f1b", (1,)), "ScheduleGPipe": ("gpipe", (1,)),
                "ScheduleInterleaved1F1B": ("interleaved", (2, 3)), "ScheduleInterleavedZeroBubble": ("zb-h1", (1,)),
                "ScheduleZBVZeroBubble": ("zbv", (2,)), "ScheduleDualPipeV": ("dualpipev", (2,))}


def generated(schedule_class, ranks, local, microbatches, rank):
    """PyTorch's own schedule for pipeline rank `rank` of `ranks`, built on stages that only say
    where they are (the constructors generate and lower the order without a process group)."""
    stages = [types.SimpleNamespace(group_size=ranks, group_rank=rank, num_stages=ranks * local, stage_index=i,
                                    submod=None) for i in range(local)]
    cls = getattr(pipelining, schedule_class)
    return cls(stages[0], microbatches) if local == 1 and schedule_class in ("Schedule1F1B", "ScheduleGPipe") \
        else cls(stages, microbatches)


@pytest.mark.parametrize("schedule_class", list(PERSEUS_NAME))
def test_the_order_perseus_registers_is_the_one_pytorch_generates(schedule_class):
    """For every shape PyTorch's schedule takes (1-5 ranks, 1-12 microbatches): the order the hooks
    register is the compute actions of PyTorch's order for the rank, and where perseus names a
    schedule for it, perseus.default_pipe_schedule gives that same order."""
    name, locals_ = PERSEUS_NAME[schedule_class]
    named = 0
    for ranks, microbatches, local in itertools.product(range(1, 6), range(1, 13), locals_):
        for rank in range(ranks):
            try:
                schedule = generated(schedule_class, ranks, local, microbatches, rank)
            except ValueError:  # a shape this schedule does not take
                break
            order = schedule.pipeline_order_with_comms if hasattr(schedule, "pipeline_order_with_comms") \
                else schedule.pipeline_order
            kinds = [perseus.torch.pipe_schedule_of(schedule)]
            assert kinds[0] == [perseus._pipelining.instruction_kind(a.computation_type) for a in order[rank]
                                if a is not None and a.is_compute_op]
            known = perseus.torch.perseus_schedule_of(schedule)
            if known is not None:
                assert known == (name, local)
                assert perseus.default_pipe_schedule(rank, ranks, microbatches, name, local) == kinds[0], \
                    (ranks, microbatches, local, rank)
                named += 1
    assert named >= 40


def test_schedules_perseus_names_none_for():
    """ScheduleInterleavedZeroBubble with several stages per rank (interleaved ZB1P), and
    ScheduleInterleaved1F1B with microbatches not a multiple of the ranks, run orders no perseus
    schedule plans."""
    assert perseus.torch.perseus_schedule_of(generated("ScheduleInterleavedZeroBubble", 2, 2, 4, 0)) is None
    assert perseus.torch.perseus_schedule_of(generated("ScheduleInterleaved1F1B", 2, 2, 3, 0)) is None
    dual = perseus.torch.pipe_schedule_of(generated("ScheduleDualPipeV", 2, 2, 6, 0))
    assert set(dual) == {"forward", "backward", "backward_input", "backward_weight", "forward_backward"}


class Recorder:
    """A client that records its hooks; it may be told to fail."""

    def __init__(self, pipe_schedule=(), fail_on=None, error=RuntimeError("the GPU fell off the bus")):
        self.pipe_schedule = list(pipe_schedule)
        self.enabled = True
        self.synchronize = None
        self.calls = []
        self.fail_on, self.error = fail_on, error
        self.closed = None

    def _hook(self, call):
        if self.fail_on is not None and call.startswith(self.fail_on):
            raise self.error
        self.calls.append(call)

    def on_step_begin(self):
        self._hook("step_begin")

    def on_step_end(self):
        self._hook("step_end")

    def on_instruction_begin(self, name):
        self._hook(f"begin {name}")

    def on_instruction_end(self, name):
        self._hook(f"end {name}")

    def close(self, finished=True):
        self.closed = finished


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A world of one process over gloo: every stage of a schedule on this rank."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('world') / 'store'}", rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


def one_rank(schedule_class, local=1, microbatches=4):
    schedule, modules, indices, stages, optimizer = build(
        {"schedule": schedule_class, "local": local, "microbatches": microbatches}, 0, 1)
    return schedule, modules, optimizer


def train(schedule, modules, optimizer, steps=2):
    """`steps` training steps; the losses of each and the parameters' digest at the end."""
    losses = []
    for step in range(steps):
        inputs, target = batch(step)
        losses.append([])
        schedule.step(inputs, target=target, losses=losses[-1])
        optimizer.step()
        optimizer.zero_grad()
    return [[loss.item() for loss in step] for step in losses], digest(modules)


def hook_calls(kinds):
    return ["step_begin"] + [c for k in kinds for c in (f"begin {k}", f"end {k}")] + ["step_end"]


@pytest.mark.parametrize("schedule_class,local", [("Schedule1F1B", 1), ("ScheduleGPipe", 1),
                                                  ("ScheduleInterleaved1F1B", 2), ("ScheduleInterleavedZeroBubble", 1),
                                                  ("ScheduleZBVZeroBubble", 2), ("ScheduleDualPipeV", 2)])
def test_each_compute_action_is_one_instruction_and_the_training_is_unchanged(world, schedule_class, local):
    bare = train(*one_rank(schedule_class, local))
    schedule, modules, optimizer = one_rank(schedule_class, local)
    client = Recorder(perseus.torch.pipe_schedule_of(schedule))
    pipelining = perseus.torch.instrument_pipelining(schedule, client=client)
    assert train(schedule, modules, optimizer) == bare
    assert client.calls == hook_calls(client.pipe_schedule) * 2 and pipelining.enabled


def test_single_stage_schedules_without_a_pipeline_order_get_perseus_order(world):
    """Schedule1F1B and ScheduleGPipe had no pipeline_order before PyTorch 2.8."""
    for schedule_class, name in (("Schedule1F1B", "1f1b"), ("ScheduleGPipe", "gpipe")):
        schedule, modules, optimizer = one_rank(schedule_class)
        schedule.pipeline_order = None
        order = perseus.default_pipe_schedule(0, 1, 4, schedule=name)
        assert perseus.torch.pipe_schedule_of(schedule) == order
        client = Recorder(order)
        perseus.torch.instrument_pipelining(schedule, client=client)
        train(schedule, modules, optimizer, steps=1)
        assert client.calls == hook_calls(order)


def weight_gradient(action, ctx):
    """A custom function for W actions: what PyTorch's runtime does for one."""
    schedule = ctx.schedule_ref
    stage = {s.stage_index: s for s in schedule._stages}[action.stage_index]
    schedule.backward_counter[action.stage_index] += 1
    stage.backward_weight_one_chunk(action.microbatch_index,
                                    last_backward=schedule.backward_counter[action.stage_index] == 4)


def test_a_custom_function_is_one_instruction_of_its_action(world):
    schedule, modules, optimizer = one_rank("ScheduleInterleavedZeroBubble")
    schedule.register_custom_function(W, weight_gradient)
    bare = train(schedule, modules, optimizer)

    schedule, modules, optimizer = one_rank("ScheduleInterleavedZeroBubble")
    schedule.register_custom_function(W, weight_gradient)  # before the hooks
    client = Recorder(perseus.torch.pipe_schedule_of(schedule))
    pipelining = perseus.torch.instrument_pipelining(schedule, client=client)
    assert train(schedule, modules, optimizer) == bare
    assert client.calls == hook_calls(client.pipe_schedule) * 2 and "begin backward_weight" in client.calls
    pipelining.detach()
    assert schedule._comp_type_to_function_map == {W: weight_gradient}

    later, modules, optimizer = one_rank("ScheduleInterleavedZeroBubble")
    client = Recorder(perseus.torch.pipe_schedule_of(later))
    later_pipelining = perseus.torch.instrument_pipelining(later, client=client)
    later.register_custom_function(W, weight_gradient)  # after the hooks
    assert train(later, modules, optimizer) == bare
    assert client.calls == hook_calls(client.pipe_schedule) * 2
    # Detaching leaves the schedule's own functions, those registered after the hooks too.
    later_pipelining.detach()
    assert later._comp_type_to_function_map == {W: weight_gradient} and "register_custom_function" not in vars(later)


def test_evaluation_is_not_measured_and_detach_restores(world):
    schedule, modules, optimizer = one_rank("Schedule1F1B")  # (PyTorch 2.15 cannot eval() a rank's adjacent stages)
    stage = schedule._stage
    client = Recorder(perseus.torch.pipe_schedule_of(schedule))
    pipelining = perseus.torch.instrument_pipelining(schedule, client=client)
    inputs, target = batch(0)
    schedule.eval(inputs, target=target)
    assert client.calls == []
    pipelining.detach()
    assert "step" not in vars(schedule) and "forward_one_chunk" not in vars(stage) and not pipelining.enabled
    train(schedule, modules, optimizer, steps=1)
    assert client.calls == []


@pytest.mark.parametrize("fail_on", ["step_begin", "begin backward_input", "end forward_backward", "step_end"])
def test_a_failing_hook_never_changes_the_training(world, fail_on):
    bare = train(*one_rank("ScheduleDualPipeV", 2))
    schedule, modules, optimizer = one_rank("ScheduleDualPipeV", 2)
    client = Recorder(perseus.torch.pipe_schedule_of(schedule), fail_on=fail_on)
    pipelining = perseus.torch.instrument_pipelining(schedule, client=client)
    hook = {"step_begin": "on_step_begin", "begin": "on_instruction_begin", "end": "on_instruction_end",
            "step_end": "on_step_end"}[fail_on.split()[0]]
    with pytest.warns(RuntimeWarning, match=f"perseus: {hook} failed \\(RuntimeError: the GPU fell off the bus\\).*"
                                            "training goes on") as caught:
        assert train(schedule, modules, optimizer) == bare
    assert len(caught) == 1
    # One warning, then the hooks stand aside: nothing after the failure reaches the client, which is closed.
    kinds = client.pipe_schedule
    assert client.calls == list(itertools.takewhile(lambda c: not c.startswith(fail_on), hook_calls(kinds)))
    assert client.closed is False and not pipelining.enabled


def gpipe_order(stages, microbatches):
    """All forwards through the rank's stages, then all backwards: an order PyTorch runs when told."""
    forwards = [_Action(s, F, m) for s in stages for m in range(microbatches)]
    return forwards + [_Action(s, B, m) for s in reversed(stages) for m in range(microbatches)]


def test_an_order_other_than_the_one_registered_turns_the_hooks_off(world):
    """The schedule's order changed after perseus read it: the clocks would land on the wrong
    actions, so the hooks stand aside at the first action out of order."""
    bare, modules, optimizer = one_rank("ScheduleInterleaved1F1B", 2)
    bare._prepare_schedule_with_comms({0: gpipe_order([0, 1], 4)})
    expected = train(bare, modules, optimizer)

    schedule, modules, optimizer = one_rank("ScheduleInterleaved1F1B", 2)
    client = Recorder(perseus.torch.pipe_schedule_of(schedule))
    pipelining = perseus.torch.instrument_pipelining(schedule, client=client)
    schedule._prepare_schedule_with_comms({0: gpipe_order([0, 1], 4)})
    with pytest.warns(RuntimeWarning, match=r"perseus: ScheduleInterleaved1F1B ran forward of microbatch 1 on stage 0 "
                                            r"where its order has 1F0 \(compute action 2\): not the order perseus "
                                            r"registered; the pipelining hooks stand aside") as caught:
        assert train(schedule, modules, optimizer) == expected
    assert len(caught) == 1 and client.closed is False and not pipelining.enabled
    assert client.calls == ["step_begin", "begin forward", "end forward"]


def test_pytorch_internals_perseus_does_not_know_turn_the_hooks_off(world, monkeypatch):
    bare = train(*one_rank("ScheduleZBVZeroBubble", 2))
    schedule, modules, optimizer = one_rank("ScheduleZBVZeroBubble", 2)
    # A release whose weight-gradient method names its microbatch otherwise: the hooks could not read it.
    original = pipelining.PipelineStage.backward_weight_one_chunk
    monkeypatch.setattr(pipelining.PipelineStage, "backward_weight_one_chunk",
                        lambda self, chunk, last_backward=False: original(self, chunk, last_backward))
    client = Recorder(perseus.torch.pipe_schedule_of(schedule))
    with pytest.warns(RuntimeWarning, match=r"PyTorch \S+'s torch.distributed.pipelining is not the way perseus knows "
                                            r"it \(PipelineStage.backward_weight_one_chunk takes \(chunk, "
                                            r"last_backward=False\), not \(bwd_chunk_id, ...\)\); the pipelining hooks "
                                            r"are off and ScheduleZBVZeroBubble trains without perseus") as caught:
        handle = perseus.torch.instrument_pipelining(schedule, client=client)
    assert len(caught) == 1 and not handle.enabled and client.closed is False
    assert train(schedule, modules, optimizer) == bare and client.calls == []



def test_perseus_signals_pass_through(world):
    schedule, modules, optimizer = one_rank("Schedule1F1B")
    client = Recorder(perseus.torch.pipe_schedule_of(schedule), fail_on="step_end",
                      error=perseus.ProfilingDone("[profiling-done]"))
    perseus.torch.instrument_pipelining(schedule, client=client)
    with pytest.raises(perseus.ProfilingDone):
        train(schedule, modules, optimizer, steps=1)


def test_a_client_with_another_order_is_warned_about(world):
    schedule, _, _ = one_rank("ScheduleZBVZeroBubble", 2)
    with pytest.warns(UserWarning, match=r"not the order ScheduleZBVZeroBubble runs on rank 0 \(first difference at "
                                         r"instruction 1: backward registered, forward run\)"):
        perseus.torch.instrument_pipelining(schedule, client=Recorder(perseus.default_pipe_schedule(0, 1, 4)))


def test_refuses_what_is_not_a_schedule():
    with pytest.raises(TypeError, match="not a torch.distributed.pipelining schedule"):
        perseus.torch.instrument_pipelining(object(), client=Recorder())
    schedule = generated("Schedule1F1B", 2, 1, 4, 0)
    with pytest.raises(TypeError, match=r"client options \(server_url\) given with a client"):
        perseus.torch.instrument_pipelining(schedule, client=Recorder(), server_url="http://x")


def test_perseus_torch_makes_the_client_from_the_schedule(world, serve):
    url = serve("AllMaxFrequency")
    schedule, modules, optimizer = one_rank("ScheduleDualPipeV", 2)
    with perseus.torch.instrument_pipelining(schedule, server_url=url, nvml_library=FAKE_NVML, fail_open=False,
                                             model_name="gpt") as pipelining:
        assert isinstance(pipelining.client, perseus.torch.Client)
        assert pipelining.client.job_id.endswith("+gpt+uniform+dp1+pp1+tp1+mbs1+nmb4+AllMaxFrequency")
        assert pipelining.client.pipe_schedule == perseus.default_pipe_schedule(0, 1, 4, "dualpipev", 2)
        assert pipelining.perseus_schedule == ("dualpipev", 2)
        train(schedule, modules, optimizer, steps=1)
    assert not pipelining.client.enabled  # closed, clocks reset


# Every perseus schedule: (name, virtual stages, shapes (ranks, microbatches) it takes).
PERSEUS_SCHEDULES = [("1f1b", 1, [(2, 4), (3, 6), (4, 8)]), ("gpipe", 1, [(2, 4), (3, 6)]),
                     ("interleaved", 2, [(2, 4), (4, 8)]), ("interleaved", 3, [(2, 6)]),
                     ("zb-h1", 1, [(2, 4), (3, 6), (4, 8)]), ("zbv", 2, [(2, 4), (3, 4), (4, 8)]),
                     ("dualpipev", 2, [(2, 4), (3, 6), (4, 8)])]


@pytest.mark.parametrize("name,local,shapes", PERSEUS_SCHEDULES, ids=lambda v: str(v) if not isinstance(v, list) else "")
def test_default_pipe_schedule_gives_every_ranks_order(name, local, shapes):
    for ranks, microbatches in shapes:
        for rank in range(ranks):
            names = perseus.default_pipe_schedule(rank, ranks, microbatches, schedule=name, virtual_stages=local)
            count = names.count
            work = microbatches * local  # forwards and backwards of each local model chunk
            assert count("forward") + count("forward_backward") == work, (name, rank, names)
            assert count("backward") + count("backward_input") + count("forward_backward") == work, (name, rank)
            assert count("backward_weight") == count("backward_input")
            assert set(names) <= {"forward", "backward", "backward_input", "backward_weight", "forward_backward"}
            assert names[0] == "forward"
        with pytest.raises(ValueError):
            perseus.default_pipe_schedule(ranks, ranks, microbatches, schedule=name, virtual_stages=local)
