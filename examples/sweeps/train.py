"""A small training script to sweep (examples/sweeps/script-asha.yaml and
script-pbt.yaml): an MLP fits a fixed nonlinear regression with SGD at the
learning rate in $LR, which each trial of a sweep sets through
`script.env.LR`. What a sweep needs of a script:

- `trainyard.report(step, loss=...)` at every step: ASHA compares trials at
  its rungs, and PBT ranks them, by the steps and values reported; the last
  step reported is the sweep's `sweep.max_steps` (here `--steps`);
- for PBT, saving when `trainyard.checkpoint_requested()` (the sweep asks
  the better trial for a checkpoint) and `trainyard.checkpoint_saved`; the
  copy that replaces a poorer trial starts with `trainyard.resume_dir()` at
  that checkpoint and its own $LR.

Run it alone (from the checkout; the trainyard calls do nothing outside
Trainyard):

    LR=0.05 PYTHONPATH=python .venv/bin/python examples/sweeps/train.py --steps 200
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F

import trainyard


def batch(step, size=256):
    """The batch of `step`: the same in every trial, and after a resume."""
    g = torch.Generator().manual_seed(step)
    x = torch.randn(size, 16, generator=g)
    y = torch.tanh(x @ torch.linspace(-0.5, 0.5, 16)).unsqueeze(1)
    return x, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--step-seconds", type=float, default=0.0, help="a pause per step (slows a demo down)")
    a = p.parse_args()
    lr = float(os.environ.get("LR", "0.05"))

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    start = 0
    if trainyard.resume_dir():  # a PBT copy of a better trial (or a restart)
        state = torch.load(os.path.join(trainyard.resume_dir(), "state.pt"))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        for group in opt.param_groups:
            group["lr"] = lr  # this trial's own learning rate, not the one saved with the state
        start = state["step"]
        print(f"resumed at step {start} from {trainyard.resume_dir()} with lr {lr}", flush=True)

    for step in range(start + 1, a.steps + 1):
        x, y = batch(step)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        trainyard.report(step, samples=len(x), loss=loss.item(), total=a.steps)
        if step % 20 == 0 or step == a.steps:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        if trainyard.checkpoint_requested() or trainyard.should_stop():
            path = trainyard.checkpoint_dir(step)
            os.makedirs(path, exist_ok=True)
            torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()},
                       os.path.join(path, "state.pt"))
            trainyard.checkpoint_saved(path, step)
        if trainyard.should_stop():
            break
        time.sleep(a.step_seconds)


if __name__ == "__main__":
    main()
