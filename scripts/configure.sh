#!/usr/bin/env bash
# Configures a CMake build of perseus the one way scripts/setup.sh and scripts/test.sh share, so that
# the test run after setup recompiles nothing: Ninja, Release, warnings as errors, and ccache as the
# compiler launcher when it is installed (a rebuild after `git pull`, or of a second build folder,
# then compiles only what changed).
# Usage: scripts/configure.sh [BUILD_DIR] [CMAKE_ARGS...]   (default build/; later -D arguments win)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
shift || true
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERSEUS_WERROR=ON "${launcher[@]}" "$@"
