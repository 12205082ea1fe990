"""Exports a model for `model: {kind: "torchscript:PATH"}` jobs.

    .venv/bin/python examples/export_torchscript.py net.pt     # the project venv: torch

Any torch.nn.Module that torch.jit.script accepts works the same way: its
forward takes the batch of inputs (here [B, 784], MNIST-shaped) and returns
what the job's loss expects ([B, num_classes] logits for cross_entropy).
Trainyard trains the scripted module's own parameters from C++; the FULL
checkpoint's model.safetensors loads back with module.load_state_dict.
"""
import sys

import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.jit.script(Net()).save(sys.argv[1] if len(sys.argv) > 1 else "net.pt")
