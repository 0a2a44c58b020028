"""Fixtures of the Python tests: a real `perseus serve` on a free port."""
import pytest

from fakegpu import BINARY
from serve_process import start_serve, stop_all


def pytest_configure(config):
    config.addinivalue_line("markers", "multiprocess: starts a group of training-rank processes on the real "
                            "frameworks (scripts/test_python_package.sh leaves them out: the build tree's run has "
                            "them, on the same Python files)")
    config.addinivalue_line("markers", "side_by_side: runs Zeus's or lowtime's own code beside perseus's on the same "
                            "trace, profile or documented command (scripts/test_python_package.sh leaves them out: "
                            "they compare behaviour, which the build tree's run checks on the same Python files)")


@pytest.fixture
def serve(tmp_path):
    """Starts `perseus serve` with the given scheduler; yields a function that returns its URL."""
    procs = []

    def start(scheduler, args="{}"):
        proc, url = start_serve(BINARY, tmp_path / "dump", scheduler, args)
        procs.append(proc)
        return url

    yield start
    stop_all(procs)
