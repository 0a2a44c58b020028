#!/usr/bin/env bash
# The planner at scale (docs/benchmarks.md): `perseus optimize` on synthetic profiles (perseus
# synth-profile, default GPU model) for S in {4, 8, 16, 32} stages x M in {16, 64, 256} microbatches x unit
# time {1, 0.1} ms: frontier points, wall time and peak memory. A case over the time limit (default 300 s)
# is stopped and reported as skipped.
#
#   bench/scale_table.sh [PERSEUS_BINARY] [LIMIT_SECONDS]
set -uo pipefail
perseus=${1:-build/src/perseus}
limit=${2:-300}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%6s %6s %9s %10s %10s %10s\n' stages micro unit_ms points wall_s peak_mb
for stages in 4 8 16 32; do
  "$perseus" synth-profile --stages "$stages" --out "$work/profile-$stages.csv" || exit 1
  for microbatches in 16 64 256; do
    for unit in 0.001 0.0001; do
      out="$work/out-$stages-$microbatches-$unit"
      /usr/bin/time -f '%e %M' -o "$work/time" timeout "$limit" "$perseus" optimize "$work/profile-$stages.csv" \
        --stages "$stages" --microbatches "$microbatches" --p2p-power 75 --unit-time "$unit" --out "$out" --quiet
      code=$?
      unit_ms=$(awk -v u="$unit" 'BEGIN { print u * 1000 }')
      if [ "$code" -eq 124 ]; then
        printf '%6s %6s %9s %10s %10s %10s\n' "$stages" "$microbatches" "$unit_ms" "skipped" ">$limit" "-"
        continue
      fi
      points=$(($(wc -l < "$out/frontier.csv") - 1))
      read -r wall peak_kb < <(tail -1 "$work/time")
      printf '%6s %6s %9s %10s %10s %10s\n' "$stages" "$microbatches" "$unit_ms" "$points" "$wall" "$((peak_kb / 1024))"
      rm -rf "$out"
    done
  done
done
