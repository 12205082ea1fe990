"""A script trial of sweep_e2e: torch's SGD at the learning rate in $LR
fits one weight w to 3 (loss (w - 3)^2), so the loss of step k is
9 (1 - 2 LR)^(2 (k - 1)): a larger LR is better, and the loss after a resume
is that of the checkpoint's w. It reports each step's loss and its LR
(series `lr`), saves its state when asked (PBT's copy), and resumes from
trainyard.resume_dir().

    sweep_trial.py STEPS STEP_SECONDS
"""
import os
import sys
import time

import torch

import trainyard

steps, pause = int(sys.argv[1]), float(sys.argv[2])
lr = float(os.environ["LR"])
w = torch.zeros(1, requires_grad=True)
opt = torch.optim.SGD([w], lr=lr)
start = 0
if trainyard.resume_dir():
    state = torch.load(os.path.join(trainyard.resume_dir(), "state.pt"))
    with torch.no_grad():
        w.copy_(state["w"])
    start = state["step"]
    print(f"resumed at step {start} from {trainyard.resume_dir()}: w {w.item()}, lr {lr}", flush=True)
for step in range(start + 1, steps + 1):
    loss = ((w - 3.0) ** 2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    trainyard.report(step, samples=1, loss=loss.item(), total=steps, lr=lr)
    if trainyard.checkpoint_requested() or trainyard.should_stop():
        path = trainyard.checkpoint_dir(step)
        os.makedirs(path, exist_ok=True)
        torch.save({"step": step, "w": w.detach().clone()}, os.path.join(path, "state.pt"))
        trainyard.checkpoint_saved(path, step)
    if trainyard.should_stop():
        break
    time.sleep(pause)
