#!/usr/bin/env bash
# The xid section of scripts/gpu-check: XID lines written to /dev/kmsg
# for GPU $GPU's real bus id (code 13, an application error that implies no
# reset to anything acting on it), timed twice over 200 single lines with a
# 1000-line burst in one second:
#   1. to the XID watcher's callback (gpuchaos xid bench), and
#   2. to the count on a running agent's /metrics page, fetched back to back
#      (gpuchaos xid bench --metrics): the whole path a scrape sees.
# Targets: p99 within 50 ms, no line of the burst lost. Needs root.
#
# Usage: [BIN=bin/gpuchaos] [GPU=0] scripts/gpu-check.d/xid.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu-check.d/row.sh
BIN=${BIN:-bin/gpuchaos}
GPU=${GPU:-0}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
listen=127.0.0.1:9402
pci=$(nvidia-smi -i "$GPU" --query-gpu=pci.bus_id --format=csv,noheader | tr -d ' ')

"$BIN" xid bench --pci "$pci" --format json >"$out/watcher.json" 2>"$out/watcher.err"
echo "watcher: exit $?"

"$BIN" agent --listen "$listen" --interval 1s >"$out/agent.log" 2>&1 &
apid=$!
trap 'kill $apid 2>/dev/null; wait $apid 2>/dev/null' EXIT
for _ in $(seq 1 100); do
	python3 -c 'import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=1)' "http://$listen/healthz" 2>/dev/null && break
	sleep 0.1
done
"$BIN" xid bench --pci "$pci" --metrics "http://$listen/metrics" --format json >"$out/metrics.json" 2>"$out/metrics.err"
echo "metrics: exit $?"
cat "$out"/*.err

python3 - "$out" <<'PY' >"$out/rows.tsv"
import json, sys
d = sys.argv[1]
for name, where in (("watcher", "to the watcher"), ("metrics", "to the agent's /metrics")):
    try:
        r = json.load(open(f"{d}/{name}.json"))
    except (OSError, ValueError) as e:
        print(f"XID {where}\tno result ({e.__class__.__name__})\t\t\t0")
        continue
    p99, p50, mx = r["p99_ns"] / 1e6, r["p50_ns"] / 1e6, r["max_ns"] / 1e6
    ok = r["seen"] == r["injections"] and p99 <= 50
    print(f"XID {where}, p99 of {r['injections']}\t{p99:.2f} ms (p50 {p50:.2f}, max {mx:.2f}; seen {r['seen']})\t\t≤ 50 ms\t{int(ok)}")
    ok = r["burst_seen"] == r["burst"] and r["lost"] == 0
    print(f"XID burst {where}\t{r['burst_seen']}/{r['burst']} in {r['burst_write_ns'] / 1e9:.2f} s, {r['lost']} lost\t\tnone lost\t{int(ok)}")
PY
rows xid "$out/rows.tsv"
