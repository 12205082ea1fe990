"""bench/sweep: what ASHA saves. A real trainyard-server (--slots 4) runs
the same search twice: N trials drawn from one seed, each run to the end
(the "grid": every configuration trained fully), then ASHA over the same
draws (an ASHA searcher draws trial k's values as the random one does), and
the table gives each sweep's rank-seconds (the trials' jobs, start to end,
times their ranks), wall time, best loss and its trial, and the ratio.

The trials are small MLPs on synthetic data (1 rank each, 4 at once on the
machine's cores): what a trial costs beyond training (process start, the
first step) weighs more than on a GPU cluster, which makes ASHA's saving
here a lower bound.

    python3 bench/sweep.py BUILD_BIN [--trials 12] [--steps 3000] [--min-steps 100] [--eta 3]
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
model: {kind: mlp, hidden: [256, 256]}
data: {kind: synthetic, batch_size: 64, num_samples: 65536}
max_steps: %(steps)d
num_processes: 1
seed: 5
metrics_every_steps: 1
sweep:
  parameters:
    optimizer.lr: {log_uniform: [1.0e-6, 3.0e-3]}
  metric: {name: loss, goal: minimize}
  searcher: %(searcher)s
  max_trials: %(trials)d
  concurrency: 4
  seed: 11
"""


def run(server, tmp, name, searcher, a):
    path = write_spec(tmp, name + ".yaml", SPEC % dict(name=name, steps=a.steps, trials=a.trials, searcher=searcher))
    start = time.monotonic()
    r = server.ctl("sweep", "submit", "-q", path)
    assert r.returncode == 0, r.stderr
    sweep_id = r.stdout.strip()

    def ended():
        w = json.loads(server.ctl("-o", "json", "sweep", "get", sweep_id).stdout)
        done = w["state"] in ("SUCCEEDED", "FAILED") and all(t["state"] in ("SUCCEEDED", "FAILED", "CANCELLED")
                                                               for t in w["trials"])
        return w if done else None
    w = wait_for(ended, 3600, name)
    wall = time.monotonic() - start
    best = w["trials"][w["best_trial"]]
    # A freed slot: from a trial's end to the first step of the next trial
    # to start after it (the jobs' own timestamps).
    ends, firsts = [], []
    for t in w["trials"]:
        h = json.loads(server.ctl("-o", "json", "history", t["job_id"], "--series", "loss").stdout)
        at = lambda states: [e["unix_millis"] for e in h["events"] if e["state"] in states]  # noqa: E731
        ends.append(max(at(("SUCCEEDED", "FAILED", "CANCELLED"))))
        pts = h["series"].get("loss", {}).get("points", [])
        firsts.append((min(at(("STARTING",))), pts[0]["unix_millis"] if pts else None))
    gaps = []
    for end in ends:
        later = [first for started, first in firsts if first is not None and started >= end]
        if later:
            gaps.append((min(later) - end) / 1000)
    return {"sweep": name, "rank_s": sum(t["rank_seconds"] for t in w["trials"]), "wall_s": wall,
            "best": best["best_metric"], "best_trial": best["number"],
            "stopped": sum(t["early_stopped"] for t in w["trials"]),
            "steps": sum(t["step"] for t in w["trials"]), "lr": best["values"]["optimizer.lr"],
            "gaps": sorted(gaps)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--min-steps", type=int, default=100)
    p.add_argument("--eta", type=int, default=3)
    a = p.parse_args()
    e2e_test.BIN = os.path.abspath(a.bin)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"command: python3 bench/sweep.py {a.bin} --trials {a.trials} --steps {a.steps} "
          f"--min-steps {a.min_steps} --eta {a.eta}  (commit {commit})")
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-sweep-") as tmp:
        server = Server(tmp, slots=4)
        try:
            full = run(server, tmp, "all-to-the-end", "{kind: random}", a)
            asha = run(server, tmp, "asha", f"{{kind: asha, reduction_factor: {a.eta}, min_steps: {a.min_steps}}}", a)
        finally:
            server.stop()
    print(f"\n| sweep | trials stopped early | steps trained | rank-seconds | wall s | best loss (trial, lr) |")
    print("|---|---|---|---|---|---|")
    for r in (full, asha):
        print(f"| {r['sweep']} | {r['stopped']} of {a.trials} | {r['steps']} | {r['rank_s']:.1f} | {r['wall_s']:.1f} | "
              f"{r['best']:.6g} (trial {r['best_trial']}, {r['lr']}) |")
    for r in (full, asha):
        g = r["gaps"]
        if g:
            print(f"{r['sweep']}: a freed slot trains again (a trial's end -> the next trial's first step) "
                  f"p50 {g[len(g) // 2]:.2f} s, max {g[-1]:.2f} s over {len(g)} (target <= 2 s)")
    ratio = asha["rank_s"] / full["rank_s"]
    gap = 0.0 if asha["best"] == full["best"] else (asha["best"] - full["best"]) / max(abs(full["best"]), 1e-12)
    print(f"\nASHA: {ratio:.0%} of the rank-seconds (target <= 40%), {asha['steps'] / full['steps']:.0%} of the steps; "
          f"best loss {gap:+.2%} from running every trial to the end (target within 1%); "
          f"the same best trial: {'yes' if asha['best_trial'] == full['best_trial'] else 'no'}")


if __name__ == "__main__":
    main()
