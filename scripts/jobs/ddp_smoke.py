"""PyTorch DDP smoke job: a small MLP learns a fixed random linear map from synthetic data.

Started by torchrun (one worker per GPU; CPU and gloo where no GPU is visible). Nothing is
downloaded: inputs come from a seeded generator. Every rank trains on its own batches; DDP
all-reduces the gradients over NCCL (EFA between nodes). Rank 0 prints one line per 10 steps
and, with --result, writes a JSON summary:

    {"world_size": 16, "steps": 200, "step_time_ms": {"median": ..., "p90": ...},
     "loss_first": ..., "loss_last": ..., "loss_fell": true, "device": "cuda"}

The exit status is 1 when the loss did not fall (last 10 steps' mean not below 0.5x the first
10 steps' mean), so the job itself fails on a broken all-reduce or optimizer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

WIDTH = 1024
HIDDEN = 4096
BATCH = 64
WINDOW = 10


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--result", help="JSON file rank 0 writes")
    args = parser.parse_args()
    if args.steps < 2 * WINDOW:
        parser.error(f"--steps must be at least {2 * WINDOW}, got {args.steps}")

    cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    torch.manual_seed(0)  # same teacher and initial weights on every rank
    teacher = torch.randn(WIDTH, WIDTH, device=device) / WIDTH**0.5
    model = nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, WIDTH)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    data = torch.Generator(device=device).manual_seed(1000 + rank)  # each rank its own batches

    losses: list[float] = []
    times_ms: list[float] = []
    for step in range(args.steps):
        x = torch.randn(BATCH, WIDTH, device=device, generator=data)
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        loss = nn.functional.mse_loss(ddp(x), x @ teacher)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if cuda:
            torch.cuda.synchronize()
        times_ms.append((time.perf_counter() - start) * 1000)
        reduced = loss.detach().clone()
        dist.all_reduce(reduced)
        losses.append(reduced.item() / world)
        if rank == 0 and (step + 1) % WINDOW == 0:
            print(f"fminfra-ddp step {step + 1}/{args.steps} loss {losses[-1]:.6f} step_time_ms {times_ms[-1]:.2f}", flush=True)

    first = statistics.fmean(losses[:WINDOW])
    last = statistics.fmean(losses[-WINDOW:])
    timed = sorted(times_ms[WINDOW:])  # the first steps include CUDA and NCCL warm-up
    summary = {
        "world_size": world,
        "steps": args.steps,
        "step_time_ms": {"median": statistics.median(timed), "p90": timed[int(0.9 * (len(timed) - 1))]},
        "loss_first": first,
        "loss_last": last,
        "loss_fell": last < 0.5 * first,
        "device": device.type,
    }
    if rank == 0:
        print("fminfra-ddp result " + json.dumps(summary, sort_keys=True), flush=True)
        if args.result:
            with open(args.result, "w", encoding="utf-8") as out:
                json.dump(summary, out, sort_keys=True)
    dist.destroy_process_group()
    return 0 if summary["loss_fell"] else 1


if __name__ == "__main__":
    sys.exit(main())
