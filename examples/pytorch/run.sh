#!/usr/bin/env bash
# Runs examples/pytorch/pipeline_train.py on 4 ranks (4 pipeline stages, gloo on CPU) against
# `perseus serve` on the fake NVML, twice:
#   1. allmax: AllMaxFrequency, every instruction at the top clock (today's training);
#   2. plan:   PointSolution with the plan `perseus optimize` made for a 4-stage, 4-microbatch
#              pipeline from the shipped example profile (within 10% of the fastest time),
#              after one warm-up round at the top clock.
# Prints the GPU library first, then each phase's last-stage loss and every rank's time and GPU
# energy, then the two phases' total energy, which is no measure of a saving (the CPU does not slow
# down with the fake GPU's clock; examples/pytorch_pipelining/run.sh models a GPU that does). Fails
# (exit 1) when perseus was off on any rank in any phase (fail-open turned it off: that rank trained
# at default clocks, so the comparison would say nothing about the plan).
# Usage: examples/pytorch/run.sh [OUT_DIR]        (default out/pytorch-example)
# Environment: ITERATIONS (default 12), PYTHON (default python3), PERSEUS (the perseus command;
# default "$PYTHON -m perseus", the one in the Python package), PERSEUS_NVML_LIBRARY (default the
# package's fake NVML). Every rank's fake-GPU call log lands in OUT_DIR/PHASE/gpuR.log, its output
# in OUT_DIR/PHASE/rankR.out, the server's records in OUT_DIR/PHASE/dump/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${1:-out/pytorch-example}" && cd "${1:-out/pytorch-example}" && pwd)
python=${PYTHON:-python3}
read -r -a perseus <<<"${PERSEUS:-$python -m perseus}"
iterations=${ITERATIONS:-12}
stages=4 microbatches=4
if [ -n "${PERSEUS_NVML_LIBRARY:-}" ]; then
  echo "== GPU library of every rank: $PERSEUS_NVML_LIBRARY (PERSEUS_NVML_LIBRARY)"
else
  # Four ranks on one machine's CPU: the example is a demonstration on simulated GPUs wherever it runs.
  PERSEUS_NVML_LIBRARY=$("$python" -c 'import perseus; print(perseus.fake_nvml_library())')
  echo "== GPU library of every rank: perseus's fake NVML (simulated GPUs, not measurements), as this example"
  echo "   always uses unless PERSEUS_NVML_LIBRARY names another: its 4 ranks train on this machine's CPU"
fi
export PERSEUS_NVML_LIBRARY
export PERSEUS_FAKE_NVML_LOG_READS=1  # energy reads in the call log: the test checks every instruction's clock

server_pid=""
rank_pids=()
cleanup() {
  for pid in "${rank_pids[@]}" $server_pid; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# shellcheck source=../serve.sh
source "$here/../serve.sh"

# run PHASE SCHEDULER ARGS: one server, four ranks, wait for the ranks, stop the server.
run() {
  local phase=$1 scheduler=$2 scheduler_args=$3 dir="$out/$1"
  rm -rf "$dir" && mkdir -p "$dir"
  local url
  start_server "$dir" "$scheduler" "$scheduler_args"
  local master_port
  master_port=$(free_port)
  rank_pids=()
  for ((rank = 0; rank < stages; ++rank)); do
    RANK=$rank WORLD_SIZE=$stages MASTER_ADDR=127.0.0.1 MASTER_PORT=$master_port \
      PERSEUS_FAKE_NVML_LOG="$dir/gpu$rank.log" \
      "$python" "$here/pipeline_train.py" --iterations "$iterations" --microbatches "$microbatches" \
      --server "$url" >"$dir/rank$rank.out" 2>&1 &
    rank_pids+=($!)
  done
  local failed=0
  for pid in "${rank_pids[@]}"; do wait "$pid" || failed=1; done  # the ranks only, not the server
  rank_pids=()
  kill "$server_pid" && wait "$server_pid" || true
  server_pid=""
  if ((failed)); then
    tail -n 20 "$dir"/rank*.out >&2
    echo "run.sh: a rank of phase $phase failed" >&2
    exit 1
  fi
  echo "== $phase ($scheduler): last stage's loss, first and last iteration"
  grep '^iteration' "$dir/rank$((stages - 1)).out" | sed -n '1p;$p'
  local off=()
  for ((rank = 0; rank < stages; ++rank)); do
    local summary
    summary=$(grep "^rank $rank: perseus " "$dir/rank$rank.out" || echo "rank $rank: perseus OFF (no summary line)")
    echo "$summary"
    case "$summary" in *"perseus OFF"*) off+=("$rank") ;; esac
  done
  if ((${#off[@]})); then
    grep -h "disabled, training continues" "$dir"/rank*.out >&2 || true
    echo "run.sh: perseus was off on rank(s) ${off[*]} in phase $phase (fail-open turned it off; the warning above" \
      "says why): those ranks trained at default clocks, so this run's energy says nothing about perseus" >&2
    exit 1
  fi
}

# total_energy PHASE: the GPU energy of every rank of the phase, summed (joules).
total_energy() {
  cat "$out/$1"/rank*.out | awk '/^rank [0-9]+: perseus / { for (i = 1; i < NF; ++i) if ($i == "energy") e += $(i + 1) }
    END { printf "%.1f", e }'
}

run allmax AllMaxFrequency '{}'

"${perseus[@]}" optimize "$here/../synthetic-4stage.csv" --stages "$stages" --microbatches "$microbatches" \
  --p2p-power 75 --out "$out/frontier" --quiet
run plan PointSolution "{\"solution_path\": \"$out/frontier\", \"slowdown\": 1.1, \"warmup_iters\": 1}"
echo "== GPU energy of all ranks, as the fake NVML meters it: allmax $(total_energy allmax) J, plan $(total_energy plan) J"
echo "   (no saving to read here: a CPU computes as fast at every clock the fake GPU is locked to, while the fake"
echo "   GPU's power falls with the clock; examples/pytorch_pipelining/run.sh models a GPU whose clock stretches"
echo "   each computation, and measures perseus's saving against an all-max run)"
echo "records, fake-GPU call logs and rank outputs: $out"
