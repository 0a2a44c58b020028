#!/usr/bin/env bash
# Makes the Python environment the tests and the integrations run in: a virtual environment of
# Debian's python3 (the interpreter the compiled module is built for) holding the pinned packages of
# requirements/test.txt from PyPI (the real torch, zeus, lowtime, nvidia-ml-py, megatron-core,
# DeepSpeed, torchtitan, pytest and mypy), every transitive package pinned by requirements/lock.txt.
# The product itself never needs it: the C++ tools and `import perseus` run without it.
# Idempotent: a venv whose stamp matches the requirement files is left as it is.
# Usage: scripts/python_env.sh [VENV_DIR]   (default .venv-test; PYTHON picks another interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-test}"
python="${PYTHON:-/usr/bin/python3}"

if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
  echo "python_env: $python cannot make a virtual environment (Debian: apt-get install python3-venv," \
    "which scripts/setup.sh --deps-only installs)" >&2
  exit 1
fi

stamp_of() { cat requirements/test.txt requirements/lock.txt | sha256sum | cut -c1-16; }
wanted="$(stamp_of) $("$python" -c 'import sys; print(sys.version.split()[0])')"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.perseus-requirements" 2>/dev/null)" = "$wanted" ]; then
  echo "python_env: $venv is up to date"
  exit 0
fi

started=$SECONDS
echo "python_env: installing requirements/test.txt into $venv (a cold pip cache downloads about 3 GB:" \
  "PyPI's torch wheel comes with its CUDA libraries)"
rm -f "$venv/.perseus-requirements"
"$python" -m venv "$venv"
# --progress-bar off: a log, not a terminal; pip still prints one line per package.
"$venv/bin/python" -m pip install --progress-bar off --disable-pip-version-check -q \
  --use-pep517 -r requirements/test.txt -c requirements/lock.txt
echo "$wanted" >"$venv/.perseus-requirements"
echo "python_env: $venv ready in $((SECONDS - started)) s ($(du -sh "$venv" | cut -f1))"
