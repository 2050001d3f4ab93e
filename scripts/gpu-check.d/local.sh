#!/usr/bin/env bash
# The local section of scripts/gpu-check: experiments through the engine
# on this node (--target local), as root, with a gpuchaos agent serving
# 127.0.0.1:9400 for the metric probes:
#   examples/local/xid-kernel-log.yaml    kmsg-xid detector + log probe
#   examples/local/vram.yaml              FB used over the threshold
#   examples/local/sm-burn.yaml           GPU busy, power up
#   examples/local/noisy-neighbour.yaml   both
# then a run of a long noisy neighbour SIGKILLed once its memory is held:
# the next run must recover it from the ledger, leaving no burner or hold
# running and the GPU's memory as it was.
#
# Usage: [BIN=bin/gpuchaos] [GPU=0] scripts/gpu-check.d/local.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu-check.d/row.sh
BIN=${BIN:-bin/gpuchaos}
GPU=${GPU:-0}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
L=$out/ledger.jsonl
used() { nvidia-smi -i "$GPU" --query-gpu=memory.used --format=csv,noheader,nounits | tr -d ' '; }
children() { pgrep -f -- "$BIN (burn|exhaust) " | tr '\n' ' '; }

"$BIN" agent --listen 127.0.0.1:9400 --interval 1s >"$out/agent.log" 2>&1 &
apid=$!
trap 'kill $apid 2>/dev/null; wait $apid 2>/dev/null' EXIT
sleep 2
base=$(used)

for ex in xid-kernel-log vram sm-burn noisy-neighbour; do
	"$BIN" run "examples/local/$ex.yaml" --target local --ledger "$L" --format json >"$out/$ex.json" 2>"$out/$ex.err"
	rc=$?
	python3 - "$out/$ex.json" "$ex" "$rc" <<'PY' >>"$out/rows.tsv"
import json, sys
path, ex, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    r = json.load(open(path))
except (OSError, ValueError):
    print(f"{ex}\texit {rc}, no record\t\t\t0"); sys.exit()
for v in r.get("verdicts", []):
    ttd = v.get("ttd_seconds")
    m = f"{v['verdict']}" + (f", TTD {ttd:.2f} s" if ttd is not None else "") + (f" ({v['detail']})" if v.get("detail") and v["verdict"] != "pass" else "")
    print(f"{ex}: {v['name']}\t{m}\t\twithin {v.get('within_seconds', 0):g} s\t{int(v['verdict'] == 'pass')}")
err = r.get("error", "")
print(f"{ex}: injected and recovered\texit {rc}{', ' + err if err else ''}\t\tno error\t{int(rc == 0 and not err)}")
PY
	sleep 3
done
left=$(children)
now=$(used)
echo -e "after the runs: nothing left\tprocesses: ${left:-none}; memory ${now} MiB\t${base} MiB before\tnone; same\t$([ -z "$left" ] && [ "$now" = "$base" ] && echo 1 || echo 0)" >>"$out/rows.tsv"

# SIGKILL in the middle of a fault.
sed 's/duration: 40s/duration: 300s/; s/name: local-noisy-neighbour/name: local-noisy-neighbour-killed/' examples/local/noisy-neighbour.yaml >"$out/long.yaml"
"$BIN" run "$out/long.yaml" --target local --ledger "$L" >"$out/killed.log" 2>&1 &
rpid=$!
for _ in $(seq 1 60); do
	[ "$(used)" -gt $((base + 20000)) ] && break
	sleep 0.5
done
held=$(used)
during=$(children)
kill -9 "$rpid"
wait "$rpid" 2>/dev/null
sleep 2
orphans=$(children)
pending=$(python3 -c 'import json,sys; s={}
for l in open(sys.argv[1]):
    e=json.loads(l); k=e.get("key") or e.get("entry",{}).get("key"); s[k]=e["op"]
print(sum(1 for v in s.values() if v=="record"))' "$L")
"$BIN" run examples/local/xid-kernel-log.yaml --target local --ledger "$L" >"$out/after-kill.log" 2>&1
rc=$?
sleep 2
after=$(children)
now=$(used)
pending_after=$(python3 -c 'import json,sys; s={}
for l in open(sys.argv[1]):
    e=json.loads(l); k=e.get("key") or e.get("entry",{}).get("key"); s[k]=e["op"]
print(sum(1 for v in s.values() if v=="record"))' "$L")
grep -i recovered "$out/after-kill.log"
echo -e "SIGKILL mid-fault: the killed run held\t${held} MiB used, children: ${during:-none}\t${base} MiB before\theld\t$([ "$held" -gt $((base + 20000)) ] && echo 1 || echo 0)" >>"$out/rows.tsv"
echo -e "SIGKILL: left right after the kill\tchildren: ${orphans:-none}; ledger pending ${pending}\t\t(Pdeathsig; ledger keeps it)\t$([ "$pending" -ge 1 ] && echo 1 || echo 0)" >>"$out/rows.tsv"
echo -e "SIGKILL: next run recovers\texit $rc; $(grep -ci recovered "$out/after-kill.log") recovered; ledger pending ${pending_after}; children: ${after:-none}; memory ${now} MiB\t${base} MiB before\tnone pending; none running; same\t$([ $rc = 0 ] && [ "$pending_after" = 0 ] && [ -z "$after" ] && [ "$now" = "$base" ] && echo 1 || echo 0)" >>"$out/rows.tsv"

rows local "$out/rows.tsv"
