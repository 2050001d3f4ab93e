#!/usr/bin/env bash
# The exhaust section of scripts/gpu-check, on GPU $GPU:
#   vram  hold 90 % of the free memory for 15 s; nvidia-smi's memory.used
#         while held must have grown by what the hold reports, and must be
#         back where it was once released.
#   pcie  copy storms from pinned memory, h2d, d2h and both at once, beside
#         PyTorch's pinned copy_ loop of the same size timed the same way
#         (CUDA events around batches); reported as a ratio.
# Only allocates and copies: no clock, power, persistence, compute or MIG
# setting is touched.
#
# Usage: [BIN=bin/gpuchaos] [GPU=0] scripts/gpu-check.d/exhaust.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu-check.d/row.sh
BIN=${BIN:-bin/gpuchaos}
GPU=${GPU:-0}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
used() { nvidia-smi -i "$GPU" --query-gpu=memory.used --format=csv,noheader,nounits | tr -d ' '; }

before=$(used)
"$BIN" exhaust vram --gpu "$GPU" --fraction 0.9 --duration 15s --format json >"$out/vram.json" 2>"$out/vram.err" &
pid=$!
sleep 8
held=$(used)
wait "$pid"
rc=$?
sleep 1
after=$(used)
python3 - "$out/vram.json" "$before" "$held" "$after" "$rc" <<'PY' >"$out/rows.tsv"
import json, sys
path, before, held, after, rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
try:
    v = json.load(open(path))
except (OSError, ValueError):
    print(f"vram hold 90 %\texit {rc}, no report\t\t\t0"); sys.exit()
mib = v["held_bytes"] / 2**20
grew = held - before
ok = rc == 0 and abs(grew - mib) <= 0.01 * mib
print(f"vram hold 90 % of free\t{mib / 1024:.1f} GiB held, {100 * v['held_bytes'] / v['free_before_bytes']:.1f} % of free\tnvidia-smi +{grew / 1024:.1f} GiB\twithin 1 %\t{int(ok)}")
print(f"vram released\t{after} MiB used after\t{before} MiB before\tsame\t{int(after == before)}")
PY

for d in h2d d2h both; do
	"$BIN" exhaust pcie --gpu "$GPU" --duration 5s --direction "$d" --format json >"$out/pcie-$d.json" 2>>"$out/pcie.err"
done
python3 - "$GPU" <<'PY' >"$out/torch-pcie.json"
import json, sys, time, torch
n = 256 << 20
dev = torch.device("cuda", int(sys.argv[1]))
h = [torch.empty(n, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
d = [torch.empty(n, dtype=torch.uint8, device=dev) for _ in range(2)]
s = [torch.cuda.Stream(dev) for _ in range(2)]
def run(dirs, secs=5.0):
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
    return {k: v[0] / v[1] / 1e9 for k, v in res.items()}
run(["h2d", "d2h"], 0.5)
print(json.dumps({"torch": torch.__version__, "h2d": run(["h2d"]), "d2h": run(["d2h"]), "both": run(["h2d", "d2h"])}))
PY
python3 - "$out" <<'PY' >>"$out/rows.tsv"
import json, sys
d = sys.argv[1]
t = json.load(open(f"{d}/torch-pcie.json"))
for mode in ("h2d", "d2h", "both"):
    try:
        r = json.load(open(f"{d}/pcie-{mode}.json"))
    except (OSError, ValueError):
        print(f"pcie {mode} GB/s\tno result\t\t\t0"); continue
    for dr in (("h2d", "d2h") if mode == "both" else (mode,)):
        ours = r[dr]["gb_per_s"] if isinstance(r.get(dr), dict) and "gb_per_s" in r[dr] else None
        ref = t[mode][dr]
        if ours is None:
            print(f"pcie {mode} {dr} GB/s\tunreadable result\t{ref:.1f}\t\t0"); continue
        print(f"pcie {mode}: {dr} GB/s\t{ours:.1f}\tPyTorch {ref:.1f}, ratio {ours / ref:.3f}\t≥ 0.97\t{int(ours / ref >= 0.97)}")
PY
rows exhaust "$out/rows.tsv"
