"""`perseus gpud --metrics-address`: Prometheus' own text parser reads its /metrics, and the GPU a
client locked is the one it shows locked."""
import json
import socket
import urllib.request

import pytest

from fakegpu import BINARY, FAKE_NVML
from serve_process import start_gpud_metrics

parser = pytest.importorskip("prometheus_client.parser", reason="Debian's python3-prometheus-client is not installed")


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as reply:
        assert reply.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        return {family.name: family for family in parser.text_string_to_metric_families(reply.read().decode())}


def by_gpu(family):
    return {sample.labels["gpu"]: sample.value for sample in family.samples}


def test_prometheus_parses_gpud_metrics(tmp_path):
    assert BINARY, "no perseus binary: set PERSEUS_BINARY or put perseus on PATH"
    sock = str(tmp_path / "gpud.sock")
    proc, url = start_gpud_metrics(BINARY, FAKE_NVML, sock)
    try:
        families = scrape(url)
        assert all(name.startswith("perseus_gpud_") for name in families)
        assert families["perseus_gpud_energy_joules"].type == "counter"  # the parser drops _total
        assert by_gpu(families["perseus_gpud_gpu_owned"]) == {"0": 0, "1": 0}
        assert by_gpu(families["perseus_gpud_power_limit_watts"]) == {"0": 400, "1": 400}
        assert families["perseus_gpud_gpu_owned"].samples[1].labels["uuid"].startswith("GPU-")

        with socket.socket(socket.AF_UNIX) as client:  # a client of gpud's protocol locks GPU 1
            client.connect(sock)
            client.sendall(json.dumps({"op": "lock_graphics_clock", "device": 1, "min": 1200, "max": 1200}).encode() + b"\n")
            assert json.loads(client.makefile().readline()) == {"ok": True, "value": None}
            families = scrape(url)
            assert by_gpu(families["perseus_gpud_locked_graphics_clock_megahertz"]) == {"1": 1200}
            assert by_gpu(families["perseus_gpud_gpu_owned"]) == {"0": 0, "1": 1}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
