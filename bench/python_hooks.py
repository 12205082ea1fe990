"""Python peer for bench/comm_hooks: the same MLP (784-1024-1024-1024-1024-10),
batch 16 per rank, SGD with momentum, trained with PyTorch's own
DistributedDataParallel over Gloo and PyTorch's own communication hooks
(torch.distributed.algorithms.ddp_comm_hooks): fp16_compress_hook,
bf16_compress_hook, powerSGD_hook and batched_powerSGD_hook, PowerSGD from
the third step with error feedback and warm start, as Trainyard's run.

Started once per rank by comm_hooks with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT in the environment (GLOO_SOCKET_IFNAME names the link inside the
network namespaces). Rank 0 prints one JSON line: per-step seconds and the
mean loss of the last 10 steps, or the error a hook raised.
"""
import argparse
import datetime
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hook", default="none", choices=["none", "fp16", "bf16", "power_sgd", "batched_power_sgd"])
    p.add_argument("--rank", type=int, default=1, help="matrix_approximation_rank")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # as trainyard-worker does (bench_util.h)
    rank = int(os.environ["RANK"])
    # A short timeout: when a hook raises on one rank the other is not left
    # waiting in a collective for the default 30 minutes.
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]),
                            timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(42)
    widths = [784, 1024, 1024, 1024, 1024]
    layers = []
    for i in range(len(widths) - 1):
        layers += [nn.Linear(widths[i], widths[i + 1]), nn.ReLU()]
    model = nn.parallel.DistributedDataParallel(nn.Sequential(*layers, nn.Linear(1024, 10)),
                                                gradient_as_bucket_view=True)
    if a.hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif a.hook == "bf16":
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif a.hook in ("power_sgd", "batched_power_sgd"):
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=a.rank,
                                            start_powerSGD_iter=2, use_error_feedback=True, warm_start=True)
        hook = powerSGD_hook.powerSGD_hook if a.hook == "power_sgd" else powerSGD_hook.batched_powerSGD_hook
        model.register_comm_hook(state, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1000 + rank)
    data = [(torch.randn(a.batch, 784, generator=g), torch.randint(0, 10, (a.batch,), generator=g)) for _ in range(8)]
    times, losses, error = [], [], None
    try:
        for step in range(a.warmup + a.steps):
            x, y = data[step % len(data)]
            t0 = time.perf_counter()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
            if step >= a.warmup:
                times.append(time.perf_counter() - t0)
    except Exception as e:  # reported as measured (e.g. batched_powerSGD_hook's AssertionError)
        error = f"{type(e).__name__}: {e}".strip()
    if rank == 0:
        out = {"step_seconds": times, "loss": sum(losses[-10:]) / max(1, len(losses[-10:]))}
        if error:
            out["error"] = error[:200]
        print(json.dumps(out), flush=True)
    if error is None:
        dist.barrier()
        dist.destroy_process_group()
    else:
        os._exit(0)  # the peer rank may be stuck in a collective; nothing to wait for


if __name__ == "__main__":
    main()
