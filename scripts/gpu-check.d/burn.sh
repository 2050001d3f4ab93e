#!/usr/bin/env bash
# The burn section of scripts/gpu-check (run it from there, or alone:
# [BIN=bin/gpuchaos] [BURN_SECONDS=20] [GPU=0] scripts/gpu-check.d/burn.sh OUT_DIR).
#
# On one GPU (GPU, default 0), in one run:
#   1. bf16 and tf32: PyTorch `a @ b` (torch-matmul.py), then
#      `gpuchaos burn`, then PyTorch again, each for BURN_SECONDS (bash owns SECONDS) on 8192³
#      random inputs timed the same way (CUDA events around batches of
#      products after a warm-up batch). Ours is compared with the mean of
#      the two PyTorch runs around it, so neither side gets the cooler GPU.
#      Targets: ours/PyTorch ≥ 0.97, zero mismatches.
#   2. The temperature ceiling: a burn with the ceiling CEILING_DELTA °C
#      above the temperature read just before it; target: stopped within
#      2 s of the sample that reached the ceiling.
# Prints a table and adds its rows to $SUMMARY; the JSON of every run stays
# in OUT_DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin/gpuchaos}
SECONDS_EACH=${BURN_SECONDS:-20}
GPU=${GPU:-0}
CEILING_DELTA=${CEILING_DELTA:-3}
OUT_DIR=${1:-$(mktemp -d)}
mkdir -p "$OUT_DIR"
# NVLink multicast can take a shared host's GPUs down: keep it off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,temperature.gpu,power.draw,power.limit,clocks.sm --format=csv
"$BIN" --help >/dev/null

torch_run() { python3 scripts/gpu-check.d/torch-matmul.py --dtype "$1" --seconds "$SECONDS_EACH" --device "$GPU" >"$OUT_DIR/torch-$1-$2.json"; }
for dt in bf16 tf32; do
  echo "== $dt: PyTorch, gpuchaos burn, PyTorch (${SECONDS_EACH}s each)" >&2
  torch_run "$dt" before
  "$BIN" burn --gpus "$GPU" --dtype "$dt" --duration "${SECONDS_EACH}s" --format json >"$OUT_DIR/burn-$dt.json" || echo "burn $dt exited $?" >&2
  torch_run "$dt" after
done

idle=$(nvidia-smi -i "$GPU" --query-gpu=temperature.gpu --format=csv,noheader,nounits | tr -d ' ')
ceiling=$((idle + CEILING_DELTA))
echo "== ceiling: ${ceiling} °C (read ${idle} °C just before)" >&2
"$BIN" burn --gpus "$GPU" --duration 60s --temp-ceiling "$ceiling" --format json >"$OUT_DIR/burn-ceiling.json" || echo "ceiling burn exited $?" >&2

python3 - "$OUT_DIR" "$idle" "${SUMMARY:-}" <<'PY'
import json, sys
d, idle, summary = sys.argv[1], sys.argv[2], sys.argv[3]
def load(name):
    with open(f"{d}/{name}") as f:
        return json.load(f)
rows = []
def row(check, ours, ref, ratio, target, ok):
    rows.append((check, ours, ref, ratio, target, "pass" if ok else "FAIL"))
for dt in ("bf16", "tf32"):
    b = load(f"burn-{dt}.json"); g = b["gpus"][0]
    t1, t2 = load(f"torch-{dt}-before.json"), load(f"torch-{dt}-after.json")
    ref = (t1["tflops"] + t2["tflops"]) / 2
    r = g["tflops"] / ref
    row(f"{dt} 8192³ TFLOP/s", f"{g['tflops']:.1f}", f"{t1['tflops']:.1f} / {t2['tflops']:.1f}", f"{r:.3f}", "≥ 0.97", r >= 0.97)
    row(f"{dt} mismatches", f"{g['mismatches']} in {g['checks']} checks", f"{t1['mismatches'] + t2['mismatches']}", "", "0", g["mismatches"] == 0 and not g.get("error"))
    temps = [s["temp_c"] for s in b["telemetry"] if s["temp_c"] is not None]
    power = [s["power_w"] for s in b["telemetry"] if s["power_w"] is not None]
    clocks = [s["sm_clock_mhz"] for s in b["telemetry"] if s["sm_clock_mhz"] is not None]
    print(f"{dt}: ours {g['timed_products']} timed products in batches of {g['batch_products']} "
          f"(batch TFLOP/s min/med/max {g['batch_tflops']['min']:.0f}/{g['batch_tflops']['median']:.0f}/{g['batch_tflops']['max']:.0f}), "
          f"cuBLAS {g['cublas_version']}; PyTorch {t1['timed_products']}+{t2['timed_products']} in batches of {t1['batch_products']}; "
          f"telemetry {len(b['telemetry'])} samples, peak {max(temps, default=float('nan')):.0f} °C, "
          f"peak {max(power, default=float('nan')):.0f} W, SM clock {min(clocks, default=0):.0f}–{max(clocks, default=0):.0f} MHz")
c = load("burn-ceiling.json")
x = c.get("ceiling_crossing")
if x:
    row("ceiling stop latency", f"{x['stop_latency_seconds']:.2f} s", "", "", "≤ 2 s", x["stop_latency_seconds"] <= 2 and c["stop_reason"] == "temperature-ceiling")
    print(f"ceiling {c['temp_ceiling_c']:.0f} °C (idle read {idle} °C): gpu {x['gpu']} read {x['temp_c']:.0f} °C at {x['time']}, "
          f"burn elapsed {c['elapsed_seconds']:.1f} s, stop reason {c['stop_reason']}")
else:
    row("ceiling stop latency", f"no crossing ({c['stop_reason']})", "", "", "≤ 2 s", False)
w = max(len(r[0]) for r in rows)
print()
print(f"{'check':<{w}}  {'gpuchaos':<22}  {'PyTorch before / after':<22}  {'ratio':<6}  {'target':<7}  verdict")
for r in rows:
    print(f"{r[0]:<{w}}  {r[1]:<22}  {r[2]:<22}  {r[3]:<6}  {r[4]:<7}  {r[5]}")
if summary:
    with open(summary, "a") as f:
        for r in rows:
            ref = f"PyTorch {r[2]}, ratio {r[3]}" if r[3] else r[2]
            f.write("\t".join(["burn", r[0], r[1], ref, r[4], r[5]]) + "\n")
PY
