#!/usr/bin/env bash
# h200-agent-check.sh — check `gpuchaos agent` against nvidia-smi on a GPU
# machine, idle and under a PyTorch matmul load, then measure the agent's
# own cost. Writes raw readings to OUT_DIR (default ./agent-check) for
# scripts/agent-compare.py, which prints the agreement table.
#
# Usage: scripts/h200-agent-check.sh [OUT_DIR]
# Reads only: it changes no clock, power limit, persistence, compute or
# MIG mode and never resets a GPU.
set -uo pipefail
out=${1:-agent-check}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bin=${BIN:-bin/gpuchaos}
listen=127.0.0.1:9400
query=index,uuid,pci.bus_id,temperature.gpu,power.draw,memory.used,clocks.sm,clocks.mem

fetch() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsS --max-time 5 "$1"
	else
		python3 -c 'import sys, urllib.request as u; sys.stdout.buffer.write(u.urlopen(sys.argv[1], timeout=5).read())' "$1"
	fi
}

{
	date -u +%FT%TZ
	uname -a
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
	echo "agent: $bin agent --listen $listen --interval 1s"
} >"$out/info.txt" 2>&1

"$bin" agent --listen "$listen" --interval 1s -v >"$out/agent.log" 2>&1 &
apid=$!
for _ in $(seq 1 100); do fetch "http://$listen/healthz" >/dev/null 2>&1 && break; sleep 0.1; done

# pair LABEL: read the agent's page and nvidia-smi at the same moment.
pair() {
	local m s
	m=$(mktemp)
	s=$(mktemp)
	local p1 p2
	fetch "http://$listen/metrics" >"$m" &
	p1=$!
	nvidia-smi --query-gpu=$query --format=csv,noheader,nounits >"$s" &
	p2=$!
	wait "$p1" "$p2"
	{
		echo "=== $1 $(date -u +%T.%N)"
		echo "--- nvidia-smi"
		cat "$s"
		echo "--- agent"
		grep -E '^(DCGM_FI_DEV_(GPU_TEMP|POWER_USAGE|FB_USED|FB_FREE|SM_CLOCK|MEM_CLOCK|MEMORY_TEMP|GPU_UTIL|TOTAL_ENERGY_CONSUMPTION|XID_ERRORS)|gpuchaos_agent_info)' "$m"
	} >>"$out/pairs.txt"
	rm -f "$m" "$s"
}

for i in 1 2 3; do pair "idle-$i"; sleep 1; done
fetch "http://$listen/metrics" >"$out/metrics-idle.txt"

python3 -c '
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
t = time.time()
n = 0
while time.time() - t < 18:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    n += 20
dt = time.time() - t
print(f"load: {n} bf16 8192^3 matmuls in {dt:.1f}s, {n*2*8192**3/dt/1e12:.0f} TFLOP/s")
' >"$out/load.txt" 2>&1 &
lpid=$!
sleep 6
for i in 1 2 3 4 5; do pair "load-$i"; sleep 1.5; done
wait $lpid
fetch "http://$listen/metrics" >"$out/metrics-load.txt"
kill $apid
wait $apid 2>/dev/null

# The agent's own cost over 60 s, its own instance, idle GPU.
scripts/agent-cost.sh -b "$bin" -d 60 -- --listen "$listen" --interval 1s >"$out/cost.txt" 2>&1
echo "done" >>"$out/info.txt"
