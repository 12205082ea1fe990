"""An Accelerate loop as the no-trainer examples write it, run without an
Accelerate config and without `import trainyard`: each rank starts from its
own random weights, so the ranks end equal only if they form one group.
Writes rank<R>.sha (its final weights' SHA-256) into argv[1]."""
import hashlib
import os
import sys

import torch
from accelerate import Accelerator

accelerator = Accelerator()
print(f"distributed_type={accelerator.distributed_type} processes={accelerator.num_processes}", flush=True)
torch.manual_seed(100 + accelerator.process_index)
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for step in range(5):
    x = torch.randn(4, 8)
    loss = model(x).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
weights = b"".join(p.detach().cpu().numpy().tobytes() for p in accelerator.unwrap_model(model).parameters())
with open(os.path.join(sys.argv[1], f"rank{accelerator.process_index}.sha"), "w") as f:
    f.write(hashlib.sha256(weights).hexdigest())
accelerator.wait_for_everyone()
