"""The commands of README.md and docs/ run as written (against the build tree, from a scratch folder in
which `build` is the CTest build): a command that rots, or never ends, fails here.

A page's commands are its ```sh blocks; they run in order in one scratch folder per page, as a reader
following the page would, after the README's quick start. ```text blocks are synopses, outputs, or
commands for a real cluster (sbatch, systemctl, kubectl), whose files docs/deploy/ holds and the tests
at the end of this file check. Commands that cannot run inside the test suite are listed in
RUN_ELSEWHERE with what runs them instead."""
import configparser
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest

from fakegpu import BINARY

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/cli.md", "docs/server.md", "docs/python.md", "docs/cluster.md",
         "docs/reliability.md", "docs/benchmarks.md", "docs/design.md"]
QUICK_START_SETUP = "scripts/setup.sh && "

# Commands shown that this suite does not run, and what does.
RUN_ELSEWHERE = {
    "scripts/test.sh": "the whole test suite, this file included",
    "scripts/setup.sh --deps-only && /usr/bin/python3 -m venv --system-site-packages .venv && "
    ".venv/bin/pip install -v --no-build-isolation .": "scripts/test_python_package.sh (CTest python_package)",
    "pip install --no-build-isolation .          # from the checkout, in the environment of your choice\n"
    "pip wheel --no-build-isolation -w dist .    # or build a wheel to install elsewhere":
    "scripts/test_python_package.sh (CTest python_package)",
    "examples/pytorch/run.sh out/pytorch-example": "tests/python/test_pytorch_example.py",
    "examples/pytorch_pipelining/run.sh out/pytorch-pipelining": "tests/python/test_pytorch_pipelining_example.py",
}


def code_blocks(page: str) -> List[Tuple[str, str, str]]:
    """(language, heading, code) of every fenced block of a page, dedented (README's list items indent)."""
    blocks, heading = [], ""
    lines = (ROOT / page).read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#") and not line.startswith("#!"):
            heading = line.lstrip("#").strip()
        fence = re.match(r"^(\s*)```(\w*)\s*$", line)
        if fence:
            indent, language, body = len(fence.group(1)), fence.group(2), []
            i += 1
            while not re.match(r"^\s*```\s*$", lines[i]):
                body.append(lines[i][indent:])
                i += 1
            blocks.append((language, heading, "\n".join(body)))
        i += 1
    return blocks


def commands(page: str) -> List[Tuple[str, str]]:
    """(heading, script) of a page's ```sh blocks that this suite runs in order (the quick start's main
    job runs first for every page, see quick_start_main_job)."""
    return [(heading, code) for language, heading, code in code_blocks(page)
            if language == "sh" and code not in RUN_ELSEWHERE and not code.startswith(QUICK_START_SETUP)]


def quick_start_main_job() -> str:
    """The README's first command without the setup that built the tree under test."""
    (first,) = [code for language, _, code in code_blocks("README.md")
                if language == "sh" and code.startswith(QUICK_START_SETUP)]
    return first[len(QUICK_START_SETUP):]


@pytest.fixture
def scratch(tmp_path):
    """A folder whose `build` is the build tree of the binary under test."""
    if not os.environ.get("PERSEUS_BINARY"):
        pytest.skip("the documented commands use the build tree; this run tests an installed package")
    build = Path(os.environ["PERSEUS_BINARY"]).resolve().parents[1]
    (tmp_path / "build").symlink_to(build)
    for shipped in ("examples", "docs", "scripts"):
        (tmp_path / shipped).symlink_to(ROOT / shipped)
    return tmp_path


