"""bench/sweep_scale: a sweep of 100 trials as one command, and its bulk
cancel. A real trainyard-server with --slots S runs:

1. `trainctl sweep submit` of a 100-trial random sweep of short MLP trials
   (1 rank each, S at once) to its end: the submit's and a `sweep get`'s
   latency with all 100 trials listed, the answer's size, the wall time and
   the trials' states;
2. a second 100-trial sweep of trials that never end by themselves, with S
   live at once: `trainctl sweep cancel` once all S train, and the time
   from the call until every trial of the sweep has ended (target <= 10 s).

    python3 bench/sweep_scale.py BUILD_BIN [--trials 100] [--slots 16] [--steps 60]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import e2e_test  # noqa: E402
from e2e_test import Server, wait_for, write_spec  # noqa: E402

SPEC = """
name: %(name)s
model: {kind: mlp, hidden: [64]}
data: {kind: synthetic, batch_size: 16, num_samples: 2048}
max_steps: %(steps)d
num_processes: 1
sweep:
  parameters:
    optimizer.lr: {log_uniform: [1.0e-5, 1.0e-2]}
    seed: {int: [0, 1000]}
  metric: {name: loss, goal: minimize}
  searcher: {kind: random}
  max_trials: %(trials)d
  concurrency: %(concurrency)d
  seed: 3
"""
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")


def timed(f):
    start = time.monotonic()
    out = f()
    return out, time.monotonic() - start


def sweep_get(server, sweep_id):
    r = server.ctl("-o", "json", "sweep", "get", sweep_id)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), len(r.stdout)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--slots", type=int, default=16)
    p.add_argument("--steps", type=int, default=60)
    a = p.parse_args()
    e2e_test.BIN = os.path.abspath(a.bin)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"command: python3 bench/sweep_scale.py {a.bin} --trials {a.trials} --slots {a.slots} --steps {a.steps}"
          f"  (commit {commit})", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-sweep-scale-") as tmp:
        server = Server(tmp, slots=a.slots)
        try:
            # 1. To its end.
            path = write_spec(tmp, "whole.yaml", SPEC % dict(name="whole", steps=a.steps, trials=a.trials,
                                                             concurrency=a.slots))
            start = time.monotonic()
            r, submit_s = timed(lambda: server.ctl("sweep", "submit", "-q", path))
            assert r.returncode == 0, r.stderr
            sweep_id = r.stdout.strip()
            w = wait_for(lambda: (lambda w: w if w["state"] in ENDED and all(t["state"] in ENDED for t in w["trials"])
                                  else None)(sweep_get(server, sweep_id)[0]), 3600, "the 100-trial sweep to end")
            wall = time.monotonic() - start
            (w, size), get_s = timed(lambda: sweep_get(server, sweep_id))
            states = {}
            for t in w["trials"]:
                states[t["state"]] = states.get(t["state"], 0) + 1
            rows.append(("submit a 100-trial sweep (trainctl sweep submit)", f"{submit_s * 1000:.0f} ms"))
            rows.append((f"sweep get with {len(w['trials'])} trials (trainctl -o json)",
                         f"{get_s * 1000:.0f} ms, {size / 1024:.0f} KiB"))
            rows.append((f"the sweep to its end ({a.steps} steps a trial, {a.slots} at once)",
                         f"{wall:.0f} s; {w['state']}, trials {states}"))
            print(rows[-1], flush=True)

            # 2. Bulk cancel with `slots` live trials.
            path = write_spec(tmp, "cancelled.yaml", SPEC % dict(name="cancelled", steps=10_000_000, trials=a.trials,
                                                                 concurrency=a.slots))
            r = server.ctl("sweep", "submit", "-q", path)
            assert r.returncode == 0, r.stderr
            sweep_id = r.stdout.strip()

            def all_training():
                w, _ = sweep_get(server, sweep_id)
                live = [t for t in w["trials"] if t["state"] == "RUNNING" and t["step"] > 0]
                return w if len(live) >= a.slots else None
            wait_for(all_training, 600, f"{a.slots} trials training")
            start = time.monotonic()
            r = server.ctl("sweep", "cancel", sweep_id)
            assert r.returncode == 0, r.stderr
            answered = time.monotonic() - start
            w = wait_for(lambda: (lambda w: w if w["state"] == "CANCELLED" and
                                  all(t["state"] in ENDED for t in w["trials"]) else None)(
                sweep_get(server, sweep_id)[0]), 120, "every trial cancelled")
            ended = time.monotonic() - start
            rows.append((f"bulk cancel, {a.slots} trials training: the call answered / every trial ended",
                         f"{answered:.2f} s / {ended:.2f} s (target <= 10 s)"))
        finally:
            server.stop()
    print("\n| measure | result |")
    print("|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
