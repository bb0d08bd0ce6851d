#!/usr/bin/env bash
# scripts/gpu-check.sh: gpusnap's real NVML path on a host with a GPU, in one
# run, for a maintainer to read and to commit fixtures from. As root:
#   go build -o gpusnap ./cmd/gpusnap && OUT=/tmp/gpu-check scripts/gpu-check.sh
# It takes a --require-nvml snapshot, runs ps, exports the NVML state as
# fixtures, and diffs around a PyTorch tenant that allocates 2 GiB, forks a
# child and exits, leaving the child holding the device: the ghost. Then it
# kills the ghost (by PID) and diffs again. Then the same tenant under a
# parent that never reaps it (a zombie NVML keeps listing), diffed against a
# new baseline. Everything lands in $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
state=$(mktemp -d) # 0700: the store refuses a directory others can write
G="./gpusnap --db $state/gpusnap.db"
step() { echo "== $*"; }

step nvidia-smi
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1; head -20 "$OUT/nvidia-smi.txt"

step "snapshot --require-nvml --json"
$G --require-nvml snapshot --json >"$OUT/snapshot.json"; echo "exit $?"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); n=d["nvml"]; print("processes", len(d["processes"]), "nvml", n.get("source"), n.get("driver_version"), n.get("nvml_version"), n.get("cuda_driver_version"), [(g["name"], g.get("memory")) for g in n.get("devices", [])], "missing", n.get("missing"))' "$OUT/snapshot.json"

step "export idle fixture"
$G snapshot --no-store --export-nvml-fixture "$OUT/nvml-idle.json" >/dev/null; echo "exit $?"

step baseline
$G baseline --tenant gpu-check; echo "exit $?"

step "tenant: allocate 2 GiB, fork a child, exit"
python3 - "$OUT/ghost.pid" <<'PY'
import os, sys, time, torch
x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
pid = os.fork()
if pid == 0:
    os.setsid()
    time.sleep(600)  # the ghost: inherits the tenant's descriptors and mappings
    os._exit(0)
open(sys.argv[1], "w").write(str(pid))
print("tenant", os.getpid(), "ghost", pid, flush=True)
os._exit(0)
PY
sleep 2
ghost=$(cat "$OUT/ghost.pid")

step "ps with the ghost"
$G ps >"$OUT/ps-ghost.txt" 2>&1; echo "exit $?"; cat "$OUT/ps-ghost.txt"

step "export ghost fixture"
$G snapshot --no-store --export-nvml-fixture "$OUT/nvml-ghost.json" >/dev/null; echo "exit $?"

step "diff --tenant (expect exit 1)"
$G diff --tenant gpu-check --json >"$OUT/diff.json"; echo "exit $?"
$G diff --tenant gpu-check >"$OUT/diff.txt"; echo "exit $?"; head -60 "$OUT/diff.txt"

step "bundle and verify"
$G bundle --tenant gpu-check -o "$OUT/bundle.tar.gz" && $G verify "$OUT/bundle.tar.gz" | tail -3; echo "exit $?"

step "kill the ghost, diff again (expect exit 0)"
kill -9 "$ghost"; sleep 3
$G ps >"$OUT/ps-after.txt" 2>&1
$G diff --tenant gpu-check >"$OUT/diff-after-kill.txt"; echo "exit $?"; head -20 "$OUT/diff-after-kill.txt"
$G snapshot --no-store --export-nvml-fixture "$OUT/nvml-after-kill.json" >/dev/null

step "zombie tenant: its parent never reaps it (expect orphan and zombie memory)"
$G baseline --tenant gpu-check-zombie >/dev/null; echo "exit $?"
python3 - "$OUT/zombie.pids" <<'PY' &
import os, sys, time
tenant = os.fork()
if tenant == 0:
    import torch
    x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    torch.cuda.synchronize()
    ghost = os.fork()
    if ghost == 0:
        os.setsid()
        time.sleep(600)
        os._exit(0)
    open(sys.argv[1], "w").write(f"{os.getppid()} {os.getpid()} {ghost}")
    os._exit(0)
time.sleep(600)  # the parent: never waits, so the tenant stays a zombie
PY
for _ in $(seq 60); do [ -s "$OUT/zombie.pids" ] && break; sleep 0.5; done
sleep 2
read -r zparent ztenant zghost <"$OUT/zombie.pids"
echo "parent $zparent tenant $ztenant ($(awk '{print $3}' /proc/$ztenant/stat)) ghost $zghost"
$G diff --tenant gpu-check-zombie >"$OUT/diff-zombie.txt"; echo "exit $?"; grep -E '^gpusnap diff|orphan_gpu_process|zombie_gpu_memory|unexpected_gpu_process' "$OUT/diff-zombie.txt"
kill -9 "$zghost" "$zparent"
rm -rf "$state"
