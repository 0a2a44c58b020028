#!/usr/bin/env bash
# A Slurm batch script: perseus serve on the job's first node, one training rank per GPU on every node
# (started by srun with torch.distributed's environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
# MASTER_PORT), ranks talking to the server over the network with a token made for this job. Submit with
#   sbatch --nodes=2 --ntasks-per-node=8 --gpus-per-node=8 docs/deploy/slurm-train.sh train.py [ARGS...]
# (train.py: a training script using perseus.torch.Client, e.g. examples/pytorch/pipeline_train.py,
# whose --server flag takes the URL). See docs/cluster.md.
#SBATCH --job-name=perseus-train
#SBATCH --exclusive
set -euo pipefail
script=${1:?usage: sbatch docs/deploy/slurm-train.sh TRAIN_SCRIPT [ARGS...]}
shift
perseus=${PERSEUS:-perseus}
python=${PYTHON:-python3}
gpus_per_node=${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-8}}
port=${PERSEUS_PORT:-7787}
records=${PERSEUS_RECORDS:-$PWD/perseus-$SLURM_JOB_ID}

# The batch script runs on the allocation's first node: the server runs here too.
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
head=${nodes[0]}
mkdir -p "$records"
token_file="$records/token"
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token_file")
export PERSEUS_TOKEN=$(cat "$token_file")   # srun passes the environment on to every rank

"$perseus" serve --host 0.0.0.0 --port "$port" --token-file "$token_file" --dump-dir "$records" \
  --scheduler Perseus --log-level warning >"$records/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for try in $(seq 100); do                         # wait up to 10 s for the server to listen
  kill -0 $server 2>/dev/null || { cat "$records/serve.log" >&2; exit 1; }
  grep -q "listening on" "$records/serve.log" && break
  sleep 0.1
done
grep -q "listening on" "$records/serve.log" || { echo "perseus serve did not start" >&2; exit 1; }

# One task per GPU; each becomes a torch.distributed rank. Without the server, ranks train at default clocks.
export MASTER_ADDR=$head MASTER_PORT=${MASTER_PORT:-29500}
srun --ntasks-per-node="$gpus_per_node" --kill-on-bad-exit=1 bash -c \
  'export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID; exec "$@"' rank \
  "$python" "$script" "$@" --server "http://$head:$port"

"$perseus" status --server "http://$head:$port"
