"""The web page (GET /) in a real browser: `perseus serve --scheduler Perseus`, a short `perseus simulate`
against it, then headless Chromium loads the page, runs its script and must show the job's id, phase and
saving as GET /jobs/{job_id} says them, with no console message (an uncaught error, a blocked request).
Skipped, saying so, where Chromium is not installed. CTest runs this with the label `process`."""
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from serve_process import start_serve, stop_all  # noqa: E402
BINARY = os.environ.get("PERSEUS_BINARY") or shutil.which("perseus") or ""
EXAMPLES = Path(os.environ.get("PERSEUS_EXAMPLES_DIR") or ROOT / "examples")
CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser") if shutil.which(name)), None)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium; scripts/setup.sh installs it)")

TOKEN = "web-page-test-token-0123456789"


@pytest.fixture
def serve(tmp_path):
    """Starts `perseus serve --scheduler Perseus` on a free port; yields a function that returns its URL."""
    procs = []

    def start(token_file=None, extra=()):
        proc, url = start_serve(BINARY, tmp_path / "dump", "Perseus", '{"wait_for_plan": true}',
                                (["--token-file", str(token_file)] if token_file else []) + list(extra))
        procs.append(proc)
        return url

    yield start
    stop_all(procs)


class Page(HTMLParser):
    """The rendered DOM: every element with an id or a data-field, with its attributes and text."""
    VOID = {"img", "input", "br", "meta", "link", "hr"}

    def __init__(self, html):
        super().__init__()
        self.by_id, self.fields, self.images, self._open = {}, [], [], []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        element = {"tag": tag, "attrs": dict(attrs), "text": []}
        if tag == "img":
            self.images.append(element)
        if tag in self.VOID:
            self._record(element)
        else:
            self._open.append(element)

    def handle_endtag(self, tag):
        while self._open:
            element = self._open.pop()
            self._record(element)
            if element["tag"] == tag:
                break

    def handle_data(self, data):
        for element in self._open:
            element["text"].append(data)

    def _record(self, element):
        element["text"] = "".join(element["text"]).strip()
        element["path"] = [e["attrs"].get("id") for e in self._open if e["attrs"].get("id")]
        if "id" in element["attrs"]:
            self.by_id[element["attrs"]["id"]] = element
        if "data-field" in element["attrs"]:
            self.fields.append(element)

    def field(self, name, inside):
        """The element data-field=`name` within the element of id `inside`."""
        found = [e for e in self.fields if e["attrs"]["data-field"] == name and inside in e["path"]]
        assert found, f"no data-field={name!r} inside #{inside}"
        return found[0]


def render(url, tmp_path):
    """Chromium loads `url`, runs its script (5 s of virtual time: the first refresh and the next) and
    prints the DOM; returns it and every console line it logged."""
    command = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-extensions",
               f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=5000",
               "--enable-logging=stderr", "--v=0", "--dump-dom", url]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"chromium exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stdout, [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]


def percent(value):
    """As the page writes a fraction."""
    text = f"{value * 100:.2f}"
    return ("0.00" if text == "-0.00" else text) + "%"


def get_json(url, path, token=None):
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.load(reply)


def test_the_page_shows_a_simulated_job_with_its_phase_and_saving(serve, tmp_path):
    url = serve()
    simulate = subprocess.run(
        [BINARY, "simulate", str(EXAMPLES / "gpt3-175b-a100.csv"), "--stages", "8", "--microbatches", "12",
         "--p2p-power", "83.64", "--pipelines", "2", "--iterations", "300", "--report-every", "100", "--server", url],
        capture_output=True, text=True, timeout=120)
    assert simulate.returncode == 0, simulate.stderr[-3000:]
    [summary] = get_json(url, "/jobs")
    job_id = summary["job_id"]
    status = get_json(url, "/jobs/" + urllib.parse.quote(job_id, safe=""))
    assert status["phase"] == "done" and status["saving"] > 0.1, status

    html, console = render(url + "/", tmp_path)
    assert console == [], "the page logged to the console:\n" + "\n".join(console)
    page = Page(html)
    assert page.by_id["page-errors"]["text"] == "", page.by_id["page-errors"]["text"]
    assert "hidden" in page.by_id["problem"]["attrs"], page.by_id["problem"]["text"]

    # The list of jobs: the job's row with its id, phase and saving.
    assert page.field("job_id", "jobs")["text"] == job_id
    assert page.field("phase", "jobs")["text"] == "done"
    saving = page.field("saving", "jobs")
    assert saving["text"] == percent(status["saving"])
    assert float(saving["attrs"]["data-value"]) == status["saving"]
    # The job in detail: the same, its frontier drawn and its deployed plan's timeline shown.
    assert page.by_id["job-id"]["text"] == job_id
    assert page.field("phase", "job")["text"] == "done"
    assert page.field("saving", "job")["text"] == percent(status["saving"])
    assert page.field("slowdown", "job")["text"] == percent(status["slowdown"])
    assert "polyline" in html and "deployed plan (predicted)" in html
    timeline = [image for image in page.images if "timeline" in image["path"]]
    assert timeline and timeline[0]["attrs"]["src"].startswith("blob:"), timeline
    assert status["plan"]["label"] in page.by_id["job-plan"]["text"]
    assert status["decisions"][-1]["detail"] in html
    # Saving and slowdown say what they are measured against, with its value; the end says why the
    # job ended without the protocol's marker (a job that ended well need not have profiled).
    reference = status["reference"]
    assert f"against the {reference['name']} ({reference['iteration_time']:.3f} s)" in html, reference
    assert status["end_detail"].startswith("[profiling-done] ")
    assert page.by_id["job-end"]["text"] == "Ended: " + status["end_detail"][len("[profiling-done] "):]


def test_the_page_shows_the_clusters_power_budget(serve, tmp_path):
    url = serve(extra=["--power-budget", "20000"])
    html, console = render(url + "/", tmp_path)
    assert console == [], "the page logged to the console:\n" + "\n".join(console)
    budget = Page(html).field("budget", "jobs-card")
    assert float(budget["attrs"]["data-value"]) == 20000
    assert budget["text"].startswith("Power budget 20.00 kW"), budget["text"]


def test_with_a_token_the_page_loads_and_asks_for_it(serve, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    url = serve(token_file)
    with pytest.raises(urllib.error.HTTPError) as refused:
        get_json(url, "/jobs")
    assert refused.value.code == 401  # the JSON routes still need it
    html, console = render(url + "/", tmp_path)
    page = Page(html)
    assert "hidden" not in page.by_id["token-card"]["attrs"]
    assert page.by_id["page-errors"]["text"] == ""
    # The refused request itself is all the browser may report.
    assert all("401" in line for line in console), "\n".join(console)
