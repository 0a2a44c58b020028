# Sourced by the examples' run.sh: start_server DIR SCHEDULER ARGS starts `perseus serve` (the command
# in the array `perseus`) on a free port with its records in DIR/dump and its output in DIR/serve.out,
# waits for its address, and sets server_pid and url. Exits 1 with the server's output when it does
# not start. free_port prints a free TCP port (with the Python in $python).
start_server() {
  local dir=$1 scheduler=$2 scheduler_args=$3
  "${perseus[@]}" serve --port 0 --dump-dir "$dir/dump" --log-level warning --scheduler "$scheduler" \
    --scheduler-args "$scheduler_args" >"$dir/serve.out" 2>&1 &
  server_pid=$!
  url=""
  for _ in $(seq 100); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*' "$dir/serve.out" || true)
    [ -n "$url" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || { cat "$dir/serve.out" >&2; exit 1; }
    sleep 0.1
  done
  echo "run.sh: perseus serve did not start" >&2
  exit 1
}

free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
