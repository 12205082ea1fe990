"""Makes initial weights with PyTorch for Trainyard's init_from tests.

Usage: init_weights.py OUT_DIR

Writes, for an MLP equal to the worker's mlp model (hidden [32, 16], 784
inputs, 10 classes) with weights drawn by torch:
  mlp.safetensors            the state dict under the model's own names
  prefixed/                  the same under "model." in Hugging Face's sharded
                             layout (model.safetensors.index.json, 2 files)
  batch.safetensors          a fixed batch (inputs [8, 784], targets [8])
  loss.txt                   the module's cross-entropy loss on the batch
  torchscript.pt, torchscript.safetensors, torchscript_loss.txt
                             a scripted module (examples/export_torchscript.py's
                             architecture) saved with other weights than its
                             own, and the loss of those weights on the batch
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc0 = torch.nn.Linear(784, 32)
        self.fc1 = torch.nn.Linear(32, 16)
        self.fc2 = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(torch.relu(self.fc0(x)))))


def main(out):
    os.makedirs(os.path.join(out, "prefixed"), exist_ok=True)
    torch.manual_seed(1234)
    mlp = Mlp()
    state = {k: v.contiguous() for k, v in mlp.state_dict().items()}
    save_file(state, os.path.join(out, "mlp.safetensors"))
    names = sorted(state)
    half = len(names) // 2
    weight_map = {}
    for i, part in enumerate((names[:half], names[half:])):
        file = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({"model." + k: state[k] for k in part}, os.path.join(out, "prefixed", file))
        weight_map.update({"model." + k: file for k in part})
    with open(os.path.join(out, "prefixed", "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(v.numel() * 4 for v in state.values())}, "weight_map": weight_map}, f)

    inputs = torch.randn(8, 784)
    targets = torch.randint(0, 10, (8,))
    save_file({"inputs": inputs, "targets": targets}, os.path.join(out, "batch.safetensors"))
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(mlp(inputs), targets)
    with open(os.path.join(out, "loss.txt"), "w") as f:
        f.write(repr(loss.item()))

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    import export_torchscript  # noqa: E402  (the example's module)
    torch.manual_seed(0)
    scripted = torch.jit.script(export_torchscript.Net())
    scripted.save(os.path.join(out, "torchscript.pt"))
    torch.manual_seed(99)
    other = {k: torch.randn_like(v) * 0.05 for k, v in scripted.state_dict().items()}
    save_file(other, os.path.join(out, "torchscript.safetensors"))
    scripted.load_state_dict(other)
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(scripted(inputs), targets)
    with open(os.path.join(out, "torchscript_loss.txt"), "w") as f:
        f.write(repr(loss.item()))


if __name__ == "__main__":
    main(sys.argv[1])
