"""Makes what examples/finetune.yaml starts from, with PyTorch: pretrained
weights of an MLP (as `trainyard` names them: fc0, fc1, fc2, here under a
"model." wrapper prefix, in Hugging Face's sharded layout) and a dataset as
tensors in safetensors files (inputs [N, 784] float32, targets [N] int64).

    .venv/bin/python examples/make_finetune_inputs.py finetune-inputs     # the project venv: torch

Any preprocessing done in Python ends the same way: save_file({"inputs": x,
"targets": y}, path) for the data, save_file(model.state_dict(), path) for
the weights.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file


class Pretrained(torch.nn.Module):
    """The architecture of `model: {kind: mlp, hidden: [256, 128]}`."""

    def __init__(self):
        super().__init__()
        self.fc0 = torch.nn.Linear(784, 256)
        self.fc1 = torch.nn.Linear(256, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(torch.relu(self.fc0(x)))))


def main(out):
    os.makedirs(os.path.join(out, "weights"), exist_ok=True)
    os.makedirs(os.path.join(out, "data"), exist_ok=True)
    torch.manual_seed(0)
    # "Pretraining": a few steps on a labelling rule the fine-tuning data shares.
    teacher = torch.randn(784, 10)
    model = Pretrained()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(200):
        x = torch.randn(128, 784)
        loss = torch.nn.functional.cross_entropy(model(x), (x @ teacher).argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    state = {"model." + k: v.contiguous() for k, v in model.state_dict().items()}
    names = sorted(state)
    weight_map = {}
    for i, part in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
        file = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({k: state[k] for k in part}, os.path.join(out, "weights", file))
        weight_map.update({k: file for k in part})
    with open(os.path.join(out, "weights", "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(v.numel() * v.element_size() for v in state.values())},
                   "weight_map": weight_map}, f, indent=2)
    # The dataset, in two files (a directory's files are read in name order).
    for i in range(2):
        x = torch.randn(2048, 784)
        save_file({"inputs": x, "targets": (x @ teacher).argmax(1)},
                  os.path.join(out, "data", f"part-{i}.safetensors"))
    print(f"weights in {out}/weights, data in {out}/data")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "finetune-inputs")
