#!/usr/bin/env bash
# Puts the workload and checkpoint faults on the reference training job
# running with NCCL on the GPUs of this machine, through the engine
# (`gpuchaos run --target local --job`), and judges each run with the
# workload checks: resumed, lost-work, stalled, slowdown, rate-recovered
# and goodput. Then it writes a twin of the same job from the job's own
# figures (step time, checkpoint size and time, startup time), runs the
# same experiment files on the twin, and prints the goodput each run
# measured beside the twin's prediction.
#
#   scripts/workload-gpu.sh [-b BIN] [-o DIR] [-r RANKS] [-k BACKEND] [-p PYTHON] [experiment ...]
#
# Experiments (default: all; a suffix such as kill-rank-2 repeats one):
# kill-rank hang-rank straggler corrupt-kill kill-writer fill-volume numa.
# Needs root (cgroups, tmpfs, signals to the ranks), Python with PyTorch
# and GPUs; the checkpoint directory is a 4 GiB tmpfs, so fill-volume never
# touches a real disk. -k gloo -p /usr/bin/python3 runs the same on CPUs
# (a smoke test without GPUs); MODEL overrides the model's flags,
# CKPT_EVERY the checkpoint interval (500 steps), WINDOW the goodput
# window (60s).
set -euo pipefail

bin=bin/gpuchaos
out=/tmp/gpuchaos-workload
ranks=2
backend=nccl
python=python3
while getopts "b:o:r:k:p:" o; do
	case $o in
	b) bin=$OPTARG ;;
	o) out=$OPTARG ;;
	r) ranks=$OPTARG ;;
	k) backend=$OPTARG ;;
	p) python=$OPTARG ;;
	*) sed -n 2,20p "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
exps=("$@")
[ ${#exps[@]} -gt 0 ] || exps=(kill-rank hang-rank straggler corrupt-kill kill-writer fill-volume numa)
every=${CKPT_EVERY:-500}
window=${WINDOW:-60s}

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bin=$(realpath "$bin")
mkdir -p "$out"
job=gpu-train
ckpt=$out/ckpt
mkdir -p "$ckpt"
mountpoint -q "$ckpt" || mount -t tmpfs -o size=4g gpuchaos-ckpt "$ckpt"

wl=
cleanup() {
	[ -n "$wl" ] && kill "$wl" 2>/dev/null && wait "$wl" 2>/dev/null || true
	umount "$ckpt" 2>/dev/null || true
}
trap cleanup EXIT

metric() { # metric PORT NAME: the first sample's value, or nothing
	python3 - "$1" "$2" <<'PY' 2>/dev/null || true
import sys, urllib.request
try:
    body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=1).read().decode()
except Exception:
    sys.exit(0)
for line in body.splitlines():
    if line.startswith(sys.argv[2] + "{") or line.startswith(sys.argv[2] + " "):
        print(line.rsplit(" ", 1)[1]); break
PY
}

exporters=(--exporter http://127.0.0.1:9499/metrics)
for ((r = 0; r < ranks; r++)); do exporters+=(--exporter "http://127.0.0.1:$((9500 + r))/metrics"); done

launched=$(date +%s.%N)
# shellcheck disable=SC2086 # MODEL is a list of flags
"$bin" workload run --ranks "$ranks" --backend "$backend" --python "$python" --job "$job" \
	--ckpt-dir "$ckpt" --ckpt-every "$every" --keep 3 ${MODEL:---hidden 2048 --layers 8 --batch 512} \
	--duration 60m --max-restarts 20 --metrics-port 9500 --supervisor-addr 127.0.0.1:9499 \
	--events "$out/events.jsonl" >"$out/ranks.log" 2>&1 &
wl=$!
for _ in $(seq 1200); do
	s=$(metric 9500 gpuchaos_job_step_total)
	[ -n "$s" ] && [ "${s%.*}" -gt 0 ] && break
	sleep 0.1
done
started=$(date +%s.%N)
startup=$(awk "BEGIN{printf \"%.2f\", $started - $launched}")
echo "startup: first step ${startup}s after launch"
# Past the first checkpoint, so its time and size are known.
for _ in $(seq 600); do
	c=$(metric 9500 gpuchaos_job_last_checkpoint_step)
	[ -n "$c" ] && [ "${c%.*}" -gt 0 ] && break
	sleep 0.1
done
sleep 5
rate=$(metric 9500 gpuchaos_job_steps_per_second)
steptime=$(metric 9500 gpuchaos_rank_step_seconds)
ckptsec=$(metric 9500 gpuchaos_job_last_checkpoint_duration_seconds)
ckptbytes=$(find "$ckpt" -name 'ckpt-*.pt' -printf '%s\n' | sort -n | tail -1)
echo "baseline: ${rate} steps/s, step ${steptime}s, checkpoint every ${every} steps: ${ckptbytes} bytes in ${ckptsec}s"

# The twin of this job: one node of these GPUs, the job's step time (its
# all-reduce is inside it, so the twin's own is made negligible), a sync
# checkpoint of the measured size at the measured speed every interval, a
# restart as long as the measured startup plus a checkpoint load (taken
# as long as a write), and, with NCCL, the supervisor's grace (--grace,
# 5 s) before ranks left waiting in a collective are killed (gloo ranks
# fail at once when a peer's connection drops).
cat >"$out/twin.yaml" <<YAML
name: $job-twin
nodes: {count: 1, namePrefix: node-, gpusPerNode: $ranks, model: H200, numaSockets: 1}
storage: {bandwidthGBps: $(awk "BEGIN{printf \"%.4f\", $ckptbytes / 1e9 / $ckptsec}")}
variability: {kind: lognormal, sigma: 0}
exporter: {scrapeInterval: 1s}
jobs:
  - name: $job
    gpus: all
    stepCompute: $(awk "BEGIN{printf \"%.2fms\", $steptime * 1000}")
    gradientBytes: 1.0e+3
    checkpointInterval: $(awk "BEGIN{printf \"%.2fs\", $every * $steptime}")
    checkpointGB: $(awk "BEGIN{printf \"%.4f\", $ckptbytes / 1e9}")
    checkpointMode: sync
    restartCost: $(awk "BEGIN{printf \"%.2fs\", $startup + $ckptsec}")
    stopGrace: $([ "$backend" = nccl ] && echo 5s || echo 0s)
YAML

# experiment NAME DURATION FAULTS EXPECTATIONS: write and run one.
ran=()
experiment() {
	cat >"$out/$1.yaml" <<YAML
apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata: {name: $1}
spec:
  selector: {jobs: [$job], ranks: [1], mode: all}
  duration: $2
  faults:
$3
  expectations:
$4
YAML
	echo "== $1"
	"$bin" run "$out/$1.yaml" --target local --job "$job" "${exporters[@]}" --ledger "$out/ledger.jsonl" \
		--record "$out/rec-$1.json" 2>&1 | grep -v '^time=' || true
	ran+=("$1")
}

base="baseline: 30s"
goodput="    - {name: goodput, within: $window, probe: {workload: {check: goodput, min: 0.5, $base}}}"
rateback="    - {name: rate-back, within: 60s, probe: {workload: {check: rate-recovered, tolerance: 0.05, for: 5s, $base}}}"
for e in "${exps[@]}"; do
	case $e in
	kill-rank*)
		experiment "$e" 5s "    - {id: workload.kill-rank, params: {signal: SIGKILL}}" "\
    - {name: resumed, within: 60s, probe: {workload: {check: resumed}}}
    - {name: lost-work, within: 60s, probe: {workload: {check: lost-work}}}
$rateback
$goodput" ;;
	hang-rank*)
		experiment "$e" 15s "    - {id: workload.hang-rank}" "\
    - {name: stalled, within: 10s, probe: {workload: {check: stalled, $base}}}
