"""docs/schedules.md's shell snippet runs as written (against the build tree, from a scratch folder in
which `build` is the CTest build) and does what the text says."""
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def snippet(after_heading):
    text = (ROOT / "docs" / "schedules.md").read_text()
    section = text[text.index(after_heading):]
    match = re.search(r"\n\n((?:    .*\n)+)", section)
    assert match, f"no code block under {after_heading!r}"
    return "\n".join(line[4:] for line in match.group(1).splitlines())


def test_trying_zero_bubble_on_the_gpt3_profile(tmp_path):
    if not os.environ.get("PERSEUS_BINARY"):
        pytest.skip("the snippet uses the build tree; this run tests an installed package")
    (tmp_path / "build").symlink_to(Path(os.environ["PERSEUS_BINARY"]).resolve().parents[1])
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    result = subprocess.run(["bash", "-ec", snippet("## Trying it")], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    split = (tmp_path / "gpt3-split.csv").read_text()
    assert "backward_input" in split and "backward_weight" in split and ",backward," not in split
    assert "perseus" in result.stdout and "envpipe" in result.stdout
    svg = (tmp_path / "zb-h1.svg").read_text()
    assert 'data-kind="W"' in svg and "stroke-dasharray=\"3,2\"" in svg
