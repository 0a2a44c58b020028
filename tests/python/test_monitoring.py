"""Monitoring as Prometheus and Grafana see it: `perseus serve`'s GET /metrics read with the
Prometheus client library's own parser, and the shipped dashboard and scrape configuration
checked against what the server exports."""
import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from fakegpu import BINARY

parser = pytest.importorskip("prometheus_client.parser", reason="python3-prometheus-client (scripts/setup.sh) is not installed")

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "examples" / "gpt3-175b-a100.csv"


def get(url):
    with urllib.request.urlopen(url, timeout=30) as reply:
        return reply.read().decode()


def families(text):
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


@pytest.fixture
def turnkey_run(serve):
    """A turnkey job run to its end by `perseus simulate` (2 pipelines); (server URL, job id, reports)."""
    if not PROFILE.exists():
        pytest.skip(f"{PROFILE} is not shipped here")
    url = serve("Perseus", json.dumps({"wait_for_plan": True}))
    out = subprocess.run([BINARY, "simulate", str(PROFILE), "--stages", "8", "--microbatches", "12", "--p2p-power", "83.64",
                          "--pipelines", "2", "--iterations", "300", "--report-every", "1", "--server", url, "--json"],
                         check=True, capture_output=True, text=True, timeout=300).stdout.splitlines()
    reports = [json.loads(line)["report"] for line in out if line.startswith('{"report"')]
    job_id = json.loads(out[-1])["summary"]["job_id"]
    return url, job_id, reports


def test_metrics_parse_with_prometheus_own_parser_and_agree_with_the_job_status(turnkey_run):
    url, job_id, reports = turnkey_run
    found = families(get(url + "/metrics"))
    perseus_families = [name for name in found if name.startswith("perseus_")]
    assert len(perseus_families) >= 10, perseus_families
    status = json.loads(get(url + "/jobs/" + urllib.request.quote(job_id, safe="")))

    def job_sample(family, sample_name=None):
        for s in found[family].samples:
            if s.labels.get("job_id") == job_id and (sample_name is None or s.name == sample_name):
                return s.value
        raise AssertionError(f"no {family} sample for the job")

    assert job_sample("perseus_job_saving_ratio") == status["saving"]
    assert job_sample("perseus_job_slowdown_ratio") == status["slowdown"]
    # Energy saved: (baseline - measured energy per iteration) x the deployed iterations (the run's last).
    deployed = status["deployed_iterations"]
    assert 50 < deployed <= len(reports)
    expected = status["baseline"]["energy"] * deployed - sum(r["energy"] for r in reports[-deployed:])
    saved = job_sample("perseus_job_energy_saved_joules", "perseus_job_energy_saved_joules_total")
    assert expected > 0
    assert saved == pytest.approx(expected, rel=0.01)
    assert found["perseus_job_energy_saved_joules"].type == "counter"
    assert found["perseus_http_request_duration_seconds"].type == "histogram"


def exported_sample_names(text):
    names = set()
    for family in parser.text_string_to_metric_families(text):
        names.add(family.name)
        names.update(s.name for s in family.samples)
    return names


def test_the_dashboard_queries_only_metrics_perseus_exports(turnkey_run):
    url, _, _ = turnkey_run
    exported = exported_sample_names(get(url + "/metrics"))
    exported |= exported_sample_names(gpud_metrics_text())
    dashboard = json.loads((ROOT / "docs" / "monitoring" / "grafana-dashboard.json").read_text())
    queried = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            queried.update(re.findall(r"\b(perseus_[a-z_]+)", target["expr"]))
    assert queried, "the dashboard queries nothing"
    assert queried <= exported, queried - exported


def gpud_metrics_text():
    """gpud's GET /metrics on the fake NVML (2 GPUs, one with its clock locked by a client)."""
    import socket
    import tempfile

    from fakegpu import FAKE_NVML
    from serve_process import start_gpud_metrics
    with tempfile.TemporaryDirectory() as tmp:
        sock = tmp + "/gpud.sock"
        proc, url = start_gpud_metrics(BINARY, FAKE_NVML, sock)
        try:
            with socket.socket(socket.AF_UNIX) as client:  # so that the lock-only samples are there too
                client.connect(sock)
                client.sendall(json.dumps({"op": "lock_graphics_clock", "device": 1, "min": 1200, "max": 1200}).encode() + b"\n")
                assert json.loads(client.makefile().readline())["ok"]
                return get(url)
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_the_scrape_configuration_names_the_server_and_gpud():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "docs" / "monitoring" / "prometheus.yml").read_text())
    jobs = {c["job_name"]: c for c in config["scrape_configs"]}
    assert set(jobs) == {"perseus-server", "perseus-gpud"}
    assert jobs["perseus-server"]["authorization"]["type"] == "Bearer"
    for job in jobs.values():
        assert job.get("metrics_path", "/metrics") == "/metrics"
        assert all(re.fullmatch(r"[\w.-]+:\d+", t) for c in job["static_configs"] for t in c["targets"])
