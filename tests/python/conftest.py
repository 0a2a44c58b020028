"""Fixtures of the Python tests: a real `perseus serve` on a free port."""
import re
import subprocess

import pytest

from fakegpu import BINARY


@pytest.fixture
def serve(tmp_path):
    """Starts `perseus serve` with the given scheduler; yields a function that returns its URL."""
    procs = []

    def start(scheduler, args="{}"):
        assert BINARY, "no perseus binary: set PERSEUS_BINARY or put perseus on PATH"
        proc = subprocess.Popen(
            [BINARY, "serve", "--port", "0", "--dump-dir", str(tmp_path / "dump"), "--scheduler", scheduler,
             "--scheduler-args", args],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(proc)
        line = proc.stdout.readline()
        port = re.search(r"127\.0\.0\.1:(\d+)", line)
        assert port, f"no ready line: {line!r}"
        return f"http://127.0.0.1:{port.group(1)}"

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)
