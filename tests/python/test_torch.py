"""perseus.torch: the client's defaults from torch.distributed and CUDA."""
import os

import pytest

from fakegpu import FAKE_NVML

if not os.environ.get("PERSEUS_REQUIRE_TORCH"):  # CI sets it: there, a missing torch is a failure
    pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import perseus.torch  # noqa: E402


# nvml_device_index and the CUDA device a client drives: test_energy_monitoring.py (on 4 fake GPUs).


def test_defaults_without_torch_distributed(serve):
    url = serve("AllMaxFrequency")
    with perseus.torch.Client(server_url=url, pp_degree=1, nvml_library=FAKE_NVML, fail_open=False) as client:
        assert client.enabled and client.synchronize is None  # no CUDA here
        assert client.job_id.endswith("+dp1+pp1+tp1+mbs1+nmb1+AllMaxFrequency")


def test_rank_and_world_come_from_torch_distributed(serve, tmp_path):
    url = serve("AllMaxFrequency")
    # A file store, not a TCP port: a free port found beforehand may be taken by then (EADDRINUSE).
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'world'}", rank=0, world_size=1)
    try:
        with perseus.torch.Client(server_url=url, nvml_library=FAKE_NVML, fail_open=False,
                                  num_microbatches=2) as client:
            assert client.enabled
            assert client.pipe_schedule == ["forward", "backward", "forward", "backward"]
        assert perseus.torch.broadcast_job_id("job-7") == "job-7"  # the collective, on a world of one
    finally:
        dist.destroy_process_group()
