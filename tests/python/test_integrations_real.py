"""The framework integrations on the real frameworks' own pipeline code (real_frameworks_rank.py),
two pipeline ranks in two processes over gloo on the CPU, against `perseus serve --scheduler
TwoFrequencies` on the fake NVML: megatron-core's 1F1B and interleaved 1F1B through
`get_forward_backward_func()` (its GPU tensors made on the CPU, the one stand-in), DeepSpeed's
`PipelineEngine` on its CPU accelerator, and the schedule torchtitan builds from its configuration
with perseus turned on through torchtitan's overrides. For each: the training is bit-identical to
the same run without perseus, the instructions the client got are the ones the framework
recorded running, in order, and each ran at its planned clock."""
import json
import os

import pytest

from fakegpu import BINARY
from rank_group import clocks_per_step, gpu_reads, measured_per_step, run_group, truth_per_step
from serve_process import start_serve, stop_all

if not os.environ.get("PERSEUS_REQUIRE_TORCH"):  # CI sets it: there, a missing torch is a failure
    pytest.importorskip("torch")

pytestmark = pytest.mark.multiprocess

RANKS, MICROBATCHES, STEPS = 2, 4, 3
FORWARD_CLOCK, BACKWARD_CLOCK = 1200, 1005
# (name, framework, extra run settings, the perseus order each rank registers)
FRAMEWORKS = [
    ("megatron 1f1b", "megatron", {}, ("1f1b", 1)),
    ("megatron interleaved", "megatron", {"virtual": 2}, ("interleaved", 2)),
    ("deepspeed", "deepspeed", {}, ("1f1b", 1)),
    ("torchtitan", "torchtitan", {"schedule": "ZBVZeroBubble"}, ("zbv", 2)),
]


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    out = tmp_path_factory.mktemp("real-frameworks")
    server, url = start_serve(BINARY, out / "dump", "TwoFrequencies",
                              json.dumps({"forward_freq": FORWARD_CLOCK, "backward_freq": BACKWARD_CLOCK}))
    runs = []
    for name, framework, extra, _ in FRAMEWORKS:
        run = dict(extra, framework=framework, microbatches=MICROBATCHES, steps=STEPS, server=url)
        runs += [dict(run, name=f"{name} bare", mode="bare"), dict(run, name=name, mode="hooked")]
    try:
        return run_group("real_frameworks_rank.py", out, RANKS, runs)
    finally:
        stop_all([server])


@pytest.mark.parametrize("name,framework,extra,order", FRAMEWORKS, ids=[f[0] for f in FRAMEWORKS])
def test_the_integration_measures_and_clocks_what_the_framework_ran_and_changes_nothing(group, name, framework,
                                                                                       extra, order):
    for rank, (hooked, bare) in enumerate(zip(group[name], group[f"{name} bare"])):
        assert hooked["losses"] == bare["losses"] and hooked["digest"] == bare["digest"], rank
        assert hooked["enabled"], rank
        truth = truth_per_step(hooked) if framework == "torchtitan" else hooked["truth"]
        assert measured_per_step(hooked) == truth == [hooked["pipe_schedule"]] * STEPS, rank
        import perseus  # the order is perseus's own for the schedule the framework ran
        assert hooked["pipe_schedule"] == perseus.default_pipe_schedule(rank, RANKS, MICROBATCHES, *order)
        planned = [FORWARD_CLOCK if kind == "forward" else BACKWARD_CLOCK for kind in hooked["pipe_schedule"]]
        assert clocks_per_step(hooked) == [planned] * STEPS, rank
        assert gpu_reads(hooked)[1], f"rank {rank}: the GPU was left at locked clocks"
    last = group[name][-1] if framework != "torchtitan" else group[name][0]  # (ZBV's last stage is on rank 0)
    assert all(losses for losses in last["losses"])


def test_torchtitan_names_the_schedule_it_built(group):
    assert all(record["perseus_schedule"] == ["zbv", 2] for record in group["torchtitan"])


@pytest.mark.parametrize("name", ["megatron 1f1b", "megatron interleaved", "deepspeed"])
def test_evaluation_is_not_measured_and_detach_puts_the_framework_back(group, name):
    for record in group[name]:
        assert record["evaluation_calls"] == 0 and record["restored"]


def test_deepspeed_warns_about_a_client_whose_order_has_other_microbatches(group):
    for record in group["deepspeed"]:
        assert record["warnings"] == [f"perseus: the client's pipe schedule has 2 forwards per iteration but the "
                                      f"engine runs {MICROBATCHES} microbatches; pass num_microbatches="
                                      "engine.micro_batches"]