$rateback
$goodput" ;;
	straggler*)
		experiment "$e" 20s "    - {id: workload.straggler, params: {slowdown: 2}}" "\
    - {name: slowdown, within: 15s, probe: {workload: {check: slowdown, tolerance: 0.3, for: 3s, $base}}}
$rateback
$goodput" ;;
	corrupt-kill*)
		# Held longer than a restart takes: recovering corrupt-newest puts
		# the bytes back, and a resume after that would find them sound.
		experiment "$e" 40s "    - {id: checkpoint.corrupt-newest}
    - {id: workload.kill-rank, params: {signal: SIGKILL}}" "\
    - {name: resumed-newest, within: 60s, probe: {workload: {check: resumed}}}
    - {name: resumed-fallback, within: 60s, probe: {workload: {check: resumed, maxFallback: 1}}}
    - {name: lost-work, within: 60s, probe: {workload: {check: lost-work}}}" ;;
	kill-writer*)
		experiment "$e" 5s "    - {id: checkpoint.kill-writer, params: {signal: SIGKILL, timeout: 60s}}" "\
    - {name: resumed, within: 90s, probe: {workload: {check: resumed}}}
    - {name: lost-work, within: 90s, probe: {workload: {check: lost-work}}}" ;;
	fill-volume*)
		experiment "$e" 30s "    - {id: checkpoint.fill-volume}" "\
    - {name: saves-fail, within: 30s, probe: {threshold: {metric: gpuchaos_job_checkpoint_failures_total, op: '>=', value: 1}}}
$rateback" ;;
	numa*)
		experiment "$e" 10s "    - {id: numa.remote-memory}" "\
    - {name: slowdown, within: 10s, probe: {workload: {check: slowdown, tolerance: 0.05, $base}}}" ;;
	*) echo "unknown experiment $e" >&2; exit 2 ;;
	esac
done
echo "== job after the runs: step $(metric 9500 gpuchaos_job_step_total), restarts $(metric 9499 gpuchaos_job_restarts_total), rate $(metric 9500 gpuchaos_job_steps_per_second) steps/s"
echo "checkpoints rejected on resume: $(grep -c 'checkpoint_rejected' "$out/ranks.log" || true)"
echo "== twin spec"
cat "$out/twin.yaml"

# The same experiments on the twin of this job (scripts/workload-twin.py
# says how the moment of injection is matched).
echo "== goodput over $window: measured on the job vs predicted by its twin"
recs=()
for e in "${ran[@]}"; do
	grep -q 'check: goodput' "$out/$e.yaml" && recs+=("$out/rec-$e.json")
done
[ ${#recs[@]} -eq 0 ] || python3 "$(dirname "$0")/workload-twin.py" "$bin" "$out/twin.yaml" "$every" "$steptime" "$ckptsec" "${recs[@]}"
