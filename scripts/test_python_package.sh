#!/usr/bin/env bash
# Builds the wheel as a user would (pip wheel --no-build-isolation), installs it into a fresh
# virtual environment, and checks the installed package from outside the checkout: the pytest
# suite (the PyTorch example included), mypy on the example against the installed stubs, the
# `perseus` command on PATH, and that `import perseus` from the checkout's parent folder still
# finds the installed package; then the README's install command (pip install . into a venv) and
# `cmake --install`. Run by CTest (test python_package) after the build.
# The packages the tests need (torch, zeus, pytest, mypy) come from the test environment
# (TEST_PYTHON, scripts/python_env.sh), seen by the fresh venv through a .pth file after its own.
# Usage: scripts/test_python_package.sh BUILD_DIR   (reuses BUILD_DIR's CMake build; Debian's python3)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: scripts/test_python_package.sh BUILD_DIR}" && pwd)
python=${PYTHON:-/usr/bin/python3}
test_python=${TEST_PYTHON:-$root/.venv-test/bin/python}
test_site=$("$test_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
work="$build/python-package-test"
rm -rf "$work" && mkdir -p "$work/outside"

echo "== pip wheel"
(cd "$root" && PERSEUS_CMAKE_BUILD_DIR="$build" "$python" -m pip wheel --no-build-isolation --no-deps -q \
  -w "$work/wheel" .)
wheel=$(ls "$work"/wheel/perseus-*.whl)
echo "built $(basename "$wheel")"

echo "== install into a fresh virtual environment"
"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install -q --no-index --no-deps "$wheel"
venv_python="$work/venv/bin/python"
venv_site=$("$venv_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

cd "$work/outside"
installed=$("$venv_python" -c 'import perseus; print(perseus.__file__)')
case "$installed" in
  "$work/venv/"*) echo "import perseus -> $installed" ;;
  *) echo "import perseus found $installed, not the installed package" >&2; exit 1 ;;
esac
"$work/venv/bin/perseus" --version
# A checkout named like the package, seen from its parent folder, must not shadow the package.
ln -s "$root" perseus
(PATH="$work/venv/bin:$PATH" python -c 'import perseus; assert perseus.__version__, perseus.__path__')
rm perseus

echo "== pytest against the installed package (from $work/outside)"
echo "$test_site" >"$venv_site/perseus-test-environment.pth"
# Without the tests that start groups of training ranks on the real frameworks (marker multiprocess)
# or run Zeus's and lowtime's own code side by side with perseus's (marker side_by_side): they
# exercise the same pure-Python files, which the build tree's run (python_bindings) covers. Without
# the turnkey loop's randomized instances too: they drive only the `perseus` command, the same file
# the build tree's run (python_turnkey_random) checks, and would be half of this run's time.
env -u PYTHONPATH -u PERSEUS_BINARY -u PERSEUS_FAKE_NVML PATH="$work/venv/bin:$PATH" PERSEUS_REQUIRE_TORCH=1 \
  PERSEUS_TEST_TMP="$work" "$venv_python" -m pytest -q -p no:cacheprovider -m "not multiprocess and not side_by_side" \
  --ignore="$root/tests/python/test_turnkey_random.py" "$root/tests/python"

echo "== mypy on the examples against the installed package"
"$venv_python" -m mypy --strict --cache-dir "$build/mypy-cache" "$root/examples/pytorch/pipeline_train.py"

echo "== the README's Python step, as written, with another python3 first on PATH (pyenv's, say), twice"
# The step must not depend on which python3 comes first: here one that refuses to run.
mkdir -p "$work/other-python"
printf '#!/bin/sh\necho "python3 on PATH is not Debian'"'"'s: the README step must not use it" >&2\nexit 3\n' \
  >"$work/other-python/python3"
chmod +x "$work/other-python/python3"
readme_step=$(grep -o 'scripts/setup.sh --deps-only && [^`]*' "$root/README.md")
case "$readme_step" in
  *"/usr/bin/python3 -m venv"*".venv/bin/pip install"*"--no-build-isolation ."*) ;;
  *) echo "the README's Python step is not what this test knows: $readme_step" >&2; exit 1 ;;
esac
readme_step=${readme_step//.venv/$work/venv-readme}  # not the checkout's own .venv
for run in 1 2; do  # the second over the venv the first made
  (cd "$root" && PATH="$work/other-python:$PATH" PERSEUS_CMAKE_BUILD_DIR="$build" bash -c "$readme_step" \
    >"$work/readme-step.log" 2>&1) || { cat "$work/readme-step.log" >&2; echo "the README's Python step failed" >&2; exit 1; }
done
"$work/venv-readme/bin/python" -c 'import perseus, perseus.torch; print("pip install . ->", perseus.__version__)'

echo "== an interpreter without the build's tools: pip says what is missing, and its fix works, twice over"
"$python" -m venv "$work/venv-bare"  # no system site packages: setuptools without wheel, as pyenv's python
if "$work/venv-bare/bin/python" -c 'import wheel' 2>/dev/null; then
  echo "(a bare venv has wheel here: nothing to check)"
elif bare=$(cd "$root" && PERSEUS_CMAKE_BUILD_DIR="$build" "$work/venv-bare/bin/pip" install -q --no-index \
    --no-build-isolation . 2>&1); then
  echo "pip install . in a venv without wheel succeeded; expected it to name the missing package" >&2; exit 1
elif ! grep -q "perseus cannot be built for .* it needs" <<<"$bare" || ! grep -q "the \`wheel\` package" <<<"$bare"; then
  echo "pip install . without wheel did not name it:" >&2; echo "$bare" >&2; exit 1
else
  echo "pip without wheel: $(grep -o "the \`wheel\` package[^:]*" <<<"$bare")"
  # The first fix it names needs no package index: remake the venv with Debian's interpreter.
  fix=$(grep -o '`/usr/bin/python3 -m venv --clear --system-site-packages [^`]*`' <<<"$bare" | head -n 1 | tr -d '`')
  [ -n "$fix" ] || { echo "pip without wheel named no venv command:" >&2; echo "$bare" >&2; exit 1; }
  for run in 1 2; do
    $fix
    (cd "$root" && PERSEUS_CMAKE_BUILD_DIR="$build" "$work/venv-bare/bin/pip" install -q --no-index --no-deps \
      --no-build-isolation .) || { echo "pip install . after the fix ($fix) failed" >&2; exit 1; }
  done
  "$work/venv-bare/bin/python" -c 'import perseus; print("after the fix:", perseus.__version__)'
fi

echo "== cmake --install"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
"$work/prefix/bin/perseus" --version
site=$(cd "$work/prefix" && ls -d lib/python3*/*-packages)
PYTHONPATH="$work/prefix/$site" "$python" -c 'import perseus; print("cmake --install ->", perseus.__file__)' |
  grep -q "$work/prefix/$site/perseus/__init__.py"
echo "python package: all checks passed"
