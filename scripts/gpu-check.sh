#!/usr/bin/env bash
# gpu-check.sh — the whole node-layer check on any machine with
# NVIDIA GPUs, PyTorch (python3) and a built gpuchaos, run as root. Each
# section is a script in scripts/gpu-check/ that keeps its raw output in
# OUT_DIR/SECTION and adds rows to OUT_DIR/summary.tsv; this prints them as
# one table at the end and exits 1 if any row failed.
#
#   burn     bf16 and tf32 burn against PyTorch's matmul, corruption check,
#            temperature-ceiling stop (burn.sh)
#   agent    the agent's /metrics against nvidia-smi at the same instant,
#            idle and under load, and the agent's own CPU and memory
#            (agent.py)
#   xid      kernel-log XID lines to the watcher and to the agent's
#            /metrics: p99 latency over 200, a 1000-line burst (xid.sh)
#   exhaust  VRAM hold and PCIe storm against PyTorch's copies (exhaust.sh)
#   local    experiments through the engine on --target local (XID, VRAM,
#            SM burn, noisy neighbour) with probes on the kernel log and
#            the agent's exporter, and a SIGKILLed run recovered by the
#            next (local.sh)
#   image    the chart's container image (IMAGE, scripts/build-image)
#            unpacked and run under chroot with only the driver's NVML
#            added, as the NVIDIA runtime runs the agent's pod (image.sh)
#
# It never changes clocks, power limits, persistence, compute or MIG mode,
# never resets a GPU, and bounds every burn to 60 s.
#
# Usage: [BIN=bin/gpuchaos] [GPU=0] scripts/gpu-check.sh [-o OUT_DIR] [SECTION...]
set -uo pipefail
cd "$(dirname "$0")/.."
out=""
while getopts "o:" o; do
	case $o in
	o) out=$OPTARG ;;
	*) sed -n '2,24p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(burn agent xid exhaust local)
out=${out:-$(mktemp -d /tmp/gpu-check.XXXXXX)}
mkdir -p "$out"
export BIN=${BIN:-bin/gpuchaos} GPU=${GPU:-0} SUMMARY=$out/summary.tsv
# NVLink multicast can take a shared host's GPUs down: keep it off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
: >"$SUMMARY"

[ -x "$BIN" ] || { echo "gpu-check: $BIN is not an executable gpuchaos (set BIN)" >&2; exit 2; }
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,temperature.gpu,power.draw,power.limit,memory.used,memory.total --format=csv |
	tee "$out/machine.csv"

for s in "${sections[@]}"; do
	dir=$out/$s
	mkdir -p "$dir"
	echo "== $s ($(date -u +%T))" >&2
	t0=$(date +%s)
	case $s in
	agent) python3 scripts/gpu-check/agent.py "$dir" ;;
	burn | xid | exhaust | local | image) bash "scripts/gpu-check/$s.sh" "$dir" ;;
	*) echo "gpu-check: unknown section $s (burn agent xid exhaust local image)" >&2; false ;;
	esac
	rc=$?
	echo "== $s done in $(($(date +%s) - t0)) s, exit $rc" >&2
	if [ $rc -ne 0 ] && ! grep -q "^$s	" "$SUMMARY"; then
		printf '%s\tsection ran\texit %d\t\t\tFAIL\n' "$s" "$rc" >>"$SUMMARY"
	fi
done

python3 - "$SUMMARY" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
head = ["section", "check", "gpuchaos", "reference", "target", "verdict"]
rows = [r + [""] * (6 - len(r)) for r in rows]
w = [max(len(x[i]) for x in rows + [head]) for i in range(6)]
print()
for r in [head] + rows:
    print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip())
bad = [r for r in rows if r[5] != "pass"]
print(f"\n{len(rows)} checks, {len(bad)} failed")
sys.exit(1 if bad else 0)
PY
