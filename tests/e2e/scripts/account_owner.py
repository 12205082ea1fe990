"""Alice's side of accounts_e2e: a script job that keeps its data and
checkpoints in its own root, reports its steps, and trains on until the
test says it may end.

    account_owner.py ROOT GO_FILE"""
import json
import os
import sys
import time

import trainyard

root, go = sys.argv[1], sys.argv[2]
with open(os.path.join(root, "data", "train.bin"), "rb") as f:
    data = f.read()
project = os.path.join(root, "project")
os.makedirs(project, exist_ok=True)
step = 0
deadline = time.monotonic() + 240
while time.monotonic() < deadline:
    step += 1
    trainyard.report(step, samples=len(data), loss=1.0 / step)
    if step % 5 == 0:
        with open(os.path.join(project, "ckpt.json.tmp"), "w") as f:
            json.dump({"step": step}, f)
        os.replace(os.path.join(project, "ckpt.json.tmp"), os.path.join(project, "ckpt.json"))
    if os.path.exists(go) and step >= 20:
        break
    time.sleep(0.05)
print(f"alice trained {step} steps as uid {os.getuid()}", flush=True)
sys.exit(0 if os.path.exists(go) else 3)
