"""An Accelerate training loop that runs as it is under `accelerate launch`
and as a Trainyard script job (examples/accelerate_script/job.yaml).

With Trainyard it reports every step (`trainyard.report`: /metrics and
`trainctl watch`), saves a checkpoint when asked (`trainctl checkpoint`) or
every --checkpoint-every steps, saves and returns when preempted or cancelled
with --checkpoint (`trainyard.should_stop`), and resumes from the checkpoint
Trainyard offers after a restart (`trainyard.resume_dir`). Outside Trainyard
those calls do nothing.

    cd examples/accelerate_script
    PYTHONPATH=../../python ../../.venv/bin/accelerate launch --config_file cpu.yaml train.py --steps 200

(`.venv` in the checkout is the project venv, `python/` holds the
`trainyard` package; `pip install ./python` into your own venv does the same).
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed

import trainyard


def batch_for(step, rank, batch_size):
    """The batch of `step` on `rank`: the same after a restart."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(batch_size, 32, generator=g)
    y = (x[:, :4].sum(1) > 0).long()  # a learnable rule
    return x, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--checkpoint-every", type=int, default=0, help="0: only when asked")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step (slows a demo down)")
    p.add_argument("--save-weights", default="", help="write the final weights here (rank 0)")
    a = p.parse_args()

    accelerator = Accelerator(cpu=True, kwargs_handlers=[trainyard.ddp_kwargs()] if trainyard.in_trainyard() else [])
    set_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    model, opt = accelerator.prepare(model, opt)

    start = 0
    if trainyard.resume_dir():
        accelerator.load_state(trainyard.resume_dir())
        start = trainyard.resumed_step()
        accelerator.print(f"resumed at step {start} from {trainyard.resume_dir()}")

    recent = []
    for step in range(start, a.steps):
        x, y = batch_for(step, accelerator.process_index, a.batch_size)
        loss = F.cross_entropy(model(x), y)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        done = step + 1
        trainyard.report(done, samples=a.batch_size, loss=loss.item(), total=a.steps)
        recent.append(loss.item())
        if done % 50 == 0 or done == a.steps:
            accelerator.print(f"step {done} loss {sum(recent) / len(recent):.4f}")  # the mean since the last line
            recent = []
        periodic = a.checkpoint_every > 0 and done % a.checkpoint_every == 0
        if trainyard.checkpoint_requested() or trainyard.should_stop() or periodic:
            path = trainyard.checkpoint_dir(done)
            accelerator.save_state(path)
            accelerator.wait_for_everyone()
            trainyard.checkpoint_saved(path, done)
        if trainyard.should_stop():
            accelerator.print(f"stopping at step {done}: the job resumes from its checkpoint")
            return
        if a.step_sleep:
            import time
            time.sleep(a.step_sleep)

    accelerator.wait_for_everyone()
    if a.save_weights and accelerator.is_main_process:
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in accelerator.unwrap_model(model).state_dict().items()},
                  a.save_weights)


if __name__ == "__main__":
    main()
    # With Gloo, DDP keeps references to the process group, so Gloo's worker
    # threads outlive the loop; one that drops the last collective's tensors
    # while Python shuts down aborts the process ("terminate called without
    # an active exception", pytorch/pytorch#179291). All is saved and
    # reported by now: leave without Python's shutdown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
