#!/bin/sh
# Planning time of the GPT-3 175B A100 profile (backwards split 50/50) at 96 microbatches on 8
# stages: 1F1B against ZB-H1 (and any further schedules given as arguments), one `perseus optimize`
# each. Usage: bench/schedule_planning_time.sh [build dir] [schedule ...]
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
schedules=${*:-"1f1b zb-h1"}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/src/perseus" synth-profile --from "$here/examples/gpt3-175b-a100.csv" --split-backward 0.5 --out "$work/split.csv"
for schedule in $schedules; do
  start=$(date +%s.%N)
  "$build/src/perseus" optimize "$work/split.csv" --stages 8 --microbatches 96 --p2p-power 83.64 \
    --schedule "$schedule" --out "$work/$schedule" --quiet
  end=$(date +%s.%N)
  points=$(($(wc -l < "$work/$schedule/iteration_time_energy.csv") - 1))
  echo "$schedule: $(echo "$end - $start" | bc) s, $points frontier points"
done
