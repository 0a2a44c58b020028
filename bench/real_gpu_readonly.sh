#!/usr/bin/env bash
# Read-only checks of perseus against a real NVIDIA driver, for a machine with a GPU that perseus
# must not change (it sets no clock and no limit): `perseus gpu` through the driver's NVML, and
# perseus's energy counter against nvidia-smi's power samples integrated over the same interval,
# idle and under a PyTorch matrix-product load. Needs nvidia-smi and python3 with CUDA PyTorch.
# Usage: bench/real_gpu_readonly.sh OUT_DIR   (PERSEUS: the perseus binary, default build/src/perseus)
set -uo pipefail
out="${1:?usage: bench/real_gpu_readonly.sh OUT_DIR}"
perseus="${PERSEUS:-build/src/perseus}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
settings() {  # the settings a planner could change: limits and clocks that are set, not readings
  nvidia-smi -q -d CLOCK,POWER,PERFORMANCE | grep -i "limit\|applications\|locked\|default"
}
settings > "$out/settings_before.txt"
nvidia-smi --query-gpu=name,driver_version,power.limit,power.default_limit,clocks.max.sm --format=csv
"$perseus" gpu --all-clocks | tee "$out/perseus_gpu.txt" || exit 1
energy() { "$perseus" gpu | awk '/energy counter/{print $3; exit}'; }
nvidia-smi --query-gpu=timestamp,power.draw --format=csv,noheader,nounits -lms 100 > "$out/power.csv" &
sampler=$!
load='import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(50): a @ b
    torch.cuda.synchronize()'
for phase in idle load; do
  t0=$(date +%s.%N); e0=$(energy)
  if [ "$phase" = load ]; then python3 -c "$load" 20; else sleep 10; fi
  t1=$(date +%s.%N); e1=$(energy)
  echo "$phase $t0 $t1 $e0 $e1" >> "$out/energy.txt"
done
kill "$sampler"; wait "$sampler" 2>/dev/null
settings > "$out/settings_after.txt"
if diff "$out/settings_before.txt" "$out/settings_after.txt"; then echo "settings unchanged"; else echo "SETTINGS CHANGED"; exit 1; fi
python3 - "$out" <<'PY'
import datetime, sys
out = sys.argv[1]
def stamp(text): return datetime.datetime.strptime(text.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
samples = [(stamp(t), float(p)) for t, p in (line.split(",") for line in open(f"{out}/power.csv") if "," in line)]
for line in open(f"{out}/energy.txt"):
    phase, t0, t1, e0, e1 = line.split(); t0, t1 = float(t0), float(t1)
    inside = [s for s in samples if t0 <= s[0] <= t1]
    integrated = sum((b[0] - a[0]) * a[1] for a, b in zip(inside, inside[1:]))
    span = inside[-1][0] - inside[0][0]
    measured = float(e1) - float(e0)
    print(f"{phase}: perseus {measured / (t1 - t0):.1f} W mean over {t1 - t0:.2f} s; "
          f"nvidia-smi {integrated / span:.1f} W mean over {span:.2f} s ({len(inside)} samples); "
          f"difference {100 * (measured / (t1 - t0)) / (integrated / span) - 100:+.2f}%")
PY
