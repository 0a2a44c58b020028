#!/usr/bin/env bash
# One `perseus serve` process, one job of many ranks (default 16,384: 16 stages x 128 pipelines x
# 8 tensor-parallel), driven round by round by perseus_bench_server_load over loopback. Prints the
# load benchmark's rounds per second and latencies, then the server's peak memory (VmHWM), and what
# the job's records hold per round: files, bytes, and the job store's growth.
#
#   bench/server_scale.sh [BUILD_DIR] [RANKS] [ROUNDS] [SCHEDULER] [EXTRA SERVE FLAGS...]
set -euo pipefail
build=${1:-build}
ranks=${2:-16384}
rounds=${3:-20}
scheduler=${4:-InstructionProfiler3D}
shift $(( $# < 4 ? $# : 4 ))
work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"
"$build/src/perseus" serve --port 0 --dump-dir "$work/dump" --scheduler "$scheduler" --log-level warning \
  --round-timeout 0 --dead-rank-timeout 0 "$@" > "$work/serve.out" 2> "$work/serve.err" &
server=$!
for _ in $(seq 200); do grep -q 'listening on' "$work/serve.out" 2>/dev/null && break; sleep 0.05; done
url=$(grep -o 'http://[0-9.]*:[0-9]*' "$work/serve.out")
"$build/bench/perseus_bench_server_load" --url "$url" --ranks "$ranks" --rounds "$rounds" --stages 16 \
  --tensor-parallel 8 --iterations 5 --microbatches 16
echo "server peak memory: $(awk '/VmHWM/ {printf "%.0f MB", $2 / 1024}' "/proc/$server/status")," \
  "CPU: $(awk -v hz="$(getconf CLK_TCK)" '{printf "%.1f s", ($14 + $15) / hz}' "/proc/$server/stat") (registration and all rounds)"
sleep 1  # the records are written on the server's writer thread
job=$(find "$work/dump" -mindepth 1 -maxdepth 1 -type d | head -1)
prof=$(find "$job" -name '*.prof.json' | wc -l)
echo "records: $prof rounds in $job"
echo "per round: $(cat "$job"/1.prof.json | wc -c) bytes N.prof.json, $(cat "$job"/1.sched.json | wc -c) bytes N.sched.json"
echo "job store: $(du -cb "$work/dump"/.perseus.db* | tail -1 | cut -f1) bytes for the job, its $ranks ranks and $prof rounds"
echo "all records: $(du -sb "$work/dump" | cut -f1) bytes"
