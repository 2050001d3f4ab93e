#!/usr/bin/env bash
# nccl-faults.sh — the NCCL environment faults on a real 2-GPU box, each
# applied with `gpuchaos exec --fault F -- COMMAND` and measured three ways:
# a 256 MiB bf16 all-reduce in PyTorch (scripts/nccl-torch.py), the same in
# `gpuchaos nccl`, and a DDP training step (scripts/ddp-step.py). Runs a
# baseline first and again at the end (to show drift), then prints a table:
# bus bandwidth and its factor against the baseline for both benchmarks,
# the DDP step time and its slowdown, and DESIGN.md §5's factor where one
# was measured, with the relative difference and a within-15% verdict.
#
# Usage: scripts/nccl-faults.sh [OUTDIR]          (default /tmp/nccl-faults)
#   BIN=bin/gpuchaos        the gpuchaos binary (exec and nccl)
#   TORCHRUN=torchrun       PYTHON=python3 (for the table)
#   STEP_TIMEOUT=90         seconds allowed to each benchmark run
#   GPUS=0,1                the two GPUs (CUDA_VISIBLE_DEVICES for torchrun)
#   NCCL_DEBUG=INFO         kept in each run's .err, to show the transport
#                           NCCL picked ("via P2P/…", "via SHM", "NET/Socket");
#                           set NCCL_DEBUG= (empty) to silence it
#   CASES="..."             override the list of cases (see below)
#   DDP_SECONDS=15          timed seconds of each DDP step run
# Every run is bounded by `timeout`; under nccl.socket-fallback (about 100×
# slower) a 256 MiB all-reduce takes about 90 ms, so 25 iterations and the
# DDP step's --max-seconds keep each run well under a minute.
# Everything lands in OUTDIR/<case>/{torch,gpuchaos,ddp}.{json,err,rc} plus
# OUTDIR/summary.json and OUTDIR/table.txt.
set -uo pipefail
out=${1:-/tmp/nccl-faults}
BIN=${BIN:-bin/gpuchaos}
TORCHRUN=${TORCHRUN:-torchrun}
PYTHON=${PYTHON:-python3}
STEP_TIMEOUT=${STEP_TIMEOUT:-90}
GPUS=${GPUS:-0,1}
SIZE=268435456
here=$(cd "$(dirname "$0")" && pwd)

# Multicast (NVLS, symmetric memory) is off on the lent machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_DEBUG=${NCCL_DEBUG-INFO}
[ -n "$NCCL_DEBUG" ] || unset NCCL_DEBUG
export PYTHONUNBUFFERED=1

# A case is "LABEL FAULT [KEY=VALUE...]"; FAULT "-" runs without gpuchaos exec.
# nccl.algo skips NVLS (off above, so NCCL would fail at init) and the
# Collnet algorithms (no SHARP here).
default_cases='baseline -
nccl.p2p-off nccl.p2p-off
nccl.shm-off nccl.shm-off
nccl.socket-fallback nccl.socket-fallback
nccl.proto:LL nccl.proto proto=LL
nccl.proto:LL128 nccl.proto proto=LL128
nccl.proto:Simple nccl.proto proto=Simple
nccl.algo:Ring nccl.algo algo=Ring
nccl.algo:Tree nccl.algo algo=Tree
nccl.one-channel nccl.one-channel
nccl.ib-timeout nccl.ib-timeout
baseline-end -'
CASES=${CASES:-$default_cases}

for need in "$BIN" "$here/nccl-torch.py" "$here/ddp-step.py"; do
	[ -e "$need" ] || { echo "nccl-faults.sh: $need is missing" >&2; exit 2; }
done
command -v "$TORCHRUN" >/dev/null || { echo "nccl-faults.sh: $TORCHRUN not on PATH" >&2; exit 2; }
mkdir -p "$out"
: >"$out/cases.txt"

echo "== machine"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -4
"$BIN" exec --list | tee "$out/faults.txt"

# bench DIR NAME CMD... — run one benchmark, bounded, and keep its stdout,
# stderr and exit status; a timeout shows as rc 124 (137 after the kill).
bench() {
	local dir=$1 name=$2
	shift 2
	printf '$ %s\n' "$*" >>"$dir/commands.txt"
	local t0=$SECONDS
	timeout -k 15 "$STEP_TIMEOUT" "$@" >"$dir/$name.json" 2>"$dir/$name.err"
	local rc=$?
	echo "$rc" >"$dir/$name.rc"
	printf '   %-9s rc=%-3s %3ss\n' "$name" "$rc" "$((SECONDS - t0))"
	if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		# torchrun's ranks live in sessions of their own: a torchrun killed
		# after the grace cannot stop them, and they would skew the next case.
		sleep 2
		echo "   timed out; processes still on the GPUs:"
		nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader | sed 's/^/     /'
	fi
}

