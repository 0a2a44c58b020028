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
  --round-timeout 0 --dead-rank-timeout 0 --max-connections-per-peer 0 "$@" > "$work/serve.out" 2> "$work/serve.err" &
server=$!
for _ in $(seq 200); do grep -q 'listening on' "$work/serve.out" 2>/dev/null && break; sleep 0.05; done
url=$(grep -o 'http://[0-9.]*:[0-9]*' "$work/serve.out")
cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$server/stat"; }
"$build/bench/perseus_bench_server_load" --url "$url" --ranks "$ranks" --rounds "$rounds" --stages 16 \
  --tensor-parallel 8 --iterations 5 --microbatches 16 > "$work/bench.out" &
bench=$!
until grep -q 'rounds start' "$work/bench.out" 2>/dev/null; do kill -0 "$bench" 2>/dev/null || break; sleep 0.05; done
registered_cpu=$(cpu)
registered_memory=$(awk '/VmRSS/ {printf "%.0f MB", $2 / 1024}' "/proc/$server/status")
wait "$bench"
cat "$work/bench.out"
echo "server: CPU $registered_cpu s to register the ranks, $(echo "$(cpu) $registered_cpu $rounds" | awk '{printf "%.2f", ($1 - $2) / $3}') s per round;" \
  "memory $registered_memory once registered, peak $(awk '/VmHWM/ {printf "%.0f MB", $2 / 1024}' "/proc/$server/status")"
kill "$server"; wait "$server" || true  # the writes queued are done, the store checkpointed
job=$(find "$work/dump" -mindepth 1 -maxdepth 1 -type d | head -1)
prof=$(find "$job" -name '*.prof.json' | wc -l)
echo "records: $prof rounds in $job"
echo "per round: $(wc -c < "$job"/1.prof.json) bytes N.prof.json, $(wc -c < "$job"/1.sched.json) bytes N.sched.json"
if command -v sqlite3 > /dev/null; then
  echo "job store per round: $(sqlite3 "$work/dump/.perseus.db" 'SELECT max(length(results)) FROM rounds') bytes" \
       "(ranks' registrations: $(sqlite3 "$work/dump/.perseus.db" 'SELECT sum(length(info)) FROM ranks') bytes)"
fi
echo "job store file: $(du -cb "$work/dump"/.perseus.db* | tail -1 | cut -f1) bytes; all records: $(du -sb "$work/dump" | cut -f1) bytes"
