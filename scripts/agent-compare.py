#!/usr/bin/env python3
"""agent-compare.py — the agreement table of `gpuchaos agent` against
nvidia-smi, from the pairs.txt that scripts/h200-agent-check.sh writes.

Usage: scripts/agent-compare.py agent-check/pairs.txt

Tolerances (issue 4): temperature ±2 °C, power ±10 %, memory used exact,
clocks ±5 %. Prints a Markdown table, one row per reading and GPU, and
exits 1 if any reading is outside its tolerance.
"""
import re
import sys

LINE = re.compile(r'^(\w+)\{([^}]*)\} (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

# nvidia-smi column → (agent metric, tolerance kind, tolerance)
FIELDS = [
    ("temperature.gpu", "DCGM_FI_DEV_GPU_TEMP", "abs", 2.0, "temp °C"),
    ("power.draw", "DCGM_FI_DEV_POWER_USAGE", "rel", 0.10, "power W"),
    ("memory.used", "DCGM_FI_DEV_FB_USED", "abs", 0.0, "mem used MiB"),
    ("clocks.sm", "DCGM_FI_DEV_SM_CLOCK", "rel", 0.05, "SM MHz"),
    ("clocks.mem", "DCGM_FI_DEV_MEM_CLOCK", "rel", 0.05, "mem MHz"),
]
SMI_COLS = ["index", "uuid", "pci.bus_id", "temperature.gpu", "power.draw",
            "memory.used", "clocks.sm", "clocks.mem"]


def blocks(text):
    for blk in text.split("=== ")[1:]:
        head, rest = blk.split("\n", 1)
        smi, agent = rest.split("--- agent\n", 1)
        smi = smi.replace("--- nvidia-smi\n", "")
        yield head.split()[0], smi, agent


def main(path):
    rows, bad = [], 0
    for label, smi, agent in blocks(open(path).read()):
        metrics = {}
        for line in agent.splitlines():
            m = LINE.match(line)
            if not m:
                continue
            labels = dict(LABEL.findall(m.group(2)))
            metrics[(m.group(1), labels.get("gpu"))] = (float(m.group(3)), labels)
        for line in smi.strip().splitlines():
            cols = dict(zip(SMI_COLS, [c.strip() for c in line.split(",")]))
            gpu = cols["index"]
            ok_ids = True
            _, labels = metrics.get(("DCGM_FI_DEV_GPU_TEMP", gpu), (None, {}))
            if labels.get("UUID") != cols["uuid"] or labels.get("pci_bus_id") != cols["pci.bus_id"]:
                ok_ids = False
                bad += 1
            cells = []
            for col, metric, kind, tol, _ in FIELDS:
                s = float(cols[col])
                a = metrics.get((metric, gpu), (float("nan"), {}))[0]
                diff = a - s
                ok = abs(diff) <= (tol if kind == "abs" else tol * abs(s))
                bad += 0 if ok else 1
                rel = f" ({100 * diff / s:+.1f} %)" if kind == "rel" and s else ""
                cells.append(f"{a:g} / {s:g}{rel} {'ok' if ok else 'OUT'}")
            rows.append(f"| {label} | {gpu} | {'ok' if ok_ids else 'MISMATCH'} | " + " | ".join(cells) + " |")
    print("| reading | gpu | UUID, bus id | " + " | ".join(f[4] + " agent / smi" for f in FIELDS) + " |")
    print("|" + "---|" * (3 + len(FIELDS)))
    print("\n".join(rows))
    print(f"\n{len(rows)} readings, {bad} outside tolerance")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