while read -r label fault params; do
	[ -n "$label" ] || continue
	dir="$out/$label"
	rm -rf "$dir" && mkdir -p "$dir"
	echo "$label" >>"$out/cases.txt"
	under=()
	if [ "$fault" != "-" ]; then
		under=("$BIN" exec --fault "$fault")
		for p in $params; do under+=(--param "$p"); done
		"${under[@]}" --dry-run --format json >"$dir/delta.json"
		under+=(--)
	fi
	echo "== $label"
	CUDA_VISIBLE_DEVICES=$GPUS bench "$dir" torch "${under[@]}" "$TORCHRUN" --standalone --nproc-per-node 2 \
		"$here/nccl-torch.py" --op all_reduce --dtype bf16 --bytes "$SIZE" --warmup 5 --iters 25
	bench "$dir" gpuchaos "${under[@]}" "$BIN" nccl --gpus "$GPUS" --op all_reduce --dtype bf16 \
		--min-bytes "$SIZE" --max-bytes "$SIZE" --warmup 5 --iters 25 --format json
	CUDA_VISIBLE_DEVICES=$GPUS bench "$dir" ddp "${under[@]}" "$TORCHRUN" --standalone --nproc-per-node 2 \
		"$here/ddp-step.py" --max-seconds "${DDP_SECONDS:-15}"
done <<<"$CASES"

echo "== summary"
"$PYTHON" - "$out" "$SIZE" <<'PY' | tee "$out/table.txt"
import json, os, re, sys

out, size = sys.argv[1], int(sys.argv[2])

# Bus-bandwidth factors of DESIGN.md §5 (PyTorch, 256 MiB all-reduce on
# 2x H200, default 301 GB/s). Algorithm forcing: "no effect on 2 GPUs".
DESIGN = {
    "nccl.p2p-off": 28 / 301,
    "nccl.socket-fallback": 3.1 / 301,
    "nccl.one-channel": 21 / 301,
    "nccl.proto:LL": 115 / 301,
    "nccl.proto:LL128": 277 / 301,
    "nccl.algo:Ring": 1.0,
    "nccl.algo:Tree": 1.0,
}
TOLERANCE = 0.15


def last_json(path):
    """The last JSON object in the file that starts a line, one-line or
    pretty-printed: NCCL_DEBUG=INFO writes to stdout too, so its lines can
    sit before and after the benchmark's own document."""
    try:
        text = open(path).read()
    except OSError:
        return None
    dec, found, pos = json.JSONDecoder(), None, 0
    for line in text.splitlines(keepends=True):
        if line.startswith("{"):
            try:
                doc, _ = dec.raw_decode(text, pos)
                if isinstance(doc, dict):
                    found = doc
            except ValueError:
                pass
        pos += len(line)
    return found


def first_number(doc, keys):
    for k in keys:
        v = doc.get(k) if isinstance(doc, dict) else None
        if isinstance(v, (int, float)):
            return float(v)
    return None


BUSBW_KEYS = ("busbw_gbps", "busbw", "bus_bw_gbps", "busbw_GBps")
SIZE_KEYS = ("bytes", "size", "size_bytes")


def torch_busbw(doc):
    """scripts/nccl-torch.py: one object with busbw_gbps."""
    return first_number(doc, BUSBW_KEYS) if doc else None


def gpuchaos_busbw(doc):
    """`gpuchaos nccl --format json`: {"results": [{"op", "bytes",
    "busbw_gbps", ...}], ...}. ADJUST HERE if the output changes: the entry
    for the 256 MiB all-reduce is preferred, else the largest size, else any
    busbw found anywhere in the document."""
    if not doc:
        return None
    rows = doc.get("results") or doc.get("sizes") or []
    rows = [r for r in rows if isinstance(r, dict) and first_number(r, BUSBW_KEYS) is not None]
    rows = [r for r in rows if r.get("op", "all_reduce") in ("all_reduce", "allreduce")] or rows
    if rows:
        exact = [r for r in rows if first_number(r, SIZE_KEYS) == size]
        pick = exact[0] if exact else max(rows, key=lambda r: first_number(r, SIZE_KEYS) or 0)
        return first_number(pick, BUSBW_KEYS)
    def walk(x):
        if isinstance(x, dict):
            v = first_number(x, BUSBW_KEYS)
            if v is not None:
                return v
            x = list(x.values())
        if isinstance(x, list):
            for y in x:
                v = walk(y)
                if v is not None:
                    return v
        return None
    return walk(doc)


