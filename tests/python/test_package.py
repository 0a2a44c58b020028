"""The installed shape of the `perseus` package: version, help text, docstrings, the command, the
schedules, and the context managers around the hooks."""
import inspect
import os
import pydoc
import subprocess
import sys

import pytest

from fakegpu import BINARY, FAKE_NVML, locked_clocks

import perseus
import perseus.integrations.deepspeed
import perseus.integrations.megatron
import perseus.torch

PUBLIC_MODULES = [perseus, perseus.torch, perseus.integrations.deepspeed, perseus.integrations.megatron]


def test_version_is_the_projects():
    assert perseus.__version__.count(".") == 2
    out = subprocess.run([BINARY, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"perseus {perseus.__version__}"


def test_the_perseus_command_runs_the_bundled_binary():
    out = subprocess.run([sys.executable, "-m", "perseus", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"perseus {perseus.__version__}"
    bad = subprocess.run([sys.executable, "-m", "perseus", "optimize", "--no-such-flag"], capture_output=True)
    assert bad.returncode == 64  # the binary's own exit code comes through


def test_help_shows_real_argument_names():
    text = pydoc.render_doc(perseus.Client, renderer=pydoc.plaintext)
    assert "arg0" not in text
    for signature in ("rank: int", "pp_degree: int = 1", "server_url: str = 'http://127.0.0.1:7787'",
                      "broadcast_job_id: object = None", "fail_open: bool = True",
                      "on_instruction_begin(self: perseus._perseus.Client, name: str)", "instruction(self, name: 'str')"):
        assert signature in text, signature
    for argument in ("rank", "dp_rank", "pp_rank", "tp_rank", "device", "report_every", "request_timeout"):
        assert f"    {argument}: " in text, f"argument {argument} is not described"
    assert "arg0" not in pydoc.render_doc(perseus.default_pipe_schedule, renderer=pydoc.plaintext)


def public_members():
    for module in PUBLIC_MODULES:
        yield module.__name__, module
        for name, member in vars(module).items():
            if name.startswith("_") or getattr(member, "__module__", module.__name__) not in (
                    module.__name__, "perseus._perseus"):
                continue
            if inspect.isclass(member) or inspect.isroutine(member):
                yield f"{module.__name__}.{name}", member
            if inspect.isclass(member):
                for attribute, value in vars(member).items():
                    if not attribute.startswith("_") and (inspect.isroutine(value) or isinstance(value, property)
                                                          or type(value).__name__ == "instancemethod"):
                        yield f"{module.__name__}.{name}.{attribute}", value


@pytest.mark.parametrize("name,member", list(public_members()), ids=lambda value: value if isinstance(value, str) else "")
def test_every_public_name_has_a_docstring(name, member):
    assert (member.__doc__ or "").strip(), f"{name} has no docstring"


def test_type_stubs_ship_with_the_package():
    folder = os.path.dirname(perseus.__file__)
    assert os.path.exists(os.path.join(folder, "py.typed"))
    assert os.path.exists(os.path.join(folder, "_perseus.pyi"))


@pytest.mark.parametrize("schedule,expected", [
    ("1f1b", ["forward", "forward", "backward", "forward", "backward", "backward"]),
    ("gpipe", ["forward", "forward", "forward", "backward", "backward", "backward"]),
], ids=["1f1b", "gpipe"])
def test_default_pipe_schedule(schedule, expected):
    assert perseus.default_pipe_schedule(0, 2, 3, schedule=schedule) == expected


def test_default_pipe_schedule_interleaved_is_megatrons_order():
    # Stage 1 of 2, 2 chunks, 2 microbatches: F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 B0c0 B1c0.
    assert perseus.default_pipe_schedule(1, 2, 2, schedule="interleaved", virtual_stages=2) == [
        "forward", "forward", "forward", "backward", "forward", "backward", "backward", "backward"]
    with pytest.raises(ValueError, match="multiple of the stages"):
        perseus.default_pipe_schedule(0, 2, 3, schedule="interleaved", virtual_stages=2)


def test_default_pipe_schedule_rejects_bad_input():
    with pytest.raises(ValueError, match="1f1b, gpipe, interleaved, zb-h1, zbv, dualpipev"):
        perseus.default_pipe_schedule(0, 2, 3, schedule="zigzag")
    with pytest.raises(ValueError, match="stage"):
        perseus.default_pipe_schedule(2, 2, 3)


def test_context_managers_drive_the_hooks(serve):
    url = serve("TwoFrequencies", '{"forward_freq": 1200, "backward_freq": 1005}')
    calls = []
    with perseus.Client(rank=0, server_url=url, num_microbatches=2, report_every=1, nvml_library=FAKE_NVML,
                        fail_open=False) as client:
        client.synchronize = lambda: calls.append("sync")
        before = len(locked_clocks())
        with client.step():
            for name in client.pipe_schedule:
                with client.instruction(name):
                    calls.append(name)
        assert client.round == 1  # the step's end reported the round
        client.flush()  # the controller thread applied every clock change
        assert locked_clocks()[before:] == [1200, 1005, 1200, 1005]
        assert calls == ["sync", "forward", "sync", "sync", "backward", "sync"] * 2
    assert not client.enabled  # leaving the with block closed it


def test_a_step_that_raises_is_not_reported(serve):
    url = serve("AllMaxFrequency")
    with perseus.Client(rank=0, server_url=url, report_every=1, nvml_library=FAKE_NVML, fail_open=False) as client:
        with pytest.raises(KeyError):
            with client.step():
                raise KeyError("training failed")
        assert client.round == 0


def test_the_fake_nvml_ships_with_the_package():
    assert os.path.exists(perseus.fake_nvml_library())
    assert perseus.gpu_clocks(0, perseus.fake_nvml_library())[0] == 1410
