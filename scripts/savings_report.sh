#!/usr/bin/env bash
# Savings on real profiles: for each model, GPU and microbatch count, the intrinsic saving of
# perseus's fastest plan and EnvPipe's against all-max, and the savings with a straggler at
# T'/T = 1.05, 1.1, 1.2, 1.5 (global batch 1536 microbatches). The profiles: the Perseus authors'
# four (GPT-3 175B and BLOOM on A100 and A40) from $PERSEUS_SHARED/data/sosp24 (default ../shared)
# where that is present, else the one the project ships (examples/gpt3-175b-a100.csv, the same
# GPT-3 175B A100 profile byte for byte).
# Usage: scripts/savings_report.sh [BUILD_DIR] [MICROBATCHES...]   (default: build 12 24 48 96)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
shift || true
microbatches=("${@:-12 24 48 96}")
read -r -a microbatches <<<"${microbatches[*]}"
data=${PERSEUS_SHARED:-../shared}/data/sosp24/stage_profile
declare -A path
if [ -d "$data" ]; then
  for profile in gpt3-175b+a100_sxm_bf16 bloom+a100_sxm_bf16 gpt3-175b+a40_bf16 bloom+a40_bf16; do
    path[$profile]="$data/$profile.csv"
  done
  profiles=(gpt3-175b+a100_sxm_bf16 bloom+a100_sxm_bf16 gpt3-175b+a40_bf16 bloom+a40_bf16)
else
  echo "savings_report: $data not found; reporting the shipped profile only (examples/gpt3-175b-a100.csv)" >&2
  path[gpt3-175b+a100_sxm_bf16]=examples/gpt3-175b-a100.csv
  profiles=(gpt3-175b+a100_sxm_bf16)
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '| profile | M | D | perseus T\x27/T=1 | EnvPipe | Zeus global (its time) | 1.05 | 1.1 | 1.2 | 1.5 |\n|---|---|---|---|---|---|---|---|---|---|\n'
for profile in "${profiles[@]}"; do
  case "$profile" in
    *a40*) gpu=(--unit-time 0.0001 --p2p-power 70.38) ;;
    *) gpu=(--unit-time 0.001 --p2p-power 83.64) ;;
  esac
  for m in "${microbatches[@]}"; do
    "$build/src/perseus" whatif "${path[$profile]}" --stages 8 --microbatches "$m" "${gpu[@]}" \
      --baselines envpipe-balanced,zeus-global --slowdowns 1,1.05,1.1,1.2,1.5 --out "$out/w.csv" -q
    awk -F, -v p="$profile" -v m="$m" '
      NR > 1 { s[$1 "," $2] = sprintf("%.1f%%", 100 * $7); t[$1 "," $2] = $5 }
      END {
        printf "| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s |\n", p, m, 1536 / m,
          s["1,perseus"], s["1,envpipe-balanced"], s["1,zeus-global"] sprintf(" (%.3fx T)", t["1,zeus-global"] / t["1,all-max"]),
          s["1.05,perseus"], s["1.1,perseus"], s["1.2,perseus"], s["1.5,perseus"]
      }' "$out/w.csv"
  done
done