def run_snippet(script, cwd, timeout, env=None):
    """Runs a snippet with bash as a user pasting it would (no -e), in its own process group, which is killed afterwards: whatever it
    left running (a server in the background) cannot outlive the test or keep it waiting."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PERSEUS_FAKE_NVML")}
        # `python3` in a snippet is the interpreter running these tests (the one with the package's deps).
        env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
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


def check_turnkey_demo(scratch: Path, output: str) -> None:
    """The demo deploys a plan, follows the straggler, and its output has no per-round server lines."""
    assert "server: done (Perseus), round 120, saving 17." in output, output[-3000:]
    assert "  deployed: saving 17." in output, output[-3000:]
    assert "baseline (all-max, measured)" in output, output[-3000:]
    assert "  schedule: 1f1b, " in output, output[-3000:]
    assert not re.search(r"round \d+ done", output), output[-3000:]
    (decisions,) = scratch.glob("out/turnkey/*/decisions.json")
    events = [d["event"] for d in json.loads(decisions.read_text())]
    assert "straggler detected" in events and "straggler recovered" in events, events


def check_offline(scratch: Path, output: str) -> None:
    assert (scratch / "out/gpt3/frontier.csv").exists()
    assert "stage 7:" in output, output[-3000:]


def check_fake_gpu_profile(scratch: Path, output: str) -> None:
    (info,) = scratch.glob("out/dump/*/profile_info.json")
    assert json.loads(info.read_text())["p_block_watts"] > 0
    assert (scratch / "out/gpu0.log").exists() and (scratch / "out/gpu1.log").exists()
    assert len((scratch / "out/measured/frontier.csv").read_text().splitlines()) > 2


def check_plans(scratch: Path, output: str) -> None:
    exported = sorted(p.name for p in (scratch / "out/plans").iterdir())
    assert "freqs_pipeline_00000.py" in exported and "freqs_pipeline_00000.json" in exported, exported
    read = json.loads(output[output.index("{"):])
    assert read["format"] == "perseus-py", read


def check_pictures(scratch: Path, output: str) -> None:
    for picture in ("out/timeline.svg", "out/frontier.svg"):
        assert "<svg" in (scratch / picture).read_text()[:500], picture


def check_straggler_told(scratch: Path, output: str) -> None:
    """perseus straggler, with the secret simulate printed, changed the demo's running job."""
    assert re.search(r"job \S+: straggler set \(\{\"dp_rank\":1,\"slowdown\":1\.2\}\)", output), output[-3000:]
    assert "straggler told: the API says iterations take 1.2x the all-max time" in output, output[-3000:]


def check_ranks(scratch: Path, output: str) -> None:
    assert "iteration 5 loss" in output, output[-3000:]
    assert "done" in output and "AllMaxFrequency" in output, output[-3000:]


# What some commands must have done beyond exiting 0, by (page, heading, index of the block under it).
CHECKS: Dict[Tuple[str, str, int], Callable[[Path, str], None]] = {
    ("README.md", "Turnkey in one minute", 0): check_turnkey_demo,
    ("README.md", "Three ways to use it", 0): check_offline,
    ("docs/server.md", "Trying it without a GPU", 0): check_fake_gpu_profile,
    ("docs/server.md", "`perseus straggler`", 0): check_straggler_told,
    ("docs/cli.md", "`perseus plans`", 0): check_plans,
    ("docs/cli.md", "`perseus plot`: pictures", 0): check_pictures,
    ("docs/cluster.md", "Launching with torchrun", 0): check_ranks,
}


@pytest.mark.parametrize("page", PAGES)
def test_every_command_of_the_page_runs(page, scratch):
    code, output = run_snippet(quick_start_main_job(), scratch, timeout=120)
    assert code == 0, f"the quick start's main job: exit {code}\n{output[-3000:]}"
    seen: Dict[str, int] = {}
    for heading, script in commands(page):
        index = seen[heading] = seen.get(heading, -1) + 1
        code, output = run_snippet(script, scratch, timeout=180)
        assert code == 0, f"{page}, '{heading}': exit {code} (None: still running after 180 s)\n{script}\n{output[-3000:]}"
        check = CHECKS.get((page, heading, index))
        if check:
            check(scratch, output)


STAND_IN = """#!/bin/bash
echo "$(basename "$0") $*" >>"$CALLS"
case "$(basename "$0") $1" in
  "perseus serve") echo "perseus: error: cannot listen on 127.0.0.1:7787: Address already in use" >&2; exit 73 ;;
  "perseus status")  # --wait gives up as on a server that never answers, once serve (in the background) ran
    if [[ " $* " == *" --wait "* ]]; then
      for try in $(seq 100); do grep -q "^perseus serve" "$CALLS" && break; sleep 0.1; done
      exit 66
    fi ;;
esac
exit 0
"""


