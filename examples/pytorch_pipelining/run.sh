#!/usr/bin/env bash
# Watch perseus save energy on a laptop: a small MLP cut into 4 stages, trained with PyTorch's own
# pipelining (Schedule1F1B, 8 microbatches) on 4 CPU processes, each rank's GPU simulated on
# perseus's fake NVML (simulated_gpu.py: a GPU's time and power per SM clock; the clock perseus locks
# stretches each forward and backward as it would on a GPU). Two runs of the same script:
#   1. perseus: `perseus serve --scheduler Perseus` measures the all-max baseline, profiles every
#      stage's clocks online, plans and deploys; a window of iterations is measured once deployed;
#   2. allmax:  `perseus serve --scheduler AllMaxFrequency`, every instruction at the top clock.
# Prints the energy saved and the slowdown against the all-max run, and the share of
# `perseus whatif`'s ideal saving for the profile the turnkey loop measured.
# Usage: examples/pytorch_pipelining/run.sh [OUT_DIR]        (default out/pytorch-pipelining)
# Environment: WINDOW (measured iterations, default 10), REPORT_EVERY (iterations per round, default
# 2), TIME_SCALE (the model's instruction times scaled, default 1), SCHEDULER_ARGS (the Perseus
# scheduler's, default '{"warmup_rounds": 3, "max_baseline_rounds": 12}'), PYTHON (default python3), PERSEUS (the perseus
# command, default "$PYTHON -m perseus"). Every rank's output lands in OUT_DIR/RUN/rankR.out, its
# fake-GPU call log in OUT_DIR/RUN/gpuR.log, the server's records in OUT_DIR/RUN/dump/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${1:-out/pytorch-pipelining}" && cd "${1:-out/pytorch-pipelining}" && pwd)
python=${PYTHON:-python3}
read -r -a perseus <<<"${PERSEUS:-$python -m perseus}"
stages=4
window=${WINDOW:-10} report_every=${REPORT_EVERY:-2} time_scale=${TIME_SCALE:-1}
scheduler_args=${SCHEDULER_ARGS:-'{"warmup_rounds": 3, "max_baseline_rounds": 12}'}
fake_nvml=$("$python" -c 'import perseus; print(perseus.fake_nvml_library())')
block_power=$(cd "$here" && "$python" -c 'import simulated_gpu; print(simulated_gpu.BLOCK_POWER_W)')

echo "== GPU library: perseus's fake NVML (simulated GPUs, not measurements), wherever this runs:"
echo "   every rank's GPU is $fake_nvml, driven by the GPU model in"
echo "   examples/pytorch_pipelining/simulated_gpu.py: each forward and backward takes the time the model gives"
echo "   it at the clock perseus locked (the CPU computes, then sleeps the rest) and adds the energy the model"
echo "   gives it; waiting draws $block_power W. The savings below are the model's, timed by this machine."

server_pid=""
rank_pids=()
cleanup() {
  for pid in "${rank_pids[@]}" $server_pid; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# shellcheck source=../serve.sh
source "$here/../serve.sh"

# run RUN SCHEDULER ARGS TRAIN_ARGS...: one server, four ranks, the job's status, stop the server.
run() {
  local name=$1 scheduler=$2 args=$3 dir="$out/$1"
  shift 3
  rm -rf "$dir" && mkdir -p "$dir"
  local url
  start_server "$dir" "$scheduler" "$args"
  local master_port
  master_port=$(free_port)
  rank_pids=()
  for ((rank = 0; rank < stages; ++rank)); do
    RANK=$rank WORLD_SIZE=$stages MASTER_ADDR=127.0.0.1 MASTER_PORT=$master_port \
      PERSEUS_NVML_LIBRARY="$fake_nvml" PERSEUS_FAKE_NVML_POWER_W="$block_power" \
      PERSEUS_FAKE_NVML_LOG="$dir/gpu$rank.log" PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" \
      "$python" "$here/train_pipeline.py" --server "$url" --window "$window" --report-every "$report_every" \
      --time-scale "$time_scale" --out "$dir/window$rank.json" "$@" >"$dir/rank$rank.out" 2>&1 &
    rank_pids+=($!)
  done
  local failed=0
  for pid in "${rank_pids[@]}"; do wait "$pid" || failed=1; done
  rank_pids=()
  "$python" - "$url" >"$dir/status.json" <<'EOF'
import json, sys, urllib.parse, urllib.request
url = sys.argv[1]
(job,) = json.load(urllib.request.urlopen(f"{url}/jobs", timeout=10))
print(json.dumps(json.load(urllib.request.urlopen(f"{url}/jobs/{urllib.parse.quote(job['job_id'], safe='')}",
                                                  timeout=10))))
EOF
  kill "$server_pid" && wait "$server_pid" || true
  server_pid=""
  if ((failed)); then
    tail -n 20 "$dir"/rank*.out >&2
    echo "run.sh: a rank of the $name run failed" >&2
    exit 1
  fi
  echo "== $name ($scheduler)"
  grep -h '^rank [0-9]*: perseus' "$dir"/rank*.out
}

run perseus Perseus "$scheduler_args" --after-deployed
run allmax AllMaxFrequency '{}' --warmup 2
(cd "$here" && "$python" report.py "$out" "${perseus[@]}")
echo "records, fake-GPU call logs and rank outputs: $out"
