#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/) with clang under ASan + UBSan and runs each for
# SECONDS (default 60), starting from the seed corpus in tests/fuzz/corpus/<target>/ (left
# unchanged: new inputs go to build-fuzz/corpus/). A crash, leak, sanitizer report or unexpected
# exception fails the script and leaves the input in build-fuzz/artifacts/. Prints each target's
# executions per second and coverage.
# Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
build=build-fuzz
# -O1 -g1: what libFuzzer's documentation suggests, with the line numbers a report needs, at a fraction of
# -O2 -g's compile time.
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DPERSEUS_FUZZ=ON > /dev/null
cmake --build "$build"
mkdir -p "$build/artifacts"
status=0
for target in profile_csv plan_python plan_json request_bodies gpud_requests gpud_daemon; do
  mkdir -p "$build/corpus/$target"
  log="$build/$target.log"
  if ! "$build/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -print_final_stats=1 -max_len=65536 \
      -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$build/artifacts/$target-" \
      "$build/corpus/$target" "tests/fuzz/corpus/$target" > "$log" 2>&1; then
    echo "fuzz_$target: FAILED (input in $build/artifacts/, log $log)"
    tail -40 "$log"
    status=1
    continue
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo 0)
  echo "fuzz_$target: $runs runs in ${seconds} s ($((runs / seconds)) exec/s), coverage $cov edges, corpus $(ls "$build/corpus/$target" | wc -l) inputs"
done
exit $status