def test_a_snippet_whose_server_does_not_start_stops(tmp_path):
    """Every snippet that starts `perseus serve` in the background and waits for it goes no further
    when it does not start (here: a stand-in `perseus` whose serve fails and whose status --wait
    finds nothing): no ranks, no simulation, no second status."""
    snippets = [(page, code) for page in PAGES for language, _, code in code_blocks(page)
                if language == "sh" and re.search(r"perseus serve .*&$", code, re.M | re.S)]
    assert len(snippets) >= 4, snippets
    for name in ("src/perseus", "tests/fake_trainer"):
        (tmp_path / "build" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "build" / name).write_text(STAND_IN)
        (tmp_path / "build" / name).chmod(0o755)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    for page, code in snippets:
        calls = tmp_path / "calls.log"
        calls.write_text("")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PERSEUS_")}
        env.update(CALLS=str(calls), PATH=f"{Path(sys.executable).parent}:{env['PATH']}")
        _, output = run_snippet(code, tmp_path, timeout=60, env=env)
        made = calls.read_text().splitlines()
        assert any(call.startswith("perseus serve") for call in made), (page, made)
        went_on = [call for call in made if call.startswith(("perseus simulate", "perseus straggler", "fake_trainer"))
                   or (call.startswith("perseus status") and "--wait" not in call)]
        assert not went_on, f"{page}: went on after its server did not start: {went_on}\n{code}\n{output[-2000:]}"


def test_every_check_and_command_listed_elsewhere_is_still_documented():
    """A check whose command left the docs, or a RUN_ELSEWHERE entry no page shows, would pass unseen."""
    shown = {(page, heading) for page in PAGES for heading, _ in commands(page)}
    for page, heading, _ in CHECKS:
        assert (page, heading) in shown, (page, heading)
    every_block = [code for page in PAGES for _, _, code in code_blocks(page)]
    for command in RUN_ELSEWHERE:
        assert command in every_block, command
    assert quick_start_main_job().startswith("build/src/perseus optimize examples/")


def test_the_readme_stays_short_and_self_contained():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    for page in PAGES:
        body = (ROOT / page).read_text()
        assert not re.search(r"DESIG[N]|[Ii]ssu[e] \d|share[d]/", body), page  # (a grep for them skips this line)
        prose = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", body, flags=re.S))
        for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", prose):
            if not link.startswith("http"):
                assert (ROOT / page).parent.joinpath(link).resolve().exists() or link in (
                    "zeus.md", "docs/zeus.md", "energy-monitoring.md", "docs/energy-monitoring.md"), (page, link)


def heading_anchors(page: Path) -> set:
    """The anchors of a page's headings, as GitHub makes them."""
    prose = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", prose, flags=re.M)}


def test_every_link_into_a_page_names_a_heading_it_has():
    for page in PAGES:
        prose = re.sub(r"```.*?```", "", (ROOT / page).read_text(), flags=re.S)
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)]+)\)", prose):
            linked = (ROOT / page).parent.joinpath(target).resolve() if target else ROOT / page
            if linked.name in ("zeus.md", "energy-monitoring.md") and not linked.exists():
                continue
            assert anchor in heading_anchors(linked), (page, target, anchor)


def test_zeus_docs_server_command_runs_as_written(scratch):
    """The line for Zeus users (Zeus's documented command with perseus serve), as written, with a
    Zeus-format plan at the path it names."""
    (command,) = [code for language, _, code in code_blocks("docs/server.md")
                  if language == "console" and code.startswith("ZEUS_PFO_SCHEDULER_ARGS=")]
    plan = scratch / "path" / "to" / "freqs_pipeline_00042.py"
    plan.parent.mkdir(parents=True)
    plan.write_text("[\n[('forward', 1410), ('backward', 1395)],\n]\n# Iteration 42 cost change: 0.0\n")
    path = f"{Path(BINARY).resolve().parent}:{os.environ['PATH']}"
    code, output = run_snippet(f"export PATH='{path}'\n{command}", scratch, timeout=3)
    assert code is None, f"the server stopped (exit {code}):\n{output}"
    assert "listening on http://127.0.0.1:7787 (scheduler PointSolution" in output, output


def perseus_help(subcommand: str) -> str:
    return subprocess.run([BINARY, subcommand, "--help"], capture_output=True, text=True, check=True).stdout


def assert_flags_exist(command: List[str]) -> None:
    """Every --flag of a `perseus SUBCOMMAND ...` command line is one that subcommand has."""
    start = next(i for i, word in enumerate(command) if word.endswith("perseus"))
    subcommand, words = command[start + 1], command[start + 2:]
    known = perseus_help(subcommand)
    for word in words:
        if word.startswith("--"):
            assert re.search(rf"{re.escape(word)}\b", known), f"perseus {subcommand} has no {word}"


