"""bench/takeover: how long the service is gone when the leading
coordinator's host dies (docs/operating/high-availability.md). Two
coordinators over one real PostgreSQL 15 (started here, tests/e2e/pg_fixture)
and a 2-rank job training; N times the leader is killed with SIGKILL and
then: kill -> the standby answers a SubmitJob (trainctl given both
addresses, retrying), kill -> the job's ranks reattached (RUNNING, its step
moving on, the same rank processes). The killed one comes back as a standby
each time. Prints p50 / p95 / max.

    python3 bench/takeover.py BUILD_BIN [--kills 20] [--lease-ms 5000] [--renew-ms 1000]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import e2e_test  # noqa: E402
from e2e_test import Server, free_port, wait_for, worker_pids, write_spec  # noqa: E402
import pg_fixture  # noqa: E402

JOB = """
name: takeover
model: {kind: mlp, hidden: [64]}
data: {kind: synthetic, batch_size: 16, num_samples: 2048}
max_steps: 100000000
num_processes: 2
reattach_timeout_s: 120
"""

PROBE = """
name: probe-%d
model: {kind: mlp, hidden: [8]}
data: {kind: synthetic, batch_size: 4, num_samples: 64}
max_steps: 2
num_processes: 1
"""


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--lease-ms", type=int, default=5000)
    ap.add_argument("--renew-ms", type=int, default=1000)
    a = ap.parse_args()
    e2e_test.BIN = os.path.abspath(a.bin)
    print(f"command: python3 bench/takeover.py {a.bin} --kills {a.kills} --lease-ms {a.lease_ms} "
          f"--renew-ms {a.renew_ms}")
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-takeover-") as tmp:
        pg = pg_fixture.PostgreSQL(os.path.join(tmp, "pg"))
        url = pg.create_database("trainyard")
        ports = {"a": free_port(), "b": free_port()}
        both = ",".join(f"127.0.0.1:{p}" for p in ports.values())
        coords = {}

        def start(name):
            state = os.path.join(tmp, name)
            os.makedirs(state, exist_ok=True)
            coords[name] = Server(state, slots=2, listen=f"127.0.0.1:{ports[name]}",
                                  extra=("--store", url, "--coordinators", both, "--lease-ms", str(a.lease_ms),
                                         "--lease-renew-ms", str(a.renew_ms), "--on-shutdown", "detach",
                                         "--allowed-root", tmp))

        def ctl(*args, timeout=60):
            return subprocess.run([os.path.join(e2e_test.BIN, "trainctl"), "--server", both, "--timeout", "5",
                                   *args], capture_output=True, text=True, timeout=timeout)

        def job(job_id):
            r = ctl("-o", "json", "get", job_id)
            return json.loads(r.stdout) if r.returncode == 0 else None

        def leader():
            for name, c in coords.items():
                if c.proc.poll() is None and '"role": "standby"' not in open(c.ready).read():
                    if c.metric("trainyard_coordinator_leader") == 1:
                        return name
            return None

        try:
            start("a")
            wait_for(lambda: leader() == "a", 30, "a to lead")
            start("b")
            r = ctl("-o", "json", "submit", write_spec(tmp, "job.yaml", JOB))
            assert r.returncode == 0, r.stderr
            job_id = json.loads(r.stdout)["id"]
            wait_for(lambda: (job(job_id) or {}).get("step", 0) > 20, 120, "training")
            ranks = sorted(worker_pids(job_id))
            served, reattached = [], []
            for kill in range(a.kills):
                name = leader()
                assert name, "one coordinator leads"
                step = job(job_id)["step"]
                dead = coords[name]
                dead.proc.kill()
                t0 = time.monotonic()
                dead.proc.wait()
                dead.log.close()
                probe = write_spec(tmp, f"probe-{kill}.yaml", PROBE % kill)
                wait_for(lambda: ctl("submit", probe, timeout=30).returncode == 0, 60, "a SubmitJob answered")
                served.append(time.monotonic() - t0)

                def moving():
                    j = job(job_id)
                    return j and j["state"] == "RUNNING" and j["step"] > step
                wait_for(moving, 120, "the ranks to reattach")
                reattached.append(time.monotonic() - t0)
                assert sorted(worker_pids(job_id)) == ranks, "no rank restarted"
                assert job(job_id)["attempt"] == 1
                start(name)
                print(f"kill {kill + 1}: SubmitJob served after {served[-1]:.2f} s, ranks training after "
                      f"{reattached[-1]:.2f} s", flush=True)
            ctl("cancel", job_id)
        finally:
            for c in coords.values():
                c.stop()
            pg.stop()

    def cell(v):
        return f"{statistics.median(v):.2f} / {pct(v, 95):.2f} / {max(v):.2f}"
    print(f"\n| lease ms | kills | kill -> SubmitJob served (p50 / p95 / max s) | "
          f"kill -> ranks training again (p50 / p95 / max s) | ranks restarted |")
    print("|---|---|---|---|---|")
    print(f"| {a.lease_ms} | {a.kills} | {cell(served)} | {cell(reattached)} | 0 |")


if __name__ == "__main__":
    main()
