#!/usr/bin/env bash
# Runs the local target end to end on a GPU node as root: agent, a kernel-log
# XID experiment, a SIGKILLed run recovered by the next. Output: docs/results/h200-local.md.
# One device call: the local target end to end on a real GPU node.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
set -x
B=bin/gpuchaos
L=$OUT/ledger.jsonl
$B agent --listen 127.0.0.1:9400 --interval 1s > $OUT/agent.log 2>&1 &
AG=$!
sleep 3
$B run examples/local/xid-kernel-log.yaml --target local --ledger $L
echo "rc=$?"
curl -s 127.0.0.1:9400/metrics | grep -E '^DCGM_FI_DEV_XID_ERRORS|^gpuchaos_xid_events_total'
sed 's/duration: 10s/duration: 120s/; s/name: local-xid-79/name: local-xid-79-long/' examples/local/xid-kernel-log.yaml > /tmp/long.yaml
$B run /tmp/long.yaml --target local --ledger $L > $OUT/killed.log 2>&1 &
R=$!
sleep 3
kill -9 $R; wait $R; echo "killed rc=$?"
echo "--- ledger after SIGKILL:"; cat $L | tail -3
$B run examples/local/xid-kernel-log.yaml --target local --ledger $L
echo "rc=$?"
echo "--- ledger after restart:"; tail -3 $L
kill $AG
dmesg | grep -c "NVRM: Xid" 
