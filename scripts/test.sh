#!/usr/bin/env bash
# Builds perseus with warnings as errors and runs every test (GoogleTest through CTest).
# Usage: scripts/test.sh [--sanitize]   (--sanitize: AddressSanitizer + UBSan build in build-asan/)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --deps-only
if [ "${1:-}" = "--sanitize" ]; then
  build=build-asan
  # -Og -g1: a third of -O2 -g's compile time under the sanitizers, with the line numbers their
  # reports need.
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-Og -g1 -DNDEBUG" \
    -DPERSEUS_WERROR=ON -DPERSEUS_SANITIZE=ON -DPERSEUS_BUILD_BENCH=OFF
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  build=build
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERSEUS_WERROR=ON
fi
cmake --build "$build"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
