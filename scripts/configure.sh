#!/usr/bin/env bash
# Configures a CMake build of perseus the one way scripts/setup.sh and scripts/test.sh share, so that
# the test run after setup recompiles nothing: Ninja, Release, warnings as errors, and ccache as the
# compiler launcher when it is installed (a rebuild after `git pull`, or of a second build folder,
# then compiles only what changed). ccache caches the files compiled against a precompiled header
# (cmake/precompiled_headers.cmake) only with the sloppiness below, given through the launcher.
# Usage: scripts/configure.sh [BUILD_DIR] [CMAKE_ARGS...]   (default build/; later -D arguments win)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
shift || true
launcher=()
if command -v ccache >/dev/null; then
  ccache_launcher="env;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;ccache"
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=$ccache_launcher" "-DCMAKE_C_COMPILER_LAUNCHER=$ccache_launcher")
fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERSEUS_WERROR=ON "${launcher[@]}" "$@"
