#!/usr/bin/env python3
"""PyTorch reference for `gpuchaos nccl`: time one NCCL collective the same way.

Run under torchrun, one process per GPU:

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
      torchrun --nproc-per-node 2 scripts/nccl-check.d/nccl-torch.py \\
        --op all_reduce --dtype bf16 --bytes 268435456 --iters 20

Method, as gpuchaos nccl: the size is counted as nccl-tests counts it (the
whole gathered or scattered array for all_gather and reduce_scatter, a
rank's whole send buffer for all_to_all); warm-up iterations, then CUDA
events around the timed iterations on the rank's current stream; the time
is the slowest rank's mean per iteration; algbw = bytes/time and busbw =
algbw x 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and
all_to_all, 1 for broadcast (GB/s = 1e9 B/s). The output of the last timed
iteration is checked against the exact expected values (small integers);
all_reduce, which works in place, is checked once before the timed loop.
Rank 0 prints one JSON object.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]


def bus_factor(op, n):
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op == "broadcast":
        return 1.0
    return (n - 1) / n


def shape(op, n, elem, target):
    """(bytes, total count, per-rank block) as nccl-tests counts them."""
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        block = target // (n * elem)
        return block * n * elem, block * n, block
    count = target // elem
    return count * elem, count, count


def pattern(rank, count, device):
    # Small integers that vary with rank and index, exact in every dtype
    # and in sums over up to 32 ranks.
    idx = torch.arange(count, device=device, dtype=torch.int64)
    return ((idx * 5 + rank * 3) % 17 - 8).float()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", choices=OPS, default="all_reduce")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--bytes", type=int, default=256 << 20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    if os.environ.get("NCCL_NVLS_ENABLE") != "0":
        os.environ["NCCL_NVLS_ENABLE"] = "0"  # never NVLink SHARP on a shared host

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank, n = dist.get_rank(), dist.get_world_size()
    dt = DTYPES[args.dtype]
    nbytes, count, block = shape(args.op, n, torch.tensor([], dtype=dt).element_size(), args.bytes)
    if block == 0:
        raise SystemExit(f"--bytes {args.bytes} is too small for {args.op} over {n} ranks")

    check_before = False
    if args.op == "all_reduce":
        # all_reduce works in place: the timed loop sums sums (the values
        # grow, the traffic does not), so the exact check runs once before.
        send = pattern(rank, count, dev).to(dt)
        recv = send.clone()
        run = lambda: dist.all_reduce(recv)
        want = sum(pattern(r, count, dev) for r in range(n))
        check_before = True
    elif args.op == "all_gather":
        send = pattern(rank, block, dev).to(dt)
        recv = torch.empty(count, dtype=dt, device=dev)
        run = lambda: dist.all_gather_into_tensor(recv, send)
        want = torch.cat([pattern(r, block, dev) for r in range(n)])
    elif args.op == "reduce_scatter":
        send = pattern(rank, count, dev).to(dt)
        recv = torch.empty(block, dtype=dt, device=dev)
        run = lambda: dist.reduce_scatter_tensor(recv, send)
        want = sum(pattern(r, count, dev) for r in range(n))[rank * block:(rank + 1) * block]
    elif args.op == "broadcast":
        # In place from rank 0's buffer: every iteration sends the same data.
        recv = pattern(rank, count, dev).to(dt)
        run = lambda: dist.broadcast(recv, src=0)
        want = pattern(0, count, dev)
    else:
        send = pattern(rank, count, dev).to(dt)
        recv = torch.empty_like(send)
        run = lambda: dist.all_to_all_single(recv, send)
        want = torch.cat([pattern(j, count, dev)[rank * block:(rank + 1) * block] for j in range(n)])

    wrong = 0
    if check_before:
        run()
        wrong = int((recv.float() != want).sum().item())
    for _ in range(args.warmup):
        run()
    torch.cuda.synchronize()
    dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.iters):
        run()
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / args.iters
    if not check_before:
        wrong = int((recv.float() != want).sum().item())

    # The slowest rank's time, and every rank's wrong count, on rank 0.
    stats = torch.tensor([seconds, float(wrong)], dtype=torch.float64, device=dev)
    gathered = [torch.empty_like(stats) for _ in range(n)]
    dist.all_gather(gathered, stats)
    if rank == 0:
        times = [g[0].item() for g in gathered]
        slowest = max(times)
        algbw = nbytes / slowest / 1e9
        print(json.dumps({
            "op": args.op, "dtype": args.dtype, "nranks": n, "bytes": nbytes, "count": count,
            "warmup": args.warmup, "iters": args.iters,
            "time_us": slowest * 1e6, "algbw_gbps": algbw, "busbw_gbps": algbw * bus_factor(args.op, n),
            "rank_time_us": [t * 1e6 for t in times], "wrong": int(sum(g[1].item() for g in gathered)),
            "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        }))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
