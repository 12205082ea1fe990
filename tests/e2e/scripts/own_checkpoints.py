"""A training loop with checkpoints of its own, nanoGPT's way: it writes
OUT/ckpt.json every 10 iterations and resumes from it only when told
(--init_from=resume); it never imports trainyard and prints its progress.

    own_checkpoints.py OUT STEPS [--init_from=resume]"""
import json
import os
import sys
import time

out, steps = sys.argv[1], int(sys.argv[2])
ckpt = os.path.join(out, "ckpt.json")
start = 0
if "--init_from=resume" in sys.argv[3:]:
    with open(ckpt) as f:
        start = json.load(f)["iter"]
print(f"starting at iter {start}", flush=True)
for it in range(start, steps):
    if it % 10 == 0 and it > start:
        with open(ckpt + ".tmp", "w") as f:
            json.dump({"iter": it}, f)
        os.replace(ckpt + ".tmp", ckpt)
    print(f"iter {it}: loss {1.0 / (it + 1):.4f}", flush=True)
    time.sleep(0.05)
