#!/usr/bin/env bash
# nccl-check.sh — the NCCL layer's headline figures on a 2-GPU machine, in one run:
#   1. every collective at 256 MiB bf16 in `gpuchaos nccl`, one process
#      driving both GPUs and one process per rank (TCP rendezvous), against
#      PyTorch's (scripts/nccl-torch.py under torchrun) in the same run;
#      target for all-reduce: ≥ 0.97× PyTorch in both modes, 0 wrong;
#   2. the collective tracer (gpuchaos trace collectives, uprobes on the
#      real libnccl.so.2) watching the two-process benchmark with rank 1
#      delayed on purpose: it must name rank 1, with a lag near the delay.
# Prints a table; raw JSON stays in OUT_DIR.
#
# Usage: [BIN=bin/gpuchaos] scripts/nccl-check.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/gpuchaos}
out=${1:-$(mktemp -d /tmp/nccl-check.XXXXXX)}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
ops="all_reduce all_gather reduce_scatter broadcast all_to_all"
size=256MiB
common=(--min-bytes "$size" --max-bytes "$size" --warmup 5 --iters 20 --dtype bf16 --format json)

# TRACE_ONLY=1 skips the bandwidth part (the table then says "no result").
if [ -z "${TRACE_ONLY:-}" ]; then
"$BIN" nccl --gpus 0,1 --op all "${common[@]}" >"$out/single.json" 2>"$out/single.err"
echo "one process: exit $?" >&2
"$BIN" nccl --rank 1 --nranks 2 --rendezvous 127.0.0.1:29611 --gpu 1 --op all "${common[@]}" >"$out/rank1.json" 2>"$out/rank1.err" &
r1=$!
"$BIN" nccl --rank 0 --nranks 2 --rendezvous 127.0.0.1:29611 --gpu 0 --op all "${common[@]}" >"$out/multi.json" 2>"$out/multi.err"
echo "two processes: exit $? (rank 1: $(wait $r1; echo $?))" >&2
for op in $ops; do
	timeout 120 torchrun --standalone --nproc-per-node 2 scripts/nccl-torch.py --op "$op" --dtype bf16 --bytes 268435456 --warmup 5 --iters 20 \
		>"$out/torch-$op.json" 2>"$out/torch-$op.err"
	echo "torch $op: exit $?" >&2
done
fi

# The tracer on a straggler: rank 1 sleeps 20 ms before each collective.
# RANK in each process's environment is how the tracer labels ranks, as
# torchrun's ranks carry it.
lib=$(ldconfig -p | awk '/libnccl.so.2 /{print $NF; exit}')
"$BIN" trace collectives --lib "$lib" --duration 25s --format json >"$out/trace.json" 2>"$out/trace.err" &
tp=$!
sleep 3
straggle=(--min-bytes 64MiB --max-bytes 64MiB --warmup 2 --iters 200 --op all_reduce --format json)
RANK=1 "$BIN" nccl --rank 1 --nranks 2 --rendezvous 127.0.0.1:29612 --gpu 1 --delay-rank 1 --delay 20ms "${straggle[@]}" >"$out/straggle1.json" 2>"$out/straggle1.err" &
s1=$!
RANK=0 "$BIN" nccl --rank 0 --nranks 2 --rendezvous 127.0.0.1:29612 --gpu 0 --delay-rank 1 --delay 20ms "${straggle[@]}" >"$out/straggle0.json" 2>"$out/straggle0.err"
wait $s1
wait $tp
echo "trace: exit $? (lib $lib)" >&2
cat "$out/trace.err" >&2

python3 - "$out" $ops <<'PY'
import json, sys
d, ops = sys.argv[1], sys.argv[2:]
def load(name):
    try:
        return json.load(open(f"{d}/{name}"))
    except (OSError, ValueError):
        return None
def ours(doc, op):
    for r in (doc or {}).get("results", []):
        if r["op"] == op:
            return r
single, multi = load("single.json"), load("multi.json")
rows, bad = [], 0
for op in ops:
    t = load(f"torch-{op}.json") or {}
    ref = t.get("busbw_gbps") or t.get("busbw")
    for mode, doc in (("one process", single), ("two processes", multi)):
        r = ours(doc, op)
        if not r or not ref:
            rows.append((op, mode, "no result", f"{ref}", "", "FAIL")); bad += 1; continue
        ratio = r["busbw_gbps"] / ref
        ok = r["wrong"] == 0 and (ratio >= 0.97 or op != "all_reduce")
        bad += 0 if ok else 1
        rows.append((op, mode, f"{r['busbw_gbps']:.1f} GB/s, {r['wrong']} wrong", f"{ref:.1f}", f"{ratio:.3f}", "pass" if ok else "FAIL"))
print(f"NCCL {(single or {}).get('nccl_version')} ({(single or {}).get('nccl_library')}); PyTorch {(load('torch-all_reduce.json') or {}).get('torch')} with NCCL {(load('torch-all_reduce.json') or {}).get('nccl')}")
print(f"{'op':<15} {'mode':<14} {'gpuchaos busbw':<26} {'PyTorch':<8} {'ratio':<6} verdict")
for r in rows:
    print(f"{r[0]:<15} {r[1]:<14} {r[2]:<26} {r[3]:<8} {r[4]:<6} {r[5]}")
tr = load("trace.json")
if tr:
    rep = tr.get("report", {})
    f = [x for x in rep.get("findings") or [] if x.get("kind") == "straggler"]
    print("tracer attached:", tr.get("attached"), "collectives:", rep.get("collectives"), "lost:", rep.get("lost"))
    for r in rep.get("ranks") or []:
        print(f"  rank {r.get('label') or r.get('pid')}: calls {r['calls']}, last in {r['last']}, median lag {r['median_lag_ns'] / 1e6:.2f} ms, straggler {r['straggler']}")
    print("tracer findings:", json.dumps(rep.get("findings")))
    named = [x["rank"].get("label") or x["rank"].get("pid") for x in f]
    print("tracer: straggler named:", named, "lag ms:", [round(x.get("value_ns", 0) / 1e6, 2) for x in f])
else:
    print("tracer: no result; see trace.err")
sys.exit(1 if bad else 0)
PY
