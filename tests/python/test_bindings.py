"""The Python module (`import perseus`) against a real `perseus serve` and the fake NVML."""
import re
import time

import pytest

from fakegpu import FAKE_NVML, locked_clocks

import perseus


def test_hooks_apply_the_schedule(serve):
    url = serve("TwoFrequencies", '{"forward_freq": 1200, "backward_freq": 1005}')
    seen = []
    client = perseus.Client(rank=0, server_url=url, num_microbatches=2, report_every=1, nvml_library=FAKE_NVML,
                            broadcast_job_id=lambda job_id: seen.append(job_id) or job_id, fail_open=False)
    # Rank 0 registered with a secret, which travels with the id to the other ranks.
    assert re.fullmatch(r"[0-9a-f]{32}", client.job_secret)
    assert seen == [client.job_id + "\n" + client.job_secret]
    assert re.match(r"\d{4}(-\d\d){5}\+perseus\+model\+uniform\+dp1\+pp1\+tp1\+mbs1\+nmb2\+TwoFrequencies$",
                    client.job_id)
    assert client.pipe_schedule == ["forward", "backward", "forward", "backward"]
    assert client.schedule == [1200, 1005, 1200, 1005]
    before = len(locked_clocks())
    client.on_step_begin()
    for name in client.pipe_schedule:
        client.on_instruction_begin(name)
        time.sleep(0.002)
        client.on_instruction_end(name)
    client.on_step_end()
    assert client.round == 1
    client.flush()  # the controller thread applied every clock change
    assert locked_clocks()[before:] == [1200, 1005, 1200, 1005]
    client.close()
    assert not client.enabled


def test_profiling_done_is_a_python_exception(serve, tmp_path):
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "freqs_pipeline_00000.py").write_text("[[1200, 1200, 1005, 1005]]\n")
    url = serve("PointSolution", f'{{"solution_path": "{plans}", "warmup_iters": 0}}')
    with perseus.Client(rank=0, server_url=url, num_microbatches=2, report_every=1, nvml_library=FAKE_NVML,
                        fail_open=False) as client:
        client.on_step_begin()
        client.on_step_end()  # the round's result goes out; the server's answer comes in the background
        assert client.wait_for_server(10)
        client.on_step_begin()
        with pytest.raises(perseus.ProfilingDone, match=r"\[profiling-done\]"):
            client.on_step_end()
        assert issubclass(perseus.ProfilingDone, RuntimeError)


def test_strict_schedule_raises_schedule_mismatch(serve):
    url = serve("TwoFrequencies", '{"forward_freq": 1200, "backward_freq": 1005}')
    with perseus.Client(rank=0, server_url=url, num_microbatches=2, report_every=1, nvml_library=FAKE_NVML,
                        fail_open=False, strict_schedule=True) as client:
        client.on_step_begin()
        client.on_instruction_begin("forward")
        client.on_instruction_end("forward")
        with pytest.raises(perseus.ScheduleMismatch, match="instruction 2 is 'forward' where 'backward' was"):
            client.on_instruction_begin("forward")
        assert not client.enabled
        assert issubclass(perseus.ScheduleMismatch, RuntimeError)


def test_unreachable_server_leaves_training_alone():
    # retry_for=0: no retrying a server that does not answer (by default the client retries it in
    # the background while training starts at default clocks)
    client = perseus.Client(rank=0, server_url="http://127.0.0.1:1", nvml_library=FAKE_NVML, retry_for=0)
    assert not client.enabled
    client.on_step_begin()
    client.on_instruction_begin("forward")
    client.on_instruction_end("forward")
    client.on_step_end()
    with pytest.raises(RuntimeError):
        perseus.Client(rank=0, server_url="http://127.0.0.1:1", nvml_library=FAKE_NVML, fail_open=False, retry_for=0)


def test_default_schedule_and_clock_listing():
    assert perseus.default_pipe_schedule(0, 2, 3) == ["forward", "forward", "backward", "forward", "backward",
                                                      "backward"]
    clocks = perseus.gpu_clocks(0, FAKE_NVML)
    assert clocks[0] == 1410 and clocks[-1] == 210


def job_status(url, job_id):
    import json
    import urllib.parse
    import urllib.request
    with urllib.request.urlopen(f"{url}/jobs/{urllib.parse.quote(job_id, safe='')}", timeout=5) as reply:
        return json.load(reply)


def test_leaving_the_with_block_tells_the_server_whether_training_finished(serve):
    url = serve("AllMaxFrequency")
    with perseus.Client(rank=0, server_url=url, num_microbatches=2, report_every=1, nvml_library=FAKE_NVML,
                        fail_open=False) as client:
        client.on_step_begin()
        client.on_step_end()
    done = job_status(url, client.job_id)
    assert done["phase"] == "done", done
    assert "training finished" in done["end_detail"]

    with pytest.raises(ValueError):
        with perseus.Client(rank=0, server_url=url, num_microbatches=2, nvml_library=FAKE_NVML,
                            fail_open=False) as failing:
            raise ValueError("the training loop broke")
    failed = job_status(url, failing.job_id)
    assert failed["phase"] == "failed", failed
    assert "training stopped with an error" in failed["end_detail"]
