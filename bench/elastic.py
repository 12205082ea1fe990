"""bench/elastic: making room for a job of higher priority, by shrinking an
elastic job against preempting a fixed one. A real trainyard-server with 3
slots runs a low-priority, preemptible 3-rank MLP job; a high-priority
1-rank job is submitted; when it has ended, the low job gets its slot back.

- shrink: the low job is elastic (elastic.min_processes 1, fault_tolerance
  replica): one rank leaves, the urgent job starts; the low job grows back.
- preempt: the low job is not elastic: it checkpoints, stops, and is queued
  again; it resumes from its checkpoint once the urgent job ended.

Measured per round: submit -> the urgent job's first step (its rank log's
millisecond timestamp), and the urgent job's end -> the low job training on
3 ranks again (polled every 50 ms), with the low job's attempts.

    python3 bench/elastic.py BUILD_BIN [--rounds 5]
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import e2e_test  # noqa: E402
from e2e_test import URGENT_JOB, priority_server, wait_for, worker_pids, write_spec  # noqa: E402

LOW = """
name: low
model: {kind: mlp, hidden: [256, 256]}
data: {kind: synthetic, batch_size: 32, num_samples: 4096}
optimizer: {kind: adamw, lr: 0.001}
max_steps: 1000000
num_processes: 3
metrics_every_steps: 10
priority: low
preemptible: true
checkpoint: {every_steps: 1000000}
%(extra)s
"""

MODES = {
    "shrink": "fault_tolerance: {mode: replica, min_replicas: 1}\nelastic: {min_processes: 1}\n",
    "preempt": "",
}

STEP1 = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})\] \[info\] rank 0 step 1 ", re.M)


def submit(server, path):
    r = server.ctl("-o", "json", "submit", path)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)["id"]


def first_step_time(state_dir, job_id):
    """Unix time of the job's first step in its rank 0 log, or None."""
    path = os.path.join(state_dir, "jobs", job_id, "attempt-1", "rank-0.log")
    try:
        with open(path, errors="replace") as f:
            m = STEP1.search(f.read())
    except FileNotFoundError:
        return None
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp() if m else None


def full_size(server, job_id, mode):
    """Whether the low job trains on all 3 ranks."""
    jb = server.job(job_id)
    if jb["state"] != "RUNNING" or len(worker_pids(job_id)) != 3:
        return False
    if mode == "shrink":
        r = jb.get("replicas") or {}
        return sorted(r.get("live", [])) == [0, 1, 2] and not r.get("leaving") and not r.get("healing")
    return jb["step"] > 0 and any(s["rank"] == 0 and s["step"] > 0 for s in jb.get("ranks", []))


def run_mode(bin_dir, mode, rounds):
    tmp = tempfile.TemporaryDirectory(prefix=f"trainyard-bench-elastic-{mode}-")
    d = tmp.name
    s = priority_server(d, slots=3)
    rows = []
    try:
        low = submit(s, write_spec(d, "low.yaml", LOW % dict(extra=MODES[mode])))
        for k in range(rounds):
            wait_for(lambda: full_size(s, low, mode), 180, "the low job on 3 ranks")
            mark = s.job(low)["step"]
            wait_for(lambda: s.job(low)["step"] >= mark + 20, 120, "the low job to train")
            submitted = time.time()
            urgent = submit(s, write_spec(d, f"urgent-{k}.yaml", URGENT_JOB))
            wait_for(lambda: s.job(urgent)["state"] in ("SUCCEEDED", "FAILED"), 180, "the urgent job to end")
            ended = time.time()
            assert s.job(urgent)["state"] == "SUCCEEDED", s.job(urgent)
            wait_for(lambda: full_size(s, low, mode), 180, "the low job back on 3 ranks")
            back = time.time()
            first = first_step_time(d, urgent)
            rows.append((first - submitted, back - ended))
        attempts = s.job(low)["attempt"]
        s.ctl("cancel", low)
    finally:
        s.stop()
        tmp.cleanup()
    return rows, attempts


def p50(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    e2e_test.BIN = a.bin
    print(f"command: python3 bench/elastic.py {a.bin} --rounds {a.rounds}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"commit: {commit}\n")
    print("| low job | rounds | urgent job's first step after submit, s (p50 / max) "
          "| low job back on 3 ranks after the urgent job ended, s (p50 / max) | low job's attempts |")
    print("|---|---|---|---|---|")
    for mode in ("shrink", "preempt"):
        rows, attempts = run_mode(a.bin, mode, a.rounds)
        first = [r[0] for r in rows]
        back = [r[1] for r in rows]
        print(f"| {mode} | {len(rows)} | {p50(first):.2f} / {max(first):.2f} | {p50(back):.2f} / {max(back):.2f} "
              f"| {attempts} |", flush=True)


if __name__ == "__main__":
    main()
