#!/usr/bin/env python3
"""The agent section of scripts/gpu-check: the node agent (gpuchaos-agent,
the chart's command, at $BIN_AGENT; `$BIN agent` where it is not built)
against nvidia-smi read at the same instant, then the agent's own cost.

Same instant: the agent samples on ticks aligned to whole seconds (interval
1 s) and serves its newest sample, so a page fetched at x.5 s holds the
sample taken at x.0 s. nvidia-smi runs beside it in its loop mode
(-lms 100) with its timestamp column, and each agent reading is compared
with the nvidia-smi row of the same GPU nearest to x.0 s (at most 50 ms
away). Three readings idle, five under a PyTorch bf16 matmul load on GPU
$GPU. Tolerances (the agent's targets): temperature ±2 °C, power ±10 %,
memory used exact, clocks ±5 %; UUID and bus id must match.

Then scripts/agent-cost measures gpuchaos-agent's CPU time and peak memory
over 60 s at 1 s sampling, the page cache warm as after an image pull
(targets: under 1 % of one core, under 50 MiB), and `gpuchaos agent`'s
the same way beside it, for the ratio.
When bin/gpu.test exists (go test -c -o bin/gpu.test ./internal/node/gpu/nvmlgpu), its
NVML per-call benchmark says where the agent's CPU goes.

Usage: [BIN=bin/gpuchaos] [BIN_AGENT=bin/gpuchaos-agent] [GPU=0] scripts/gpu-check.d/agent.py OUT_DIR
Writes raw readings to OUT_DIR, rows to $SUMMARY, a table to stdout.
"""
import datetime
import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.request

BIN = os.environ.get("BIN", "bin/gpuchaos")
BIN_AGENT = os.environ.get("BIN_AGENT", "bin/gpuchaos-agent")
LEAN = os.access(BIN_AGENT, os.X_OK)
AGENT = [BIN_AGENT] if LEAN else [BIN, "agent"]
GPU = os.environ.get("GPU", "0")
LISTEN = "127.0.0.1:9400"
SUMMARY = os.environ.get("SUMMARY", "")
SMI_COLS = ["timestamp", "index", "uuid", "pci.bus_id", "temperature.gpu", "power.draw",
            "memory.used", "clocks.sm", "clocks.mem"]
