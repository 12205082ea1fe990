"""bench/recovery: how long a killed worker costs. A real trainyard-server
runs the demo job (examples/mnist-ddp.yaml, 2 ranks) with restarts allowed;
10 times, a random worker gets SIGKILL a few seconds into an attempt, and
the table gives, per kill, the recovery the server measured
(trainyard_job_recovery_seconds: failure detected -> end of the new
attempt's first step, from that step's own timestamp), the time from the
kill to the moment /metrics showed that recovery (an upper bound of kill ->
first new step: it adds the worker's metrics report and the polling), and
how many steps were lost. Settings: disk checkpoints every 100 steps, or
in-memory snapshots every 5 steps as well.

    python3 bench/recovery.py BUILD_BIN [--kills 10] [--seed 1]
"""
import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import e2e_test  # noqa: E402
from e2e_test import Server, wait_for, worker_pids, write_spec  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def series(text, name, job_id):
    m = re.search(r"^%s\{job_id=\"%s\"\} (\S+)$" % (re.escape(name), re.escape(job_id)), text, re.M)
    return float(m.group(1)) if m else 0.0


def run(server, tmp, label, extra, kills, rng):
    with open(os.path.join(ROOT, "examples", "mnist-ddp.yaml")) as f:
        spec = f.read().replace("max_steps: 600", "max_steps: 1000000")
    spec += f"max_restarts: {kills + 5}\n{extra}"
    path = write_spec(tmp, f"{label}.yaml", spec)
    job_id = json.loads(server.ctl("-o", "json", "submit", path).stdout)["id"]
    rows = []
    for k in range(kills):
        text = server.scrape()
        count = series(text, "trainyard_job_recovery_seconds_count", job_id)
        total = series(text, "trainyard_job_recovery_seconds_sum", job_id)
        lost = series(text, "trainyard_job_lost_steps_total", job_id)
        attempt = server.job(job_id)["attempt"]
        # Train a few seconds into the attempt (past its first step) first.
        wait_for(lambda: server.job(job_id)["state"] == "RUNNING" and len(worker_pids(job_id)) == 2
                 and series(server.scrape(), "trainyard_job_recovery_seconds_count", job_id) == count,
                 120, "a running attempt")
        time.sleep(rng.uniform(3, 6))  # a random moment of the attempt, not a wait for a condition
        pids = worker_pids(job_id)
        t_kill = time.time()
        os.kill(rng.choice(pids), signal.SIGKILL)
        seen = None
        while time.time() - t_kill < 120:
            text = server.scrape()
            if series(text, "trainyard_job_recovery_seconds_count", job_id) > count:
                seen = time.time() - t_kill
                break
            time.sleep(0.02)
        if seen is None:
            raise RuntimeError(f"{label}: no recovery within 120 s after kill {k + 1}")
        rows.append({"measured": series(text, "trainyard_job_recovery_seconds_sum", job_id) - total,
                     "kill_to_seen": seen,
                     "lost": series(text, "trainyard_job_lost_steps_total", job_id) - lost,
                     "attempt": attempt})
    server.ctl("cancel", job_id)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    e2e_test.BIN = os.path.abspath(a.bin)
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="trainyard-bench-recovery-")
    server = Server(tmp, slots=2)
    try:
        settings = [("disk", "checkpoint: {every_steps: 100, total_limit: 2}\n"),
                    ("snapshots", "checkpoint: {every_steps: 100, total_limit: 2, snapshot_every_steps: 5}\n")]
        print("| setting | kills | recovery, server-measured s (median / max) | kill -> seen on /metrics s "
              "(median / max) | lost steps per kill (median / max) |\n|---|---|---|---|---|")
        for label, extra in settings:
            rows = run(server, tmp, label, extra, a.kills, rng)
            m = [r["measured"] for r in rows]
            s = [r["kill_to_seen"] for r in rows]
            lost = [r["lost"] for r in rows]
            print(f"| {label} | {len(rows)} | {statistics.median(m):.2f} / {max(m):.2f} | "
                  f"{statistics.median(s):.2f} / {max(s):.2f} | {statistics.median(lost):.0f} / {max(lost):.0f} |")
    finally:
        server.stop()
    print(f"job: examples/mnist-ddp.yaml (MLP 784-512-256-10, DDP, 2 ranks) with max_steps 1000000 and the "
          f"setting's checkpoint block; one kill -9 of a random worker 3-6 s into each attempt.\n"
          f"command: python3 bench/recovery.py {a.bin} --kills {a.kills} --seed {a.seed}")


if __name__ == "__main__":
    main()
