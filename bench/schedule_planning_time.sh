#!/bin/sh
# Planning time of the GPT-3 175B A100 profile (backwards split 50/50) on 8 stages: 1F1B against
# ZB-H1 (and any further schedules given as arguments), one `perseus optimize` each, the fastest of
# REPEAT runs (default 1; a busy machine's runs vary), at each of MICROBATCHES (default 96).
# Usage: [MICROBATCHES="24 48 96"] [REPEAT=3] bench/schedule_planning_time.sh [build dir] [schedule ...]
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
schedules=${*:-"1f1b zb-h1"}
microbatches=${MICROBATCHES:-96}
repeat=${REPEAT:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/src/perseus" synth-profile --from "$here/examples/gpt3-175b-a100.csv" --split-backward 0.5 --out "$work/split.csv"
for m in $microbatches; do
  first=""
  for schedule in $schedules; do
    best=""
    run=0
    while [ "$run" -lt "$repeat" ]; do
      start=$(date +%s.%N)
      "$build/src/perseus" optimize "$work/split.csv" --stages 8 --microbatches "$m" --p2p-power 83.64 \
        --schedule "$schedule" --out "$work/$schedule" --quiet
      end=$(date +%s.%N)
      seconds=$(echo "$end - $start" | bc)
      if [ -z "$best" ] || [ "$(echo "$seconds < $best" | bc)" -eq 1 ]; then best=$seconds; fi
      run=$((run + 1))
    done
    [ -z "$first" ] && first=$best
    points=$(($(wc -l < "$work/$schedule/iteration_time_energy.csv") - 1))
    printf '%s microbatches, %s: %.2f s, %.2fx the first, %s frontier points\n' "$m" "$schedule" "$best" \
      "$(echo "scale=4; $best / $first" | bc)" "$points"
  done
done
