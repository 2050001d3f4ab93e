#!/usr/bin/env python3
"""Goodput of workload experiments measured on a job against the twin of
the same job.

    scripts/workload-twin.py BIN TWIN.yaml EVERY STEP_SECONDS CKPT_SECONDS RECORD.json...

Each RECORD is a `gpuchaos run --record` of an experiment with a goodput
expectation named "goodput". The experiment in it runs on the twin
(TWIN.yaml, as scripts/workload-gpu.sh writes it) at 20 moments spread over
one checkpoint cycle (EVERY steps of STEP_SECONDS plus a CKPT_SECONDS
write), since a kill costs the work since the last checkpoint; the twin's
goodput is read at the moment closest to the job's own (the steps past its
last checkpoint at injection). Prints one line per record: the measured and
predicted goodput, their losses and the ratio of the losses (twin over
measured), and the twin's range over the cycle. The twin is deterministic,
so this can be re-run on saved records anywhere.
"""
import json
import re
import os
import subprocess
import sys
import tempfile


def goodput(path):
    """The goodput verdict's value and the step at injection, from a record."""
    try:
        with open(path) as f:
            rec = json.load(f)
    except (OSError, ValueError):
        return None, None, None
    for v in rec.get("verdicts") or []:
        if v["name"] == "goodput" and v.get("value") is not None:
            m = re.search(r"step (\d+) ", v.get("detail", ""))
            return v["value"], int(m.group(1)) if m else None, rec.get("experiment")
    return None, None, rec.get("experiment")


def main(argv):
    with tempfile.TemporaryDirectory(prefix="gpuchaos-twin-") as tmp:
        compare(argv, tmp)


def compare(argv, tmp):
    if len(argv) < 7:
        sys.exit(__doc__)
    bin_, twin = argv[1], argv[2]
    every, steptime, ckptsec = int(argv[3]), float(argv[4]), float(argv[5])
    period = every * steptime + ckptsec
    print("%-14s %8s %6s | %8s %6s | %10s %10s %6s" % ("experiment", "measured", "phase", "twin", "phase", "loss meas.", "loss twin", "ratio"))
    for rec in argv[6:]:
        measured, s0, exp = goodput(rec)
        if measured is None or exp is None:
            continue
        base = os.path.join(tmp, os.path.basename(rec))
        spec = base + ".experiment.json"
        with open(spec, "w") as f:
            json.dump(exp, f)
        runs = []
        for i in range(20):
            out = "%s.twin-%d.json" % (base, i)
            subprocess.run([bin_, "run", spec, "--target", "twin", "--cluster", twin,
                            "--warmup", "%.3fs" % (600 + i * period / 20), "--record", out], capture_output=True)
            g, t0, _ = goodput(out)
            if g is not None and t0 is not None:
                runs.append((g, t0 % every))
        name = exp["metadata"]["name"]
        if not runs:
            print("%-14s the twin gave no goodput" % name)
            continue
        phase = s0 % every if s0 is not None else 0
        g, p = min(runs, key=lambda r: abs(r[1] - phase))
        ratio = (1 - g) / (1 - measured) if measured < 1 else float("nan")
        print("%-14s %8.3f %6d | %8.3f %6d | %10.3f %10.3f %6.2f   (twin over the cycle: %.3f-%.3f)"
              % (name, measured, phase, g, p, 1 - measured, 1 - g, ratio, min(r[0] for r in runs), max(r[0] for r in runs)))


if __name__ == "__main__":
    main(sys.argv)
