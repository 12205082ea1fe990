"""Python peer for bench/ddp_overhead: the same MLP trained with PyTorch's own
DistributedDataParallel (gloo, CPU, 1 thread per process), or without DDP at
world size 1. Started once per rank by ddp_overhead with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT in the environment (torchrun's convention).
Rank 0 prints one JSON line with its per-step times.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--input", type=int, default=784)
    p.add_argument("--hidden", default="1024,1024")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--no-ddp", action="store_true", help="train independently (no process group)")
    a = p.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    world = 1 if a.no_ddp else int(os.environ.get("WORLD_SIZE", "1"))

    torch.manual_seed(42)
    layers, width = [], a.input
    for h in [int(x) for x in a.hidden.split(",") if x]:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, a.classes))
    model = nn.Sequential(*layers)
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(a.batch, a.input, generator=g)
    y = torch.randint(0, a.classes, (a.batch,), generator=g)

    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        t1 = time.perf_counter()
        if step >= a.warmup:
            times.append(t1 - t0)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        print(json.dumps({"train_seconds": times}), flush=True)


if __name__ == "__main__":
    main()