@pytest.mark.parametrize("unit", ["perseus-gpud.service", "perseus-serve.service"])
def test_systemd_units_are_valid_and_name_real_flags(unit, tmp_path):
    if not BINARY:
        pytest.skip("no perseus binary")
    path = ROOT / "docs/deploy" / unit
    parsed = configparser.ConfigParser(strict=False, interpolation=None)
    parsed.read_string(path.read_text())
    assert {"Unit", "Service", "Install"} <= set(parsed.sections())
    exec_start = parsed["Service"]["ExecStart"].split()
    assert exec_start[0] == "/usr/local/bin/perseus"
    assert_flags_exist(exec_start)
    analyze = shutil.which("systemd-analyze")
    if analyze:
        local = tmp_path / unit
        local.write_text(path.read_text().replace("/usr/local/bin/perseus", str(Path(BINARY).resolve())))
        verify = subprocess.run([analyze, "verify", str(local)], capture_output=True, text=True)
        problems = [line for line in (verify.stdout + verify.stderr).splitlines() if unit in line]
        assert verify.returncode == 0 and not problems, verify.stdout + verify.stderr


def test_the_kubernetes_daemonset_is_consistent():
    if not BINARY:
        pytest.skip("no perseus binary")
    yaml = pytest.importorskip("yaml")
    (manifest,) = list(yaml.safe_load_all((ROOT / "docs/deploy/perseus-gpud-daemonset.yaml").read_text()))
    assert manifest["apiVersion"] == "apps/v1" and manifest["kind"] == "DaemonSet"
    spec = manifest["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    (container,) = spec["template"]["spec"]["containers"]
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert set(mounts) <= set(volumes)
    script = container["command"][-1]
    gpud = script[script.index("perseus gpud"):].split()
    assert_flags_exist(gpud)
    socket_path = gpud[gpud.index("--socket") + 1]
    assert socket_path.startswith(mounts["socket-dir"] + "/")
    assert volumes["socket-dir"]["hostPath"]["path"] == mounts["socket-dir"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_slurm_script_runs_a_job_with_stand_ins_for_slurm(scratch):
    """docs/deploy/slurm-train.sh on one node: scontrol and srun are stand-ins, torchrun and the server
    are real, the fake NVML stands in for the GPUs; the job ends done and the token file is private."""
    pytest.importorskip("torch")
    bin_dir = scratch / "slurm-bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho localhost\n")
    (bin_dir / "srun").write_text(  # one node: --ntasks-per-node=N tasks with Slurm's task variables
        '#!/bin/bash\nn=1\nwhile [[ $1 == -* ]]; do [[ $1 == --ntasks-per-node=* ]] && n=${1#*=}; shift; done\n'
        'pids=()\nfor ((i = 0; i < n; ++i)); do\n'
        '  SLURM_PROCID=$i SLURM_NTASKS=$n SLURM_LOCALID=$i "$@" & pids+=($!)\ndone\n'
        'status=0\nfor p in "${pids[@]}"; do wait $p || status=1; done\nexit $status\n')
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    build = scratch / "build"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERSEUS_FAKE_NVML")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", SLURM_JOB_ID="42", SLURM_JOB_NODELIST="localhost",
               GPUS_PER_NODE="2", PERSEUS=str(build / "src/perseus"), PERSEUS_PORT=str(free_port()),
               PYTHON=sys.executable, MASTER_PORT=str(free_port()),
               PYTHONPATH=str(build / "python"), PERSEUS_NVML_LIBRARY=os.environ.get("PERSEUS_FAKE_NVML", ""))
    code, output = run_snippet("docs/deploy/slurm-train.sh examples/pytorch/pipeline_train.py --iterations 4",
                               scratch, timeout=180, env=env)
    assert code == 0, f"exit {code}\n{output[-3000:]}"
    records = scratch / "perseus-42"
    assert stat.S_IMODE((records / "token").stat().st_mode) == 0o600
    assert "listening on http://0.0.0.0:" in (records / "serve.log").read_text()
    assert "done" in output and "iteration 3 loss" in output, output[-3000:]
