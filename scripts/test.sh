#!/usr/bin/env bash
# Builds perseus with warnings as errors and runs every test (GoogleTest through CTest). The build
# folder is configured as scripts/setup.sh configures it (scripts/configure.sh), so that after setup
# nothing is recompiled; the tests take about 10 minutes on 2 cores.
# Usage: scripts/test.sh [--sanitize]   (--sanitize: AddressSanitizer + UBSan build in build-asan/)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --deps-only
if [ "${1:-}" = "--sanitize" ]; then
  build=build-asan
  # -Og -g1: a third of -O2 -g's compile time under the sanitizers, with the line numbers their
  # reports need.
  bash scripts/configure.sh "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-Og -g1 -DNDEBUG" \
    -DPERSEUS_SANITIZE=ON -DPERSEUS_BUILD_BENCH=OFF
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  build=build
  bash scripts/configure.sh "$build"
fi
started=$SECONDS
cmake --build "$build"
echo "test: built in $((SECONDS - started)) s; running the tests"
started=$SECONDS
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
echo "test: all tests passed in $((SECONDS - started)) s"
