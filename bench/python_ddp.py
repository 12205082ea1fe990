"""Python peer for bench/ddp_overhead and bench/gpu: the same model (MLP, MNIST CNN, a
CIFAR-style ResNet-18 with BatchNorm, or torchvision's ResNet-50) trained with PyTorch's own
DistributedDataParallel (gloo, CPU, 1 thread per process, gradient_as_bucket_view
as Trainyard), through Accelerate's Accelerator (--accelerate: the same DDP
underneath, as `accelerate launch` users run it), or without DDP at world
size 1. Started once per rank by ddp_overhead with RANK, WORLD_SIZE,
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


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class ResNet18(nn.Module):
    """The worker's resnet model: 3x3 stem, 4 stages of 2 BasicBlocks."""

    def __init__(self, c, classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        blocks, cin = [], c
        for stage in range(4):
            for b in range(2):
                blocks.append(BasicBlock(cin, c << stage, 2 if stage > 0 and b == 0 else 1))
                cin = c << stage
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(8 * c, classes)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))


def build(a):
    """The model and the shape of one input sample."""
    if a.model == "cnn":
        return nn.Sequential(nn.Conv2d(1, 16, 3), nn.ReLU(), nn.Conv2d(16, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(32 * 12 * 12, 128), nn.ReLU(),
                             nn.Linear(128, a.classes)), (1, 28, 28)
    if a.model == "resnet":
        return ResNet18(a.channels, a.classes), (3, a.image_size, a.image_size)
    if a.model == "resnet50":  # the worker's resnet50 is torchvision's, parameter for parameter
        import torchvision
        return torchvision.models.resnet50(num_classes=a.classes), (3, a.image_size, a.image_size)
    layers, width = [], a.input
    for h in [int(x) for x in a.hidden.split(",") if x]:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, a.classes))
    return nn.Sequential(*layers), (a.input,)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp", choices=["mlp", "cnn", "resnet", "resnet50"])
    p.add_argument("--channels", type=int, default=16)
    p.add_argument("--input", type=int, default=784)
    p.add_argument("--hidden", default="1024,1024")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--no-ddp", action="store_true", help="train independently (no process group)")
    p.add_argument("--image-size", type=int, default=32, help="resnet, resnet50: the side of its square images")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="cuda (bench/gpu): model and batch on GPU 0 (every rank)")
    p.add_argument("--bf16", action="store_true", help="torch.autocast(bfloat16) around forward and loss")
    p.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    p.add_argument("--accelerate", action="store_true",
                   help="wrap model and optimizer with Accelerate's Accelerator (PyTorch DDP underneath)")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # as trainyard-worker does (bench_util.h)
    rank = int(os.environ.get("RANK", "0"))
    world = 1 if a.no_ddp else int(os.environ.get("WORLD_SIZE", "1"))
    device = torch.device(a.device)

    torch.manual_seed(42)
    model, shape = build(a)
    model = model.to(device)
    accelerator = None
    if a.accelerate and world > 1:
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs
        # Accelerate reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (MULTI_CPU over gloo).
        accelerator = Accelerator(
            cpu=True, kwargs_handlers=[DistributedDataParallelKwargs(gradient_as_bucket_view=True)])
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=True if a.fused else None)
        model, opt = accelerator.prepare(model, opt)
        torch.set_num_threads(1)  # Accelerate may reset it
    elif world > 1:
        # On one GPU (bench/gpu) the ranks share it, over Gloo (NCCL refuses two ranks on one device).
        dist.init_process_group("gloo", rank=rank, world_size=world)
        # The same setting as Trainyard's default (gradients are views of the buckets).
        model = nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
    if accelerator is None:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=True if a.fused else None)
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(a.batch, *shape, generator=g).to(device)
    y = torch.randint(0, a.classes, (a.batch,), generator=g).to(device)

    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.bf16):
            loss = F.cross_entropy(model(x).float(), y)
        if accelerator is not None:
            accelerator.backward(loss)
        else:
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
        device_peak = torch.cuda.max_memory_allocated() if a.device == "cuda" else 0
        print(json.dumps({"train_seconds": times, "device_peak_bytes": device_peak}), flush=True)


if __name__ == "__main__":
    main()
