#!/usr/bin/env bash
# Puts the workload and checkpoint faults on the reference training job
# running with NCCL on the GPUs of this machine, through the engine
# (`gpuchaos run --target local --job`), and judges each run with the
# workload checks: resumed, lost-work, stalled, slowdown, rate-recovered
# and goodput. Prints each run's verdicts and a summary of the job's own
# figures (startup time, step rate) that a twin of the same job needs.
#
#   scripts/workload-gpu.sh [-b BIN] [-o DIR] [-r RANKS] [-k BACKEND] [-p PYTHON] [experiment ...]
#
# -k gloo -p /usr/bin/python3 runs the same on CPUs (a smoke test of the
# script on a machine without GPUs; MODEL overrides the model's flags).
#
# Experiments (default: all): kill-rank hang-rank straggler corrupt-kill
# kill-writer fill-volume numa. Needs root (cgroups, tmpfs, signals to the
# ranks), Python with PyTorch (python3), and GPUs; the checkpoint
# directory is a 4 GiB tmpfs, so fill-volume never touches a real disk.
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
	*) sed -n 2,19p "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
exps=("$@")
[ ${#exps[@]} -gt 0 ] || exps=(kill-rank hang-rank straggler corrupt-kill kill-writer fill-volume numa)

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
	python3 - "$1" "$2" <<'EOF' 2>/dev/null || true
import sys, urllib.request
try:
    body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=1).read().decode()
except Exception:
    sys.exit(0)
for line in body.splitlines():
    if line.startswith(sys.argv[2] + "{") or line.startswith(sys.argv[2] + " "):
        print(line.rsplit(" ", 1)[1]); break
EOF
}

exporters=(--exporter http://127.0.0.1:9499/metrics)
for ((r = 0; r < ranks; r++)); do exporters+=(--exporter "http://127.0.0.1:$((9500 + r))/metrics"); done

launched=$(date +%s.%N)
# shellcheck disable=SC2086 # MODEL is a list of flags
"$bin" workload run --ranks "$ranks" --backend "$backend" --python "$python" --job "$job" \
	--ckpt-dir "$ckpt" --ckpt-every 100 --keep 3 ${MODEL:---hidden 2048 --layers 8 --batch 512} \
	--duration 60m --max-restarts 20 --metrics-port 9500 --supervisor-addr 127.0.0.1:9499 \
	--events "$out/events.jsonl" >"$out/ranks.log" 2>&1 &
wl=$!
for _ in $(seq 600); do
	s=$(metric 9500 gpuchaos_job_step_total)
	[ -n "$s" ] && [ "${s%.*}" -gt 0 ] && break
	sleep 0.1
done
started=$(date +%s.%N)
echo "startup: first step $(awk "BEGIN{printf \"%.2f\", $started - $launched}") s after launch"
sleep 20
echo "baseline: $(metric 9500 gpuchaos_job_steps_per_second) steps/s at step $(metric 9500 gpuchaos_job_step_total); checkpoint took $(metric 9500 gpuchaos_job_last_checkpoint_duration_seconds) s"

# experiment NAME DURATION FAULTS EXPECTATIONS: write and run one.
experiment() {
	cat >"$out/$1.yaml" <<EOF
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
EOF
	echo "== $1"
	"$bin" run "$out/$1.yaml" --target local --job "$job" "${exporters[@]}" --ledger "$out/ledger.jsonl" \
		--record "$out/rec-$1.json" 2>&1 | grep -v '^time=' || true
}

base="baseline: 15s"
for e in "${exps[@]}"; do
	case $e in
	kill-rank)
		experiment kill-rank 5s "    - {id: workload.kill-rank, params: {signal: SIGKILL}}" "\
    - {name: resumed, within: 60s, probe: {workload: {check: resumed}}}
    - {name: lost-work, within: 60s, probe: {workload: {check: lost-work}}}
    - {name: rate-back, within: 60s, probe: {workload: {check: rate-recovered, tolerance: 0.05, for: 5s, $base}}}
    - {name: goodput-45s, within: 45s, probe: {workload: {check: goodput, min: 0.5, $base}}}" ;;
	hang-rank)
		experiment hang-rank 15s "    - {id: workload.hang-rank}" "\
    - {name: stalled, within: 10s, probe: {workload: {check: stalled, $base}}}
    - {name: rate-back, within: 60s, probe: {workload: {check: rate-recovered, tolerance: 0.05, for: 5s, $base}}}
    - {name: goodput-45s, within: 45s, probe: {workload: {check: goodput, min: 0.5, $base}}}" ;;
	straggler)
		experiment straggler 20s "    - {id: workload.straggler, params: {slowdown: 2}}" "\
    - {name: slowdown, within: 15s, probe: {workload: {check: slowdown, tolerance: 0.3, for: 3s, $base}}}
    - {name: rate-back, within: 60s, probe: {workload: {check: rate-recovered, tolerance: 0.05, for: 5s, $base}}}
    - {name: goodput-40s, within: 40s, probe: {workload: {check: goodput, min: 0.5, $base}}}" ;;
	corrupt-kill)
		experiment corrupt-kill 5s "    - {id: checkpoint.corrupt-newest}
    - {id: workload.kill-rank, params: {signal: SIGKILL}}" "\
    - {name: resumed-newest, within: 60s, probe: {workload: {check: resumed}}}
    - {name: resumed-fallback, within: 60s, probe: {workload: {check: resumed, maxFallback: 1}}}
    - {name: lost-work, within: 60s, probe: {workload: {check: lost-work}}}" ;;
	kill-writer)
		experiment kill-writer 5s "    - {id: checkpoint.kill-writer, params: {signal: SIGKILL, timeout: 30s}}" "\
    - {name: resumed, within: 90s, probe: {workload: {check: resumed}}}
    - {name: lost-work, within: 90s, probe: {workload: {check: lost-work}}}" ;;
	fill-volume)
		experiment fill-volume 15s "    - {id: checkpoint.fill-volume}" "\
    - {name: saves-fail, within: 15s, probe: {threshold: {metric: gpuchaos_job_checkpoint_failures_total, op: '>=', value: 1}}}
    - {name: rate-back, within: 60s, probe: {workload: {check: rate-recovered, tolerance: 0.05, for: 5s, $base}}}" ;;
	numa)
		experiment numa 10s "    - {id: numa.remote-memory}" "\
    - {name: slowdown, within: 10s, probe: {workload: {check: slowdown, tolerance: 0.05, $base}}}" ;;
	*) echo "unknown experiment $e" >&2; exit 2 ;;
	esac
done
echo "== job after the runs: step $(metric 9500 gpuchaos_job_step_total), restarts $(metric 9499 gpuchaos_job_restarts_total), rate $(metric 9500 gpuchaos_job_steps_per_second) steps/s"
grep -c '"event": *"checkpoint_rejected"' "$out/ranks.log" | sed 's/^/checkpoints rejected on resume: /' || true
