"""The hooks take every instruction kind a schedule runs: a zero-bubble rank's backward_input and
backward_weight parts and a DualPipeV rank's overlapped forward_backward pairs get their clocks and are
measured like forwards and backwards."""
import time

from fakegpu import FAKE_NVML, locked_clocks

import perseus


def run_one_round(url, schedule, stages=1, microbatches=2):
    names = perseus.default_pipe_schedule(0, stages, microbatches, schedule=schedule)
    client = perseus.Client(rank=0, server_url=url, num_microbatches=microbatches, report_every=1,
                            nvml_library=FAKE_NVML, pipe_schedule=names, fail_open=False)
    before = len(locked_clocks())
    client.on_step_begin()
    for name in names:
        client.on_instruction_begin(name)
        time.sleep(0.001)
        client.on_instruction_end(name)
    client.on_step_end()
    client.flush()
    applied = locked_clocks()[before:]
    result = (client.pipe_schedule, client.schedule, client.round, client.enabled)
    client.close()
    return names, applied, result


def test_split_parts_get_their_clocks(serve):
    url = serve("TwoFrequencies", '{"forward_freq": 1200, "backward_freq": 1005}')
    names, applied, (registered, schedule, rounds, enabled) = run_one_round(url, "zb-h1")
    assert sorted(set(names)) == ["backward_input", "backward_weight", "forward"]
    assert registered == names
    # Every part of a backward is a backward to TwoFrequencies.
    assert schedule == [1200 if name == "forward" else 1005 for name in names]
    assert rounds == 1 and enabled
    assert 1005 in applied and 1200 in applied


def test_overlapped_pairs_get_their_clocks(serve):
    url = serve("TwoFrequencies", '{"forward_freq": 1200, "backward_freq": 1005}')
    names, applied, (registered, schedule, rounds, enabled) = run_one_round(url, "dualpipev", stages=1, microbatches=4)
    assert "forward_backward" in names and "backward_input" in names
    assert registered == names
    assert schedule == [1200 if name == "forward" else 1005 for name in names]
    assert rounds == 1 and enabled
