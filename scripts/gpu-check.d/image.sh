#!/usr/bin/env bash
# The image section of scripts/gpu-check: the container image the Helm
# chart runs (scripts/build-image's docker archive, $IMAGE), unpacked and
# run under chroot on a GPU machine the way the NVIDIA container runtime
# runs the agent's pod: the driver's libnvidia-ml copied into the image's
# library folder (the runtime bind-mounts it there), /dev, /proc and /sys
# from the host, nothing else of the host's. The agent in the image must
# read every GPU nvidia-smi lists, with the same UUIDs, through the
# image's own C library: gpuchaos-agent, the DaemonSet's command. Needs
# root.
#
# Usage: [IMAGE=bin/gpuchaos-image.tar] scripts/gpu-check.d/image.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu-check.d/row.sh
IMAGE=${IMAGE:-bin/gpuchaos-image.tar}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
root=$(mktemp -d /tmp/gpuchaos-image.XXXXXX)
listen=127.0.0.1:9403
chroot=$(command -v chroot)
mounted=()
cleanup() {
	[ -n "${apid:-}" ] && kill "$apid" 2>/dev/null && wait "$apid" 2>/dev/null
	for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}"; done
	rm -rf "$root"
}
trap cleanup EXIT

# A docker archive: manifest.json names the layers, applied in order.
python3 - "$IMAGE" "$root" <<'PY' || { row image "image unpacked" "no" "" "" 0; exit 1; }
import json, sys, tarfile
img, root = sys.argv[1], sys.argv[2]
with tarfile.open(img) as t:
    m = json.load(t.extractfile("manifest.json"))[0]
    print("image", m.get("RepoTags"), "layers", len(m["Layers"]))
    for name in m["Layers"]:
        with tarfile.open(fileobj=t.extractfile(name), mode="r:*") as layer:
            layer.extractall(root, filter="fully_trusted")
PY
row image "image unpacked" "$(du -sh "$root" | cut -f1)" "" "" 1

# What the NVIDIA runtime adds to a pod with NVIDIA_DRIVER_CAPABILITIES=utility.
nvml=$(ldconfig -p | awk '/libnvidia-ml.so.1 .*x86-64/ {print $NF; exit}')
libdir=$root/usr/lib/x86_64-linux-gnu
mkdir -p "$libdir" "$root/dev" "$root/proc" "$root/sys"
cp -L "$nvml" "$libdir/libnvidia-ml.so.1"
for d in dev proc sys; do
	mount --rbind "/$d" "$root/$d" && mounted+=("$root/$d")
done
echo "driver library: $nvml" | tee "$out/driver.txt"

env -i PATH=/usr/local/bin "$chroot" "$root" /usr/local/bin/gpuchaos faults --format json >"$out/faults.json" 2>&1
rc=$?
row image "the image's command runs (faults)" "exit $rc" "" "exit 0" $([ $rc = 0 ] && echo 1 || echo 0)

env -i PATH=/usr/local/bin "$chroot" "$root" /usr/local/bin/gpuchaos-agent --listen "$listen" --no-xid-watch --interval 1s >"$out/agent.log" 2>&1 &
apid=$!
for _ in $(seq 1 100); do
	curl -sf "http://$listen/metrics" >"$out/metrics.txt" 2>/dev/null && grep -q '^DCGM_FI_DEV_GPU_TEMP{' "$out/metrics.txt" && break
	sleep 0.2
done
nvidia-smi --query-gpu=uuid --format=csv,noheader | sort >"$out/smi-uuids.txt"
grep '^DCGM_FI_DEV_GPU_TEMP{' "$out/metrics.txt" | sed -n 's/.*UUID="\([^"]*\)".*/\1/p' | sort -u >"$out/agent-uuids.txt"
want=$(wc -l <"$out/smi-uuids.txt")
got=$(wc -l <"$out/agent-uuids.txt")
ok=0
[ "$got" -gt 0 ] && cmp -s "$out/smi-uuids.txt" "$out/agent-uuids.txt" && ok=1
row image "agent in the image reads the GPUs (UUIDs)" "$got" "$want (nvidia-smi)" "same UUIDs" $ok
# env and chroot exec, so $apid is the agent; its maps name files as this
# shell (outside the chroot) sees them.
libs=$(awk '/\.so/ {print $NF}' /proc/"$apid"/maps 2>/dev/null | sort -u)
echo "$libs" >"$out/agent-libs.txt"
outside=$(grep -vc "^$root/" "$out/agent-libs.txt")
row image "agent's shared libraries all from the image root" "$(wc -l <"$out/agent-libs.txt") libs, $outside outside" "" "0 outside" $([ -s "$out/agent-libs.txt" ] && [ "$outside" = 0 ] && echo 1 || echo 0)
