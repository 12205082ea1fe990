"""bench/coordinator_restart: what a coordinator restart and a refused
submission cost. A real trainyard-server (--on-shutdown detach) runs a
2-rank job; N times the server gets SIGTERM and a new one starts on the same
address and state: per restart, SIGTERM -> the server's exit, its exit -> the
new server's ready file, and the new server's start -> the job RUNNING again
with its workers reattached (read from the server's log). Then the cost of
a submission refused for its 500 KB spec (a raw gRPC SubmitJob, N calls).

    python3 bench/coordinator_restart.py BUILD_BIN [--restarts 5] [--submits 50]
"""
import argparse
import datetime
import os
import re
import signal
import statistics
import sys
import tempfile
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import e2e_test  # noqa: E402
from e2e_test import Server, free_port, wait_for, write_spec  # noqa: E402
from reliability_e2e import field_bytes  # noqa: E402  (a protobuf field by hand)

JOB = """
name: restarts
model: {kind: mlp, hidden: [64]}
data: {kind: synthetic, batch_size: 16, num_samples: 2048}
max_steps: 100000000
num_processes: 2
reattach_timeout_s: 60
"""


def log_time(line):
    return datetime.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S.%f").timestamp()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin")
    ap.add_argument("--restarts", type=int, default=5)
    ap.add_argument("--submits", type=int, default=50)
    a = ap.parse_args()
    e2e_test.BIN = os.path.abspath(a.bin)
    print(f"command: python3 bench/coordinator_restart.py {a.bin} --restarts {a.restarts} --submits {a.submits}")
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-restart-") as state:
        port = free_port()
        extra = ("--on-shutdown", "detach")
        s = Server(state, listen=f"127.0.0.1:{port}", extra=extra)
        job = s.ctl("-o", "json", "submit", write_spec(state, "job.yaml", JOB))
        job_id = re.search(r'"id": "([^"]+)"', job.stdout).group(1)
        wait_for(lambda: s.job(job_id)["state"] == "RUNNING" and s.job(job_id)["step"] > 20, 120, "training")
        stops, starts, reattaches = [], [], []
        for _ in range(a.restarts):
            t0 = time.time()
            s.proc.send_signal(signal.SIGTERM)
            s.proc.wait(timeout=60)
            t1 = time.time()
            s.log.close()
            s = Server(state, listen=f"127.0.0.1:{port}", extra=extra)
            t2 = time.time()
            wait_for(lambda: s.job(job_id)["state"] == "RUNNING", 120, "the job reattached")
            with open(os.path.join(state, "server.log")) as f:
                lines = f.read().splitlines()
            up = [log_time(ln) for ln in lines if "trainyard-server: gRPC on" in ln][-1]
            back = [log_time(ln) for ln in lines if job_id in ln and "reattached after a coordinator restart" in ln][-1]
            stops.append(t1 - t0)
            starts.append(t2 - t1)
            reattaches.append(back - up)
        ch = grpc.insecure_channel(s.addr)
        submit = ch.unary_unary("/trainyard.v1.JobService/SubmitJob")
        big = field_bytes(1, b"name: " + b"y" * 500000 + b"\n")
        for _ in range(5):
            try:
                submit(big, timeout=10)
            except grpc.RpcError:
                pass
        t0 = time.time()
        for _ in range(a.submits):
            try:
                submit(big, timeout=10)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
        per_submit = (time.time() - t0) / a.submits
        ch.close()
        s.ctl("cancel", job_id)
        s.stop()

    def cell(v):
        return f"{statistics.median(v):.2f} / {max(v):.2f}"
    print("| what | median / max s |\n|---|---|")
    print(f"| SIGTERM -> server exited | {cell(stops)} |")
    print(f"| exited -> next server ready | {cell(starts)} |")
    print(f"| next server up -> job RUNNING (workers reattached) | {cell(reattaches)} |")
    print(f"| a submission refused for its 500 KB spec | {per_submit * 1000:.1f} ms per call |")


if __name__ == "__main__":
    main()
