#!/usr/bin/env python3
"""PyTorch reference for scripts/gpu-check.d/burn.sh: N×N×N matrix products timed
exactly as `gpuchaos burn` times its own. Inputs uniform in [-1, 1) drawn on
the GPU; one product to size a batch of about --batch-target seconds; then
batches of that many `a @ b`, each between two CUDA events, until --seconds
have passed; the first batch is warm-up and not counted. TFLOP/s = 2·N³ ×
timed products / summed event time. Each batch's last product is also
compared bitwise with a reference product, as gpuchaos does. Prints one
JSON object."""
import argparse
import json
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--dtype", choices=["bf16", "fp16", "tf32", "fp32"], default="bf16")
p.add_argument("--n", type=int, default=8192)
p.add_argument("--seconds", type=float, default=20)
p.add_argument("--batch-target", type=float, default=0.2)
p.add_argument("--device", type=int, default=0)
args = p.parse_args()

torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"
dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}[args.dtype]
bits = {2: torch.int16, 4: torch.int32}[torch.empty(0, dtype=dt).element_size()]
dev = torch.device("cuda", args.device)
torch.cuda.set_device(dev)
g = torch.Generator(device=dev)
g.manual_seed(12345)
n = args.n
a = (torch.rand(n, n, device=dev, generator=g) * 2 - 1).to(dt)
b = (torch.rand(n, n, device=dev, generator=g) * 2 - 1).to(dt)
ref = a @ b
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
c = a @ b
end.record()
end.synchronize()
k = max(1, int(args.batch_target * 1e3 / start.elapsed_time(end)))

flop = 2.0 * n * n * n
timed = 0
total_ms = 0.0
rates = []
mismatches = 0
checks = 0
deadline = time.monotonic() + args.seconds
i = 0
while time.monotonic() < deadline:
    start.record()
    for _ in range(k):
        c = a @ b
    end.record()
    diff = (c.view(bits) != ref.view(bits)).sum()
    end.synchronize()
    ms = start.elapsed_time(end)
    mismatches += int(diff)
    checks += 1
    if i > 0:
        timed += k
        total_ms += ms
        rates.append(flop * k / (ms / 1e3) / 1e12)
    i += 1
rates.sort()
print(json.dumps({
    "dtype": args.dtype, "n": n, "device": torch.cuda.get_device_name(dev),
    "torch": torch.__version__, "batch_products": k, "timed_products": timed,
    "gemm_seconds": total_ms / 1e3, "tflops": flop * timed / (total_ms / 1e3) / 1e12 if total_ms else 0,
    "batch_tflops": {"min": rates[0], "median": rates[len(rates) // 2], "max": rates[-1]} if rates else None,
    "checks": checks, "mismatches": mismatches,
}))
