"""The README's shell snippets run as written (against the build tree, from a scratch folder in
which `build` is the CTest build): a snippet that rots, or never ends, fails here."""
import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from fakegpu import BINARY

ROOT = Path(__file__).resolve().parents[2]


def snippet(after_heading):
    """The first indented code block under the README heading `after_heading`."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(after_heading):]
    match = re.search(r"\n\n((?:    .*\n)+)", section)
    assert match, f"no code block under {after_heading!r}"
    return "\n".join(line[4:] for line in match.group(1).splitlines())


@pytest.fixture
def scratch(tmp_path):
    """A folder whose `build` is the build tree of the binary under test."""
    if not os.environ.get("PERSEUS_BINARY"):
        pytest.skip("the README's snippets use the build tree; this run tests an installed package")
    build = Path(os.environ["PERSEUS_BINARY"]).resolve().parents[1]
    (tmp_path / "build").symlink_to(build)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path


def run_snippet(script, cwd, timeout):
    """Runs a snippet with bash as a user pasting it would (no -e), in its own process group, which is killed afterwards: whatever it
    left running (a server in the background) cannot outlive the test or keep it waiting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERSEUS_FAKE_NVML")}
    with open(cwd / "snippet.out", "w+") as out:
        proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        out.seek(0)
        return code, out.read()


def test_trying_it_without_a_gpu_ends_with_a_profile(scratch):
    code, output = run_snippet(snippet("### Trying it without a GPU"), scratch, timeout=180)
    assert code == 0, f"exit {code} (None: still running after 180 s):\n{output[-3000:]}"
    (info,) = scratch.glob("dump/*/profile_info.json")
    assert json.loads(info.read_text())["p_block_watts"] > 0
    assert (scratch / "gpu0.log").exists() and (scratch / "gpu1.log").exists()


def test_zeus_docs_server_command_runs_as_written(scratch):
    """The README's line for Zeus users (Zeus's documented command with perseus serve), as written,
    with a Zeus-format plan at the path it names."""
    text = (ROOT / "README.md").read_text()
    (command,) = [line for line in text.splitlines() if line.startswith("ZEUS_PFO_SCHEDULER_ARGS=")]
    plan = scratch / "path" / "to" / "freqs_pipeline_00042.py"
    plan.parent.mkdir(parents=True)
    plan.write_text("[\n[('forward', 1410), ('backward', 1395)],\n]\n# Iteration 42 cost change: 0.0\n")
    path = f"{Path(BINARY).resolve().parent}:{os.environ['PATH']}"
    code, output = run_snippet(f"export PATH='{path}'\n{command}", scratch, timeout=3)
    assert code is None, f"the server stopped (exit {code}):\n{output}"
    assert "listening on http://127.0.0.1:7787 (scheduler PointSolution" in output, output


def test_turnkey_in_one_minute_deploys_and_follows_the_straggler(scratch):
    code, output = run_snippet(snippet("## Turnkey in one minute"), scratch, timeout=120)
    assert code == 0, f"exit {code} (None: still running after 120 s):\n{output[-3000:]}"
    assert "server: done (Perseus), round 120, saving 17." in output, output[-3000:]
    assert "  deployed: saving 17." in output, output[-3000:]
    (decisions,) = scratch.glob("turnkey/*/decisions.json")
    events = [d["event"] for d in json.loads(decisions.read_text())]
    assert "straggler detected" in events and "straggler recovered" in events, events
