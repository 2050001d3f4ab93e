#!/usr/bin/env python3
"""A data-parallel training step whose gradient all-reduce shows: the
benchmark `scripts/nccl-faults` runs under each NCCL environment fault.

Run under torchrun, one process per GPU:

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
      torchrun --standalone --nproc-per-node 2 scripts/nccl-faults.d/ddp-step.py

Model: --layers bias-free Linear(hidden, hidden) layers with ReLU between
them, parameters in bf16, so the defaults (8 x 4096 x 4096) hold 134 M
parameters and every step all-reduces 256 MiB of bf16 gradients through
DistributedDataParallel (default 25 MiB buckets, overlapped with the
backward pass). The batch is small (1024 rows), so the compute of a step
(about 6 x 1024 x 134 M = 0.8 TFLOP) takes roughly as long as the
all-reduce at full NVLink speed, and a slower transport shows in the step
time. Data are synthetic, drawn once on the GPU; the loss is the mean
square of the output; the optimiser is plain SGD.

Timing: --warmup untimed steps (DDP rebuilds its buckets after the first),
then timed steps, each between two torch.cuda.synchronize() calls. The step
count is --steps, or fewer so the timed loop lasts about --max-seconds
(sized from two probe steps, the smallest count over the ranks, so every
rank runs the same number of steps and none waits forever in an
all-reduce). A step's time is the slowest rank's. Rank 0 prints one JSON
object on stdout.
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--max-seconds", type=float, default=15.0)
    ap.add_argument("--bucket-mb", type=int, default=25, help="DDP gradient bucket size (its default is 25)")
    return ap.parse_args()


def main():
    args = parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local_rank)
    torch.cuda.set_device(dev)
    dist.init_process_group(backend="nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(1234 + rank)
    blocks = []
    for i in range(args.layers):
        blocks.append(torch.nn.Linear(args.hidden, args.hidden, bias=False, device=dev, dtype=torch.bfloat16))
        if i < args.layers - 1:
            blocks.append(torch.nn.ReLU())
    model = DDP(torch.nn.Sequential(*blocks), device_ids=[local_rank],
                bucket_cap_mb=args.bucket_mb, gradient_as_bucket_view=True)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.hidden, device=dev, dtype=torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    def step():
        opt.zero_grad(set_to_none=False)
        loss = model(x).float().square().mean()
        loss.backward()
        opt.step()

    def timed_step():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    for _ in range(args.warmup):
        step()
    probe = max(timed_step(), timed_step())
    n = torch.tensor([max(3, min(args.steps, int(args.max_seconds / max(probe, 1e-6))))], device=dev)
    dist.all_reduce(n, op=dist.ReduceOp.MIN)
    steps = int(n.item())

    dist.barrier()
    times = torch.tensor([timed_step() for _ in range(steps)], dtype=torch.float64, device=dev)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)  # a step lasts as long as its slowest rank
    if rank == 0:
        ms = [t * 1e3 for t in times.tolist()]
        mean = statistics.fmean(ms)
        print(json.dumps({
            "world_size": world, "layers": args.layers, "hidden": args.hidden, "batch": args.batch,
            "params": params, "grad_bytes": grad_bytes, "dtype": "bf16", "bucket_mb": args.bucket_mb,
            "warmup": args.warmup, "steps": steps,
            "step_ms_median": statistics.median(ms), "step_ms_mean": mean,
            "step_ms_min": min(ms), "step_ms_max": max(ms),
            "steps_per_s": 1e3 / mean,
            "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "device": torch.cuda.get_device_name(dev),
            "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
