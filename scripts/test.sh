#!/usr/bin/env bash
# Builds perseus with warnings as errors and runs every test (GoogleTest through CTest). The build
# folder is configured as scripts/setup.sh configures it (scripts/configure.sh), so that after setup
# nothing is recompiled; the tests take about 10 minutes on 2 cores. The Python tests' environment
# (scripts/python_env.sh: pinned PyPI packages in .venv-test) is made while the C++ compiles.
# Usage: scripts/test.sh [--sanitize]   (--sanitize: AddressSanitizer + UBSan build in build-asan/)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --deps-only
if [ "${1:-}" = "--sanitize" ]; then
  build=build-asan
  # -Og -g1: a third of -O2 -g's compile time under the sanitizers, with the line numbers their
  # reports need. No Python module: its tests do not run under the sanitizers (python/CMakeLists.txt).
  bash scripts/configure.sh "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-Og -g1 -DNDEBUG" \
    -DPERSEUS_SANITIZE=ON -DPERSEUS_BUILD_BENCH=OFF -DPERSEUS_BUILD_PYTHON=OFF
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  build=build
  bash scripts/configure.sh "$build"
  mkdir -p "$build"
  # Downloading and unpacking is mostly waiting on the network and the disk: it overlaps the compile.
  bash scripts/python_env.sh >"$build/python-env.log" 2>&1 &
  python_env=$!
fi
started=$SECONDS
cmake --build "$build"
if [ -n "${python_env:-}" ]; then
  if ! wait "$python_env"; then
    cat "$build/python-env.log" >&2
    echo "test: making the Python test environment failed (log above)" >&2
    exit 1
  fi
  tail -n 1 "$build/python-env.log"
fi
echo "test: built in $((SECONDS - started)) s; running the tests"
started=$SECONDS
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
echo "test: all tests passed in $((SECONDS - started)) s"
