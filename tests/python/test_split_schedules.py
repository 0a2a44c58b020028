"""The split-backward schedules through the Python package: each rank's order names the split kinds."""
import perseus


def test_default_pipe_schedule_names_the_zero_bubble_parts():
    assert perseus.default_pipe_schedule(0, 2, 2, schedule="zb-h1") == [
        "forward", "forward", "backward_input", "backward_weight", "backward_input", "backward_weight"]
    # The last stage holds back its first weight-gradient part: it fills the cool-down.
    assert perseus.default_pipe_schedule(1, 2, 2, schedule="zb-h1") == [
        "forward", "backward_input", "forward", "backward_input", "backward_weight", "backward_weight"]


def test_default_pipe_schedule_covers_the_v_schedules():
    for schedule in ("zbv", "dualpipev"):
        for rank in range(2):
            names = perseus.default_pipe_schedule(rank, 2, 4, schedule=schedule)
            forwards = names.count("forward") + names.count("forward_backward")
            assert forwards == 8, (schedule, rank, names)  # 4 microbatches through 2 chunks
    assert "forward_backward" in perseus.default_pipe_schedule(0, 2, 4, schedule="dualpipev")
