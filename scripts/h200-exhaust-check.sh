#!/usr/bin/env bash
# h200-exhaust-check.sh — the GPU-machine check of `gpuchaos exhaust` and of
# the agent's own cost (docs/results/h200-exhaust.md). Only reads and
# allocates: it never changes clocks, power limits, persistence, compute or
# MIG mode, and never resets a GPU.
#
# Usage: scripts/h200-exhaust-check.sh [OUTDIR]
#   needs bin/gpuchaos; bin/exhaust.test (go test -c ./internal/exhaust) and
#   bin/gpuchaos-old (a build before a change, for an A/B of the agent's
#   cost) are run when present.
set -uo pipefail
out=${1:-/tmp/exhaust-check}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
smi() { nvidia-smi --query-gpu=index,memory.used,memory.free --format=csv; }

echo "== machine"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total --format=csv

echo "== exhaust vram: before"
smi
echo "\$ bin/gpuchaos exhaust vram --gpu 0 --fraction 0.9 --duration 15s"
bin/gpuchaos exhaust vram --gpu 0 --fraction 0.9 --duration 15s &
pid=$!
sleep 8
echo "== exhaust vram: held (8 s in)"
smi
wait "$pid"; echo "exit $?"
sleep 1
echo "== exhaust vram: after release"
smi

echo "== exhaust pcie"
echo "\$ bin/gpuchaos exhaust pcie --gpu 0 --duration 10s"
bin/gpuchaos exhaust pcie --gpu 0 --duration 10s; echo "exit $?"
for d in h2d d2h; do
	echo "\$ bin/gpuchaos exhaust pcie --gpu 0 --duration 4s --direction $d --format json"
	bin/gpuchaos exhaust pcie --gpu 0 --duration 4s --direction $d --format json; echo "exit $?"
done

echo "== PyTorch pinned copy_ loop, 256 MiB, gpu 0"
PYTHONUNBUFFERED=1 python3 - <<'PY'
import time, torch
n = 256 << 20
dev = torch.device("cuda:0")
h = [torch.empty(n, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
d = [torch.empty(n, dtype=torch.uint8, device=dev) for _ in range(2)]
s = [torch.cuda.Stream(dev) for _ in range(2)]
def run(dirs, secs=4.0):
    res = {k: [0, 0.0] for k in dirs}
    end = time.time() + secs
    while time.time() < end:
        ev = {}
        for k in dirs:
            i = 0 if k == "h2d" else 1
            with torch.cuda.stream(s[i]):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(s[i])
                for _ in range(8):
                    (d[i].copy_(h[i], non_blocking=True) if k == "h2d" else h[i].copy_(d[i], non_blocking=True))
                b.record(s[i])
                ev[k] = (a, b)
        for k, (a, b) in ev.items():
            b.synchronize()
            res[k][0] += 8 * n
            res[k][1] += a.elapsed_time(b) / 1e3
    return {k: round(v[0] / v[1] / 1e9, 2) for k, v in res.items()}
run(["h2d", "d2h"], 0.5)  # warm-up
print("torch", torch.__version__, "h2d alone GB/s:", run(["h2d"]))
print("torch d2h alone GB/s:", run(["d2h"]))
print("torch both at once GB/s:", run(["h2d", "d2h"]))
PY

if [ -x bin/exhaust.test ]; then
	echo "== go test ./internal/exhaust on the GPU"
	bin/exhaust.test -test.v -test.run 'OnGPU|NoDriver|BadInput' 2>&1 | tail -8
fi

echo "== agent cost, new build, 60 s, 2 GPUs"
BIN=bin/gpuchaos scripts/agent-cost.sh -b bin/gpuchaos -d 60 | tee "$out/agent-cost-new.txt"
if [ -x bin/gpuchaos-old ]; then
	echo "== agent cost, previous build (HEAD before the field-value change), 45 s"
	scripts/agent-cost.sh -b bin/gpuchaos-old -d 45 | tee "$out/agent-cost-old.txt"
fi
