#!/usr/bin/env bash
# Writes requirements/lock.txt: every package that requirements/test.txt pulls in, pinned at the
# version pip resolves today, so that scripts/python_env.sh installs the same set everywhere. Run it
# after changing requirements/test.txt, then commit both files.
# Usage: scripts/lock_python.sh   (PYTHON picks the interpreter; default Debian's /usr/bin/python3)
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-/usr/bin/python3}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$python" -m venv "$scratch/venv"
"$scratch/venv/bin/python" -m pip install --progress-bar off --disable-pip-version-check -q -r requirements/test.txt
{
  echo "# Every package of the Python test environment, pinned (scripts/lock_python.sh writes this file"
  echo "# from requirements/test.txt; scripts/python_env.sh installs with it as constraints)."
  "$scratch/venv/bin/python" -m pip freeze --all --exclude-editable | grep -v '^pip=='
} >requirements/lock.txt
echo "lock_python: $(grep -c '==' requirements/lock.txt) packages pinned in requirements/lock.txt"
