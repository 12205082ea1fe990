"""bench/script_teardown.py: do scripts that finished their work die in
teardown? Accelerate's own test_sync.py (accelerate/test_utils/scripts;
2 processes, MULTI_CPU over Gloo, DDP — it ends without os._exit) runs
`--runs` times under `torchrun --nproc_per_node 2` (with
ACCELERATE_USE_CPU=True, what `accelerate launch` does on a CPU host) and
`--runs` times as a 2-rank Trainyard script job without an Accelerate
config, alternating. Counts the runs whose work was done but which ended
by a signal (torchrun: a child killed by SIGABRT; Trainyard: the job
FAILED), and the wall time of each.

    python3 bench/script_teardown.py build/bin [--runs 30]

Prints a table and the command. Needs the venv's Python (TRAINYARD_PYTHON,
else .venv/bin/python) with torch and accelerate.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import e2e_test  # noqa: E402
from e2e_test import Server, wait_for, write_spec  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("--runs", type=int, default=30)
    a = p.parse_args()
    e2e_test.BIN = os.path.abspath(a.bin)
    python = os.environ.get("TRAINYARD_PYTHON") or os.path.join(REPO, ".venv", "bin", "python")
    script = subprocess.run([python, "-c", "import accelerate.test_utils.scripts.test_sync as m; print(m.__file__)"],
                            capture_output=True, text=True, check=True).stdout.strip()
    results = {"torchrun": [], "trainyard": []}
    with tempfile.TemporaryDirectory(prefix="trainyard-teardown-") as tmp:
        server = Server(tmp, slots=2, extra=("--allowed-root", tmp, "--allowed-root", os.path.dirname(script)))
        try:
            spec = write_spec(tmp, "sync.yaml", f"name: test-sync\nscript: {{path: {script}, python: {python}}}\n"
                                                "num_processes: 2\n")
            for i in range(a.runs):
                t0 = time.monotonic()
                r = subprocess.run([python, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                                    "--master_port", str(29400 + i % 50), script],
                                   env=dict(os.environ, ACCELERATE_USE_CPU="True", OMP_NUM_THREADS="1"),
                                   capture_output=True, text=True)
                aborted = r.returncode != 0 and ("Signal 6" in r.stderr or "SIGABRT" in r.stderr)
                results["torchrun"].append((r.returncode == 0, aborted, time.monotonic() - t0,
                                            r.stderr[-300:] if r.returncode else ""))
                t0 = time.monotonic()
                out = server.ctl("-o", "json", "submit", spec)
                job_id = json.loads(out.stdout)["id"]
                state = wait_for(lambda: (lambda s: s if s in ("SUCCEEDED", "FAILED", "CANCELLED") else None)(
                    server.job(job_id)["state"]), 300, job_id)
                reason = server.job(job_id).get("reason", "")
                results["trainyard"].append((state == "SUCCEEDED", "signal 6" in reason, time.monotonic() - t0,
                                             reason if state != "SUCCEEDED" else ""))
                print(f"run {i + 1}: torchrun rc {r.returncode}, trainyard {state}", file=sys.stderr, flush=True)
        finally:
            server.stop()
    print(f"Accelerate's test_sync.py ({script}), 2 processes on this machine, {a.runs} runs per side, alternating\n")
    print("| launcher | runs | succeeded | ended by SIGABRT | other failures | median s |")
    print("|---|---|---|---|---|---|")
    for side, rows in results.items():
        ok = sum(1 for r in rows if r[0])
        abrt = sum(1 for r in rows if r[1])
        times = sorted(r[2] for r in rows)
        print(f"| {side} | {len(rows)} | {ok} | {abrt} | {len(rows) - ok - abrt} | {times[len(times) // 2]:.1f} |")
    for side, rows in results.items():
        for r in rows:
            if r[3]:
                print(f"\n{side} failure: {r[3].strip()[-300:]}")
    print(f"\ncommand: python3 bench/script_teardown.py {a.bin} --runs {a.runs}")


if __name__ == "__main__":
    main()
