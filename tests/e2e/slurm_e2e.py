"""End to end through a real Slurm: trainyard-server --launcher slurm submits
batch jobs with sbatch, srun starts one trainyard-worker per task, the server
follows them with squeue and stops them with scancel.

Starts a single-node Slurm (slurmctld + slurmd + munge, tests/e2e/slurm/) unless
one is up. Needs root; without it the test is skipped (exit code 77).

Run by ctest with the build's bin directory as the first argument.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_test  # noqa: E402  (Server, wait_for, write_spec)
from e2e_test import Server, wait_for, write_spec  # noqa: E402
import test_clock  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def slurm_env():
    env = dict(os.environ)
    env["SLURM_CONF"] = os.environ.get("SLURM_CONF", "/tmp/slurm-ci/etc/slurm.conf")
    return env


def squeue_state(name):
    """Slurm's state of the batch job called `name` (None when unknown)."""
    r = subprocess.run(["squeue", "-h", "-t", "all", "-n", name, "-o", "%i|%T"], capture_output=True, text=True,
                       env=slurm_env(), timeout=30)
    rows = [line.split("|") for line in r.stdout.split()]
    return rows[-1][1] if rows else None


def slurm_worker_pids(job_id, rank=None):
    """trainyard-worker processes of job_id started by srun (rank from their SLURM_PROCID)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            if not args or not args[0].endswith(b"trainyard-worker") or job_id.encode() not in args:
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if b"SLURM_JOB_ID" not in env:
            continue
        if rank is None or env.get(b"SLURM_PROCID") == str(rank).encode():
            pids.append(int(name))
    return pids


def read(path):
    with open(path) as f:
        return f.read()


def events(server, job_id):
    r = server.ctl("-o", "json", "get", job_id)
    return [e["reason"] for e in json.loads(r.stdout).get("events", [])]


LONG_JOB = """
name: slurm-ddp
model: {kind: mlp, hidden: [1024, 1024]}
data: {kind: synthetic, batch_size: 16, num_samples: 8192}
optimizer: {kind: adamw, lr: 0.001}
max_steps: %d
num_processes: 2
max_restarts: 2
checkpoint: {every_steps: 25, total_limit: 3}
"""


class SlurmE2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-slurm-")
        os.chmod(cls.tmp.name, 0o755)
        cls.server = Server(cls.tmp.name, slots=2, extra=["--launcher", "slurm"])

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def submit(self, name, text):
        r = self.server.ctl("-o", "json", "submit", write_spec(self.tmp.name, name, text))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["id"]

    def test_1_train_checkpoint_kill_restart(self):
        s = self.server
        job_id = self.submit("long.yaml", LONG_JOB % 600)
        wait_for(lambda: s.job(job_id)["state"] == "RUNNING", 120, "the job to run under Slurm")
        # Slurm runs it: one batch job of 2 tasks, named after the attempt.
        self.assertEqual(squeue_state(f"trainyard-{job_id}-a1"), "RUNNING")
        info = subprocess.run(["scontrol", "show", "job", "--oneliner"], capture_output=True, text=True,
                              env=slurm_env(), timeout=30).stdout
        line = next(l for l in info.splitlines() if f"JobName=trainyard-{job_id}-a1" in l)
        self.assertIn("NumTasks=2", line)
        self.assertIn("Requeue=0", line)  # not preemptible
        self.assertEqual(len(slurm_worker_pids(job_id)), 2)

        # Metrics flow as with the local launcher.
        wait_for(lambda: s.job(job_id)["step"] >= 30, 120, "training to reach step 30")
        text = s.scrape()
        self.assertTrue(re.search(r'trainyard_job_samples_per_second\{job_id="%s",rank="1"\} [1-9]' % job_id, text),
                        "no samples/s for rank 1 in the scrape")
        # A remote checkpoint while it trains.
        r = s.ctl("checkpoint", job_id, "--wait")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        path = r.stdout.strip().split()[-1]
        self.assertTrue(os.path.isfile(os.path.join(path, "manifest.json")) or os.path.isdir(path), r.stdout)
        step_at_kill = s.job(job_id)["step"]
        self.assertLess(step_at_kill, 600, "the job finished before the kill; make it longer")

        # kill -9 one worker: the group is stopped (scancel) and restarted
        # from its latest checkpoint as a new Slurm job.
        victims = slurm_worker_pids(job_id, rank=1)
        self.assertEqual(len(victims), 1)
        os.kill(victims[0], signal.SIGKILL)
        wait_for(lambda: s.job(job_id)["attempt"] == 2 and s.job(job_id)["state"] == "RUNNING", 180,
                 "attempt 2 to run")
        evs = events(s, job_id)
        # The first failure heard is the cause: rank 1's end (Slurm's exit file,
        # read each poll) or rank 0's report that its peer went away, whichever
        # reaches the coordinator first.
        self.assertTrue(any("restart 1 of 2" in e and ("rank 1" in e or ("rank 0" in e and "by peer" in e))
                            for e in evs), evs)
        wait_for(lambda: squeue_state(f"trainyard-{job_id}-a1") not in ("RUNNING", "PENDING", "COMPLETING"), 60,
                 "attempt 1's Slurm job to end")
        self.assertEqual(squeue_state(f"trainyard-{job_id}-a2"), "RUNNING")
        log1 = os.path.join(self.tmp.name, "jobs", job_id, "attempt-2", "rank-1.log")
        wait_for(lambda: os.path.exists(log1) and "resumed from" in read(log1), 60,
                 "rank 1 of attempt 2 to resume from a checkpoint")
        w = s.ctl("watch", job_id, timeout=600)
        self.assertEqual(w.returncode, 0, w.stdout + w.stderr)
        job = s.job(job_id)
        self.assertEqual(job["state"], "SUCCEEDED")
        self.assertEqual(job["step"], 600)
        # Ranks' logs through trainctl, as with the local launcher.
        r = s.ctl("logs", job_id, "--rank", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("resumed from", r.stdout)
        wait_for(lambda: not slurm_worker_pids(job_id), 30, "no worker of the job left")

    def test_2_cancel(self):
        s = self.server
        job_id = self.submit("cancel.yaml", LONG_JOB % 10000000)
        wait_for(lambda: s.job(job_id)["state"] == "RUNNING", 120, "the job to run under Slurm")
        r = s.ctl("cancel", job_id)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(s.job(job_id)["state"], "CANCELLED")
        wait_for(lambda: not slurm_worker_pids(job_id), 30, "the workers to be gone")
        wait_for(lambda: squeue_state(f"trainyard-{job_id}-a1") in ("CANCELLED", "COMPLETED", "FAILED", None), 60,
                 "the Slurm job to end")

    def test_3_cuda_jobs_ask_slurm_for_gpus(self):
        # This cluster has no GPUs: Slurm refuses --gres=gpu:2 at submit and
        # the job fails with Slurm's reason instead of pending forever.
        s = self.server
        job_id = self.submit("cuda.yaml", "name: slurm-cuda\nnum_processes: 2\ndevice: cuda\nmax_steps: 5\n")
        wait_for(lambda: s.job(job_id)["state"] == "FAILED", 60, "the CUDA job to fail")
        reason = s.job(job_id)["reason"]
        self.assertIn("sbatch failed", reason)
        self.assertIn("gres", reason.lower())

    def test_4_bad_slurm_options_are_rejected_at_submit(self):
        r = self.server.ctl("submit", write_spec(self.tmp.name, "bad.yaml",
                                                 "num_processes: 2\nslurm: {partition: 'a b'}\n"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("slurm.partition", r.stderr)


class SlurmCoordinatorRestart(unittest.TestCase):
    """kill -9 the server while a Slurm job trains: the new server finds the
    Slurm job by name and follows it; the workers reattach. Then kill -9 the
    server again and a worker while it is away: the new server reads the
    rank's exit status and restarts the job from its checkpoint."""

    def test_kill_9_the_server_under_slurm(self):
        tmp = tempfile.TemporaryDirectory(prefix="trainyard-slurm-coord-")
        os.chmod(tmp.name, 0o755)
        port = free_port()
        s = Server(tmp.name, slots=2, listen=f"127.0.0.1:{port}", extra=["--launcher", "slurm"])
        try:
            spec = write_spec(tmp.name, "j.yaml", LONG_JOB % 800 + "reattach_timeout_s: 60\n")
            r = s.ctl("-o", "json", "submit", spec)
            self.assertEqual(r.returncode, 0, r.stderr)
            job_id = json.loads(r.stdout)["id"]
            wait_for(lambda: s.job(job_id)["state"] == "RUNNING" and s.job(job_id)["step"] >= 30, 120,
                     "the job to train under Slurm")
            s.proc.kill()  # kill -9: the Slurm job trains on
            s.proc.wait()
            s.log.close()
            s = Server(tmp.name, slots=2, listen=f"127.0.0.1:{port}", extra=["--launcher", "slurm"])
            wait_for(lambda: s.job(job_id)["state"] == "RUNNING", 90, "the workers to reattach")
            self.assertIn("RECOVERING", [e["state"] for e in s.job(job_id)["events"]])
            self.assertEqual(s.job(job_id)["attempt"], 1)
            mark = s.job(job_id)["step"]
            wait_for(lambda: s.job(job_id)["step"] >= mark + 30, 120, "training to go on")
            # Away again, and a worker dies meanwhile.
            s.proc.kill()
            s.proc.wait()
            s.log.close()
            victims = slurm_worker_pids(job_id, rank=1)
            self.assertEqual(len(victims), 1)
            os.kill(victims[0], signal.SIGKILL)
            exit_file = os.path.join(tmp.name, "jobs", job_id, "attempt-1", "rank-1.exit")
            wait_for(lambda: os.path.exists(exit_file), 30, "rank 1's exit status")
            self.assertEqual(read(exit_file).strip(), "137")
            s = Server(tmp.name, slots=2, listen=f"127.0.0.1:{port}", extra=["--launcher", "slurm"])
            wait_for(lambda: s.job(job_id)["attempt"] == 2, 120, "the restart after the worker's death")
            evs = events(s, job_id)
            self.assertTrue(any("restart 1 of 2" in e and "signal 9" in e for e in evs), evs)
            w = s.ctl("watch", job_id, timeout=600)
            self.assertEqual(w.returncode, 0, w.stdout + w.stderr)
            self.assertEqual(s.job(job_id)["step"], 800)
            wait_for(lambda: not slurm_worker_pids(job_id), 30, "no worker of the job left")
        finally:
            s.stop()
            tmp.cleanup()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_slurm():
    if os.geteuid() != 0:
        print("slurm_e2e: SKIPPED — starting Slurm needs root", file=sys.stderr)
        sys.exit(SKIP)
    r = subprocess.run(["bash", os.path.join(HERE, "slurm", "start-slurm.sh")], capture_output=True, text=True,
                       timeout=600)
    sys.stderr.write(r.stderr[-2000:])
    if r.returncode != 0:
        raise SystemExit(f"slurm_e2e: could not start Slurm (exit {r.returncode}); see above")
    os.environ["SLURM_CONF"] = "/tmp/slurm-ci/etc/slurm.conf"


if __name__ == "__main__":
    e2e_test.BIN = sys.argv.pop(1)
    start_slurm()
    test_clock.main()
