"""bench/script_jobs.py: what running a script under Trainyard costs.

1. Start-up: `trainctl submit` -> the script's first step, against
   `accelerate launch` -> the same script's first step (2 processes, the same
   Accelerate config, the same machine), in alternating rounds. Each side's
   clock starts when its command is run and stops at the wall time the
   script's rank 0 writes at its first step. Trainyard runs twice a round:
   with the workers' cache of Accelerate's environment emptied, and with it
   kept.
2. `trainyard.report` per step: the script job times N calls (the real
   worker reads them), against a 10 ms step.

    python3 bench/script_jobs.py build/bin [--rounds 5] [--reports 20000]

Prints a table and the command. Needs the venv's Python (TRAINYARD_PYTHON,
else .venv/bin/python) with torch and accelerate.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import e2e_test  # noqa: E402
from e2e_test import Server, wait_for, write_spec  # noqa: E402

FIRST_STEP = r"""
import os, sys, time
import torch
from accelerate import Accelerator
import trainyard
out = sys.argv[1]
accelerator = Accelerator(cpu=True)
model = accelerator.prepare(torch.nn.Linear(32, 2))
for step in range(3):
    loss = model(torch.randn(8, 32)).sum()
    accelerator.backward(loss)
    trainyard.report(step + 1, samples=8, loss=loss.item())
    if step == 0 and accelerator.is_main_process:
        with open(out, "w") as f:
            f.write(repr(time.time()))
# Leave as a script should: a process that exits with its process group
# still up may abort in Gloo's teardown (seen once under accelerate launch).
accelerator.wait_for_everyone()
accelerator.end_training()  # destroys the process group
"""

REPORT_COST = r"""
import sys, time, trainyard
n = int(sys.argv[2])
t0 = time.perf_counter()
for i in range(n):
    trainyard.report(i + 1, samples=8, loss=0.5, accuracy=0.9)
per_call = (time.perf_counter() - t0) / n
with open(sys.argv[1], "w") as f:
    f.write(repr(per_call))
"""

# MULTI_GPU: `accelerate launch` starts its processes through torchrun (on a
# CPU-only machine too); with use_cpu it would start one process only.
CONFIG = """compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
num_machines: 1
num_processes: 2
mixed_precision: 'no'
"""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reports", type=int, default=20000)
    a = p.parse_args()
    e2e_test.BIN = os.path.abspath(a.bin)
    python = os.environ.get("TRAINYARD_PYTHON") or os.path.join(REPO, ".venv", "bin", "python")
    accelerate = os.path.join(os.path.dirname(python), "accelerate")
    with tempfile.TemporaryDirectory(prefix="trainyard-script-bench-") as tmp:
        script = write_spec(tmp, "first_step.py", FIRST_STEP)
        cost = write_spec(tmp, "report_cost.py", REPORT_COST)
        config = write_spec(tmp, "cfg.yaml", CONFIG)
        server = Server(tmp, slots=2)
        cold, warm, theirs = [], [], []
        try:
            for r in range(a.rounds):
                # Trainyard twice: with the workers' cache emptied (the first
                # job of this Accelerate config on the host), then as every
                # later job and restart finds it.
                for kind, times in (("cold", cold), ("warm", warm)):
                    if kind == "cold":
                        shutil.rmtree(server.cache_dir, ignore_errors=True)
                    out = os.path.join(tmp, f"ours-{kind}-{r}")
                    spec = write_spec(tmp, f"job-{kind}-{r}.yaml", f"name: startup-{r}\nscript: {{path: {script}, "
                                      f"python: {python}, args: [{out}]}}\nnum_processes: 2\n")
                    t0 = time.time()
                    sub = server.ctl("-o", "json", "submit", spec, "--accelerate-config", config)
                    assert sub.returncode == 0, sub.stderr
                    job = json.loads(sub.stdout)["id"]

                    def started():
                        if os.path.exists(out) and open(out).read():
                            return True
                        state = server.job(job)
                        if state["state"] in ("FAILED", "CANCELLED", "SUCCEEDED"):
                            raise SystemExit(f"job {job} ended {state['state']} before its first step: "
                                             f"{state['reason']}")
                        return False

                    wait_for(started, 300, "the job's first step")
                    times.append(float(open(out).read()) - t0)
                    server.ctl("watch", job, timeout=300)

                out = os.path.join(tmp, f"theirs-{r}")
                env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
                t0 = time.time()
                proc = subprocess.run([accelerate, "launch", "--config_file", config, script, out], env=env,
                                      capture_output=True, text=True, timeout=300)
                if proc.returncode != 0:
                    raise SystemExit(f"accelerate launch failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
                theirs.append(float(open(out).read()) - t0)
            out = os.path.join(tmp, "cost")
            spec = write_spec(tmp, "cost.yaml", f"name: report-cost\nscript: {{path: {cost}, python: {python}, "
                              f"args: [{out}, '{a.reports}']}}\nnum_processes: 1\n")
            job = json.loads(server.ctl("-o", "json", "submit", spec).stdout)["id"]
            server.ctl("watch", job, timeout=300)
            per_call = float(open(out).read())
        finally:
            server.stop()
    print("| submit -> first step, s | median | min | max | median - accelerate launch's |")
    print("|---|---|---|---|---|")
    for name, times in (("accelerate launch", theirs), ("Trainyard, first job of the config on the host", cold),
                        ("Trainyard, later jobs and restarts (Accelerate's environment cached)", warm)):
        print(f"| {name} | {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} | "
              f"{statistics.median(times) - statistics.median(theirs):+.2f} |")
    print(f"\n| trainyard.report | µs per call | share of a 10 ms step |\n|---|---|---|\n"
          f"| {a.reports} calls, read by a real worker | {per_call * 1e6:.1f} | {per_call / 0.010 * 100:.3f}% |")
    print(f"\n2 processes, Accelerate config MULTI_GPU (accelerate launch: torchrun), CPU tensors; the script "
          f"imports torch and accelerate, prepares a Linear(32, 2) and writes the wall time at its first step.\n"
          f"command: python3 bench/script_jobs.py {a.bin} --rounds {a.rounds} --reports {a.reports}")


if __name__ == "__main__":
    main()
