#!/usr/bin/env bash
# Whether two perseus binaries plan the same frontiers, byte for byte (frontier.csv's planner
# columns and plan_changes.csv), and how long each takes: a solver speed-up must not move a single point. Runs
# the published A100/A40 profiles (12-96 microbatches, 1F1B and GPipe), synthetic profiles (4-16
# stages, 1 and 0.1 ms), interleaved 1F1B and --recompute. Exit 1 on the first difference.
#
#   bench/compare_frontiers.sh BASELINE_PERSEUS CANDIDATE_PERSEUS [SHARED_DIR]
set -uo pipefail
base=$1
candidate=$2
shared=${3:-../shared}
profiles="$shared/data/sosp24/stage_profile"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
printf '%-58s %8s %9s %9s  %s\n' case points base_s cand_s result
compare() {  # name, optimize arguments...
  local name=$1
  shift
  for which in base candidate; do
    local binary=$base
    [ "$which" = candidate ] && binary=$candidate
    /usr/bin/time -f '%e' -o "$work/$which.time" "$binary" optimize "$@" --out "$work/$which" --quiet || return 1
  done
  local result=same
  # The planner's columns (the first seven): a binary that writes more columns (emulated times,
  # dominated) is compared on those both write.
  for which in base candidate; do cut -d, -f1-7 "$work/$which/frontier.csv" > "$work/$which/planner.csv"; done
  for file in planner.csv plan_changes.csv; do
    cmp -s "$work/base/$file" "$work/candidate/$file" || result="DIFFERENT ($file)"
  done
  if [ "$result" = same ] && ! cmp -s "$work/base/frontier.csv" "$work/candidate/frontier.csv"; then
    result="same (planner's columns)"
  fi
  [[ "$result" = same* ]] || status=1
  printf '%-58s %8s %9s %9s  %s\n' "$name" "$(($(wc -l < "$work/base/frontier.csv") - 1))" \
    "$(cat "$work/base.time")" "$(cat "$work/candidate.time")" "$result"
  rm -rf "$work/base" "$work/candidate"
}
for gpu in a100_sxm_bf16 a40_bf16; do
  unit=0.001 power=83.64
  [ "$gpu" = a40_bf16 ] && unit=0.0001 power=70.38
  for model in gpt3-175b bloom; do
    for microbatches in 12 24 48 96; do
      compare "$model $gpu M=$microbatches" "$profiles/$model+$gpu.csv" --stages 8 --microbatches "$microbatches" \
        --unit-time "$unit" --p2p-power "$power"
    done
    compare "$model $gpu M=24 gpipe" "$profiles/$model+$gpu.csv" --stages 8 --microbatches 24 \
      --unit-time "$unit" --p2p-power "$power" --schedule gpipe
    compare "$model $gpu M=24 exp" "$profiles/$model+$gpu.csv" --stages 8 --microbatches 24 \
      --unit-time "$unit" --p2p-power "$power" --cost-model exp
  done
done
for stages in 4 8 16; do
  "$base" synth-profile --stages "$stages" --out "$work/synth-$stages.csv" || exit 1
  for microbatches in 16 64; do
    for unit in 0.001 0.0001; do
      compare "synthetic S=$stages M=$microbatches unit=$unit" "$work/synth-$stages.csv" --stages "$stages" \
        --microbatches "$microbatches" --unit-time "$unit" --p2p-power 75
    done
  done
done
for seed in 1 2 3; do
  "$base" synth-profile --stages 8 --noise 0.03 --seed "$seed" --out "$work/noisy-$seed.csv" || exit 1
  compare "synthetic S=8 M=32 noise 3% seed $seed" "$work/noisy-$seed.csv" --stages 8 --microbatches 32 \
    --unit-time 0.0001 --p2p-power 75
done
"$base" synth-profile --stages 8 --out "$work/synth-il.csv" || exit 1
compare "synthetic 4 stages x 2 chunks M=16 interleaved" "$work/synth-il.csv" --stages 4 --microbatches 16 \
  --schedule interleaved --virtual-stages 2 --unit-time 0.0001 --p2p-power 75
compare "gpt3-175b a100_sxm_bf16 M=24 recompute" "$profiles/gpt3-175b+a100_sxm_bf16.csv" --stages 8 \
  --microbatches 24 --unit-time 0.001 --p2p-power 83.64 --recompute
exit $status
