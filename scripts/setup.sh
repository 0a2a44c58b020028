#!/usr/bin/env bash
# Installs the Debian packages perseus builds with (idempotent), then configures (scripts/configure.sh:
# the flags scripts/test.sh uses too) and builds the `perseus` command and the fake NVML, nothing else:
# the tests and benchmarks are built by scripts/test.sh, the Python package by pip (setup.py reuses
# this build/). The first build takes about 7 minutes on 2 cores (13.8 CPU-minutes without ccache;
# ninja shows [done/total]); later ones compile only what changed.
#   --deps-only  the Debian packages, nothing built
#   --python     the Debian packages and the Python test environment .venv-test (scripts/python_env.sh:
#                the pinned PyPI packages the Python tests and integrations run against), nothing built
# Usage: scripts/setup.sh [--deps-only | --python] [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential g++-12 cmake ninja-build pkg-config ccache
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libsimdjson-dev
  libboost-dev libboost-graph-dev libsqlite3-dev
  pybind11-dev python3-dev python3-pytest
  python3-pip python3-venv python3-setuptools python3-wheel python3-mypy
  python3-prometheus-client python3-yaml python3-pydantic
  libgtest-dev libgmock-dev libbenchmark-dev libtinyxml2-dev
  clang libclang-rt-14-dev clang-format
  chromium
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ "${1:-}" = "--deps-only" ] && exit 0
if [ "${1:-}" = "--python" ]; then
  exec bash scripts/python_env.sh
fi
build_dir="${1:-build}"
started=$SECONDS
bash scripts/configure.sh "$build_dir"
echo "setup: building the perseus command in $build_dir/ (the first time about 7 minutes on 2 cores)"
cmake --build "$build_dir" --target perseus perseus_fake_nvml
echo "setup: built in $((SECONDS - started)) s; scripts/test.sh builds the tests and benchmarks"