# nvidia-smi column → (agent metric, tolerance kind, tolerance, name)
FIELDS = [
    ("temperature.gpu", "DCGM_FI_DEV_GPU_TEMP", "abs", 2.0, "temperature ±2 °C"),
    ("power.draw", "DCGM_FI_DEV_POWER_USAGE", "rel", 0.10, "power ±10 %"),
    ("memory.used", "DCGM_FI_DEV_FB_USED", "abs", 0.0, "memory used exact"),
    ("clocks.sm", "DCGM_FI_DEV_SM_CLOCK", "rel", 0.05, "SM clock ±5 %"),
    ("clocks.mem", "DCGM_FI_DEV_MEM_CLOCK", "rel", 0.05, "memory clock ±5 %"),
]
LINE = re.compile(r'^(\w+)\{([^}]*)\} (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
LOAD = """
import sys, time, torch
dev = torch.device("cuda", int(sys.argv[1]))
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
b = torch.randn_like(a)
t, n = time.time(), 0
while time.time() - t < float(sys.argv[2]):
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize(dev)
    n += 20
dt = time.time() - t
print(f"load: {n} bf16 8192^3 matmuls on gpu {sys.argv[1]} in {dt:.1f}s, {n*2*8192**3/dt/1e12:.0f} TFLOP/s")
"""


def fetch(path):
    with urllib.request.urlopen(f"http://{LISTEN}{path}", timeout=5) as r:
        return r.read().decode()


def parse_page(text):
    out = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            labels = dict(LABEL.findall(m.group(2)))
            out[(m.group(1), labels.get("gpu"))] = (float(m.group(3)), labels)
    return out


def read_at_half_second():
    """Sleep to the next x.5 s, fetch the page; return (sample time, page)."""
    now = time.time()
    time.sleep(math.floor(now) + 1.5 - now if now % 1 > 0.5 else math.floor(now) + 0.5 - now)
    t = time.time()
    return math.floor(t), fetch("/metrics")


def smi_rows(path):
    rows = []
    for line in open(path):
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != len(SMI_COLS):
            continue
        r = dict(zip(SMI_COLS, cols))
        try:
            ts = datetime.datetime.strptime(r["timestamp"], "%Y/%m/%d %H:%M:%S.%f")
        except ValueError:
            continue
        r["t"] = ts.timestamp()  # nvidia-smi prints local time, as does fromtimestamp
        rows.append(r)
    return rows


def main(out):
    os.makedirs(out, exist_ok=True)
    agent = subprocess.Popen(AGENT + ["--listen", LISTEN, "--interval", "1s", "-v"],
                             stdout=open(f"{out}/agent.log", "w"), stderr=subprocess.STDOUT)
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=" + ",".join(SMI_COLS), "--format=csv,noheader,nounits", "-lms", "100"],
                           stdout=open(f"{out}/smi.csv", "w"), stderr=subprocess.DEVNULL)
    readings = []
    try:
        for _ in range(100):
            try:
                fetch("/healthz")
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(2)  # a second sample, so none is the first after start
        for i in range(3):
            readings.append(("idle-%d" % (i + 1),) + read_at_half_second())
        load = subprocess.Popen([sys.executable, "-c", LOAD, GPU, "20"], stdout=open(f"{out}/load.txt", "w"), stderr=subprocess.STDOUT)
        time.sleep(6)
        for i in range(5):
            readings.append(("load-%d" % (i + 1),) + read_at_half_second())
            time.sleep(1)
        load.wait()
    finally:
        smi.terminate()
        smi.wait()
        agent.terminate()
        agent.wait()
    with open(f"{out}/pages.json", "w") as f:
        json.dump([{"label": l, "sample_time": t, "page": p} for l, t, p in readings], f)

    rows = smi_rows(f"{out}/smi.csv")
    table, counts, ids_bad, gap_max = [], {f[4]: [0, 0] for f in FIELDS}, 0, 0.0
    for label, ts, page in readings:
        metrics = parse_page(page)
        for gpu in sorted({r["index"] for r in rows}):
            cand = [r for r in rows if r["index"] == gpu]
            s = min(cand, key=lambda r: abs(r["t"] - ts))
            gap_max = max(gap_max, abs(s["t"] - ts))
            _, labels = metrics.get(("DCGM_FI_DEV_GPU_TEMP", gpu), (None, {}))
            ok_ids = labels.get("UUID") == s["uuid"] and labels.get("pci_bus_id") == s["pci.bus_id"]
            ids_bad += 0 if ok_ids else 1
            cells = []
            for col, metric, kind, tol, name in FIELDS:
                sv = float(s[col])
                av = metrics.get((metric, gpu), (float("nan"), {}))[0]
                d = av - sv
                ok = abs(d) <= (tol if kind == "abs" else tol * abs(sv))
                counts[name][0 if ok else 1] += 1
                rel = f" ({100 * d / sv:+.1f} %)" if kind == "rel" and sv else ""
                cells.append(f"{av:g} / {sv:g}{rel} {'ok' if ok else 'OUT'}")
            table.append(f"| {label} | {gpu} | {s['t'] - ts:+.3f} | {'ok' if ok_ids else 'MISMATCH'} | " + " | ".join(cells) + " |")
    print("| reading | gpu | smi − agent sample (s) | UUID, bus id | " + " | ".join(f[4] + ": agent / smi" for f in FIELDS) + " |")
    print("|" + "---|" * (4 + len(FIELDS)))
    print("\n".join(table))
    print(f"\nnvidia-smi rows at most {gap_max * 1000:.0f} ms from the agent's sample time")

    summary = []
    n = len(table)
    summary.append(("agent", "UUID and bus id", f"{n - ids_bad}/{n} match", "nvidia-smi", "all", ids_bad == 0))
    for _, _, _, _, name in FIELDS:
        ok, bad = counts[name]
        summary.append(("agent", name, f"{ok}/{ok + bad} within", "nvidia-smi, same instant", "all", bad == 0))

    # The chart's agent against the targets, then gpuchaos agent beside it.
    runs = [("gpuchaos-agent", ["-a", "-b", BIN_AGENT])] if LEAN else []
    runs.append(("gpuchaos agent", ["-b", BIN]))
    costs = {}
    for name, flags in runs:
        cost = subprocess.run(["scripts/agent-cost", "-w"] + flags + ["-d", "60", "-s", "1", "--", "--listen", LISTEN, "--interval", "1s"],
                              capture_output=True, text=True)
        open(f"{out}/cost-{name.replace(' ', '-')}.txt", "w").write(cost.stdout + cost.stderr)
        print(cost.stdout)
        js = [l for l in cost.stdout.splitlines() if l.startswith("{")]
        if js:
            costs[name] = json.loads(js[-1])
        else:
            summary.append(("agent", f"{name}: cost measured", "agent-cost failed", "", "", False))
    target = "gpuchaos-agent" if LEAN else "gpuchaos agent"
    if target in costs:
        c = costs[target]
        summary.append(("agent", f"{target}: CPU, 1 s sampling, 60 s", f"{c['cpu_pct_of_one_core']:.2f} % of a core (user {c['user_s']:.2f} s, sys {c['sys_s']:.2f} s)",
                        "", "< 1 %", c["cpu_pct_of_one_core"] < 1))
        summary.append(("agent", f"{target}: peak resident memory", f"{c['max_rss_mib']:.1f} MiB (file {c['rss_file_mib']:.1f}, anon {c['rss_anon_mib']:.1f} at the end)",
                        "", "< 50 MiB", c["max_rss_mib"] < 50))
    if LEAN and "gpuchaos agent" in costs and target in costs:
        f, c = costs["gpuchaos agent"], costs[target]
        summary.append(("agent", "gpuchaos agent, the same way", f"{f['max_rss_mib']:.1f} MiB, {f['cpu_pct_of_one_core']:.2f} % of a core",
                        f"gpuchaos-agent / it: {c['max_rss_mib'] / f['max_rss_mib']:.2f} of the memory", "", True))

    if os.access("bin/gpu.test", os.X_OK):
        b = subprocess.run(["bin/gpu.test", "-test.run", "^$", "-test.bench", "NVML", "-test.benchtime", "300x"],
                           capture_output=True, text=True)
        open(f"{out}/nvml-bench.txt", "w").write(b.stdout + b.stderr)
        print(b.stdout)

    if SUMMARY:
        with open(SUMMARY, "a") as f:
            for r in summary:
                f.write("\t".join(list(r[:5]) + ["pass" if r[5] else "FAIL"]) + "\n")
    return 0 if all(r[5] for r in summary) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "agent-check"))
