"""bench/faults: training through kills, whole-group restarts against replicas
that heal. A real trainyard-server runs an MLP job of R ranks (DDP, one
thread each; every rank on this host, so gradients travel through shared
memory in every mode) to a fixed number of samples, first without faults,
then with a SIGKILL of a random worker every K seconds:

- whole_group: in-memory snapshots every 5 steps, restarts allowed (today's
  default behaviour);
- replica: fault_tolerance.mode replica (the survivors go on, the lost rank
  is replaced and heals from a live peer).

Goodput is the wall time of the ordinary job (plain: no snapshots, no
fault tolerance, no kills) over the run's (the same samples are trained in
every run). From the workers' logs (spdlog's millisecond timestamps,
TRAINYARD_REPLICA_HASH=commits): the survivors' stall per kill (the kill to
the next step a survivor commits) and the heal time (the kill to the
replacement's first committed step).

    python3 bench/faults.py BUILD_BIN [--ranks 2] [--kill-every 30 15] [--steps 3000] [--hidden 1024 1024]
"""
import argparse
import datetime
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import e2e_test  # noqa: E402
from e2e_test import Server, wait_for, worker_pids, write_spec  # noqa: E402

JOB = """
name: %(name)s
model: {kind: mlp, hidden: [%(hidden)s]}
data: {kind: synthetic, batch_size: 64, num_samples: 65536}
optimizer: {kind: adamw, lr: 0.0005}
max_steps: %(steps)d
num_processes: %(ranks)d
threads_per_process: 1
metrics_every_steps: 10
max_restarts: 1000
%(extra)s
"""

MODES = {
    "plain": "",  # the ordinary job: no snapshots, no fault tolerance (run without kills only)
    "whole_group": "checkpoint: {snapshot_every_steps: 5}\n",
    "replica": "fault_tolerance: {mode: replica, min_replicas: 1}\n",
}

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})\].*replica rank (\d+) epoch (\d+) step (\d+)", re.M)


def commit_times(state_dir, job_id):
    """{log path: [(unix time, step)]} of every committed step the ranks logged."""
    out = {}
    for root, _, files in os.walk(os.path.join(state_dir, "jobs", job_id)):
        for f in files:
            if f.startswith("rank-") and f.endswith(".log"):
                with open(os.path.join(root, f), errors="replace") as fh:
                    text = fh.read()
                out[os.path.join(root, f)] = [
                    (datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp(), int(m.group(4)))
                    for m in STAMP.finditer(text)]
    return out


def pid_log(pid):
    """The rank log a worker process writes (its stdout)."""
    return os.path.realpath(f"/proc/{pid}/fd/1")


def run(server, tmp, label, mode, args, kill_every, rng):
    spec = write_spec(tmp, f"{label}.yaml", JOB % dict(name=label, hidden=", ".join(map(str, args.hidden)),
                                                       steps=args.steps, ranks=args.ranks, extra=MODES[mode]))
    t0 = time.monotonic()
    job_id = json.loads(server.ctl("-o", "json", "submit", spec).stdout)["id"]
    kills = []  # (unix time, the killed rank's log)
    next_kill = None
    while True:
        job = server.job(job_id)
        if job["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        now = time.monotonic()
        if kill_every and job["state"] == "RUNNING" and job["step"] > 0:
            if next_kill is None:
                next_kill = now + kill_every
            elif now >= next_kill:
                pids = worker_pids(job_id)
                if len(pids) == args.ranks:
                    pid = rng.choice(pids)
                    log = pid_log(pid)
                    kills.append((time.time(), log))
                    os.kill(pid, signal.SIGKILL)
                    next_kill = now + kill_every
        time.sleep(0.05)  # polling the job's state, not waiting for a condition
    wall = time.monotonic() - t0
    assert job["state"] == "SUCCEEDED", (label, job["state"], job.get("reason"))
    stalls, heals = [], []
    if mode == "replica":
        times = commit_times(tmp, job_id)
        for t_kill, killed_log in kills:
            after = [t for path, rows in times.items() if path != killed_log for t, _ in rows if t > t_kill]
            if after:
                stalls.append(min(after) - t_kill)
            healed = [t for t, _ in times.get(killed_log, []) if t > t_kill]
            if healed:
                heals.append(min(healed) - t_kill)
    return dict(label=label, mode=mode, kill_every=kill_every, kills=len(kills), wall=wall, step=job["step"],
                attempt=job["attempt"], stalls=stalls, heals=heals)


def state_bytes(hidden):
    """fp32 parameters of the MLP (784 inputs, 10 classes) and AdamW's two moments."""
    sizes = [784] + list(hidden) + [10]
    params = sum(a * b + b for a, b in zip(sizes, sizes[1:]))
    return 3 * 4 * params


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--kill-every", type=float, nargs="+", default=[30, 15])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--hidden", type=int, nargs="+", default=[1024, 1024])
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--modes", nargs="+", default=["plain", "whole_group", "replica"], choices=list(MODES),
                    help="which jobs to run (goodput needs plain)")
    ap.add_argument("--no-commit-log", action="store_true",
                    help="no per-commit log line (TRAINYARD_REPLICA_HASH=commits): no stall/heal columns")
    args = ap.parse_args()
    e2e_test.BIN = args.bin
    if not args.no_commit_log:
        os.environ["TRAINYARD_REPLICA_HASH"] = "commits"  # a log line per commit, no hash: costs nothing measurable
    rng = random.Random(args.seed)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows = []
    with tempfile.TemporaryDirectory(prefix="trainyard-faults-") as tmp:
        server = Server(tmp, slots=args.ranks)
        try:
            if "plain" in args.modes:
                rows.append(run(server, tmp, "plain-0", "plain", args, 0, rng))
                print(json.dumps(rows[-1]), flush=True)
            for mode in [m for m in ("whole_group", "replica") if m in args.modes]:
                for kill_every in [0] + list(args.kill_every):
                    label = f"{mode}-{int(kill_every)}"
                    rows.append(run(server, tmp, label, mode, args, kill_every, rng))
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            server.stop()
    base = next((r["wall"] for r in rows if r["mode"] == "plain"), None)
    print(f"\nbench/faults at {commit}: MLP {args.hidden}, {args.ranks} ranks, {args.steps} steps of 64 samples "
          f"per rank\n`python3 bench/faults.py {args.bin} --ranks {args.ranks} --kill-every "
          f"{' '.join(str(k) for k in args.kill_every)} --steps {args.steps} --hidden "
          f"{' '.join(map(str, args.hidden))} --modes {' '.join(args.modes)}"
          f"{' --no-commit-log' if args.no_commit_log else ''}`\n")
    print(f"parameters and AdamW state: {state_bytes(args.hidden) / 1e6:.1f} MB per replica\n")
    print("| mode | kill every | kills | wall s | goodput | survivor stall p50 / p99 s | heal p50 / p99 s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        every = f"{r['kill_every']:.0f} s" if r["kill_every"] else "no kills"
        stall = f"{pct(r['stalls'], 0.5):.2f} / {pct(r['stalls'], 0.99):.2f}" if r["stalls"] else "—"
        heal = f"{pct(r['heals'], 0.5):.2f} / {pct(r['heals'], 0.99):.2f}" if r["heals"] else "—"
        goodput = f"{100 * base / r['wall']:.1f}%" if base else "—"
        print(f"| {r['mode']} | {every} | {r['kills']} | {r['wall']:.1f} | {goodput} | {stall} "
              f"| {heal} |")


if __name__ == "__main__":
    main()
