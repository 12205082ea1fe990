"""A torchrun training script (plain torch.distributed and DDP, no
Accelerate) that runs as it is under `torchrun` and as a Trainyard script
job (examples/torchrun_script/job.yaml).

    PYTHONPATH=python .venv/bin/torchrun --nproc_per_node 2 examples/torchrun_script/train.py --steps 200

(from the checkout: `.venv` is the project venv, `python/` holds the
`trainyard` package; `pip install ./python` into your own venv does the same).

It reads what torchrun gives every process (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT: Trainyard sets the same), reports its steps,
saves when asked or stopped, and resumes from the checkpoint Trainyard
offers after a restart. Outside Trainyard the trainyard calls do nothing.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import trainyard


def batch_for(step, rank, batch_size):
    """The batch of `step` on `rank`: the same after a restart."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(batch_size, 32, generator=g)
    y = (x[:, :4].sum(1) > 0).long()
    return x, y


def save(path, step, model, opt, rank):
    """One file per checkpoint, written by rank 0; every rank registers it."""
    if rank == 0:
        os.makedirs(path, exist_ok=True)
        torch.save({"step": step, "model": model.module.state_dict(), "optimizer": opt.state_dict()},
                   os.path.join(path, "state.pt"))
    dist.barrier()
    trainyard.checkpoint_saved(path, step)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--checkpoint-every", type=int, default=0, help="0: only when asked")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step (slows a demo down)")
    a = p.parse_args()

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank = dist.get_rank()
    device = torch.device("cuda") if cuda else torch.device("cpu")

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2)).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)

    start = 0
    if trainyard.resume_dir():
        state = torch.load(os.path.join(trainyard.resume_dir(), "state.pt"), map_location=device)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
        if rank == 0:
            print(f"resumed at step {start} from {trainyard.resume_dir()}", flush=True)

    recent = []
    for step in range(start, a.steps):
        x, y = batch_for(step, rank, a.batch_size)
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        done = step + 1
        trainyard.report(done, samples=a.batch_size, loss=loss.item(), total=a.steps)
        recent.append(loss.item())
        if rank == 0 and (done % 50 == 0 or done == a.steps):
            print(f"step {done} loss {sum(recent) / len(recent):.4f}", flush=True)  # the mean since the last line
            recent = []
        periodic = a.checkpoint_every > 0 and done % a.checkpoint_every == 0
        if trainyard.checkpoint_requested() or trainyard.should_stop() or periodic:
            save(trainyard.checkpoint_dir(done), done, model, opt, rank)
        if trainyard.should_stop():
            break
        if a.step_sleep:
            time.sleep(a.step_sleep)

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # With Gloo, DDP keeps references to the process group, so destroying it
    # does not stop Gloo's worker threads; one that drops the last
    # collective's tensors while Python shuts down aborts the process
    # ("terminate called without an active exception", pytorch/pytorch#179291).
    # All is saved and reported by now: leave without Python's shutdown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