def ddp_step_ms(doc):
    return first_number(doc, ("step_ms_median", "step_ms_mean")) if doc else None


def transports(path):
    """Distinct transports in NCCL_DEBUG=INFO channel lines ("via P2P/CUMEM",
    "via SHM/direct/direct", "via NET/Socket/0")."""
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return ""
    seen = []
    for m in re.finditer(r"Channel \S+ : .*? via (\S+)", text):
        parts = m.group(1).split("/")
        t = "/".join(parts[:2]) if parts[0] == "NET" else parts[0]
        if t not in seen:
            seen.append(t)
    return ",".join(seen)


def rc(dir, name):
    try:
        return int(open(os.path.join(dir, name + ".rc")).read().strip())
    except (OSError, ValueError):
        return None


labels = [l.strip() for l in open(os.path.join(out, "cases.txt")) if l.strip()]

rows = {}
for label in labels:
    d = os.path.join(out, label)
    delta = last_json(os.path.join(d, "delta.json"))
    vars_ = " ".join(f"{c['name']}={c['value']}" for c in delta.get("set", [])) if delta else "-"
    codes = {n: rc(d, n) for n in ("torch", "gpuchaos", "ddp")}

    def value(name, parse):
        # A run that failed or timed out gives no figure, whatever it printed.
        return parse(last_json(os.path.join(d, name + ".json"))) if codes[name] == 0 else None

    rows[label] = {
        "vars": vars_,
        "torch_busbw": value("torch", torch_busbw),
        "gpuchaos_busbw": value("gpuchaos", gpuchaos_busbw),
        "ddp_step_ms": value("ddp", ddp_step_ms),
        "rc": codes,
        "transport": transports(os.path.join(d, "torch.err")),
    }

bases = [rows[b] for b in ("baseline", "baseline-end") if b in rows]


def base(key):
    vals = [b[key] for b in bases if b[key]]
    return sum(vals) / len(vals) if vals else None


ref = {k: base(k) for k in ("torch_busbw", "gpuchaos_busbw", "ddp_step_ms")}


def ratio(a, b):
    return a / b if a and b else None


def f(x, fmt):
    return format(x, fmt) if x is not None else "-"


def verdict(measured, design):
    if measured is None or design is None:
        return None, "-"
    diff = (measured - design) / design
    return diff, ("ok" if abs(diff) <= TOLERANCE else "OFF")


hdr = ("case", "vars", "torch GB/s", "x base", "gpuchaos GB/s", "x base", "DDP ms", "slowdown",
       "§5 x", "torch Δ", "gpuchaos Δ", "within 15%", "transport (torch)")
table = [hdr]
summary = {"size_bytes": size, "baseline": ref, "tolerance": TOLERANCE, "cases": []}
for label, r in rows.items():
    ft = ratio(r["torch_busbw"], ref["torch_busbw"])
    fg = ratio(r["gpuchaos_busbw"], ref["gpuchaos_busbw"])
    slow = ratio(r["ddp_step_ms"], ref["ddp_step_ms"])
    design = DESIGN.get(label)
    dt, vt = verdict(ft, design)
    dg, vg = verdict(fg, design)
    fails = [f"{n} rc={c}" for n, c in r["rc"].items() if c not in (0, None)]
    table.append((label, r["vars"], f(r["torch_busbw"], ".1f"), f(ft, ".3f"), f(r["gpuchaos_busbw"], ".1f"),
                  f(fg, ".3f"), f(r["ddp_step_ms"], ".2f"), f(slow, ".2f"), f(design, ".3f"),
                  f(dt, "+.0%") if dt is not None else "-", f(dg, "+.0%") if dg is not None else "-",
                  (f"torch {vt}, gpuchaos {vg}" if design is not None else "") + ("; " if fails and design is not None else "") + ", ".join(fails),
                  r["transport"]))
    summary["cases"].append(dict(r, case=label, torch_factor=ft, gpuchaos_factor=fg, ddp_slowdown=slow,
                                 design_factor=design, torch_rel_diff=dt, gpuchaos_rel_diff=dg))

widths = [max(len(str(row[i])) for row in table) for i in range(len(hdr))]
for row in table:
    print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
if len(bases) == 2:
    a, b = bases
    drift = {k: ratio(b[k], a[k]) for k in ref}
    print("baseline drift (end/start): " + ", ".join(f"{k} {f(v, '.3f')}" for k, v in drift.items()))
    summary["baseline_drift"] = drift
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)
PY
