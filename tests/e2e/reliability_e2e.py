"""Faults and security end to end: real server, workers and trainctl.

- Chaos: kill -9 a random worker at a random step, 20 times across 4 jobs
  with in-memory snapshots every 5 steps, disk checkpoints every 200 and
  max_restarts: every job ends SUCCEEDED, its final model is bitwise the
  model of an uninterrupted run, every restart resumed at most 5 steps
  before the step the kill came after (the lost-steps metric agrees), and
  the snapshots are gone from /dev/shm when the job ends.
- A hung worker (SIGSTOP of rank 1): `trainctl diagnose` names rank 1 and
  the collective rank 0 waits in; the watchdog detects the hang within
  step_timeout_s, records the same diagnosis as an event, the group
  restarts and the job succeeds.
- SIGTERM preemption of one worker: the job checkpoints, is queued again
  (preemptible) and ends SUCCEEDED with the same final model.
- Auth: no token, a wrong token → UNAUTHENTICATED; a forged worker token →
  PERMISSION_DENIED; TLS with trainctl --ca, and a plain-text client refused.

Run by ctest with the build's bin directory as the first argument.
"""
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_test  # noqa: E402  (Server, wait_for, worker_pids, write_spec)
from e2e_test import Server, free_port, read, wait_for, worker_pids, write_spec  # noqa: E402
import test_clock  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

JOB = """
name: %(name)s
model: {kind: mlp, hidden: [64]}
data: {kind: synthetic, batch_size: 16, num_samples: 2048, seed: %(seed)d}
optimizer: {kind: adamw, lr: 0.003}
max_steps: %(steps)d
num_processes: 2
max_restarts: %(restarts)d
checkpoint: {every_steps: %(every)d, total_limit: 3, snapshot_every_steps: %(snapshots)d}
"""


def job_args(every=25, snapshots=0, **kw):
    """JOB's fields: periodic disk checkpoints every 25 steps and no
    in-memory snapshots unless said."""
    return dict(kw, every=every, snapshots=snapshots)


def resume_steps(job):
    """The steps the job's restarted attempts resumed at, as their rank 0
    said (0: nothing to resume from, they started afresh)."""
    out = []
    for e in job["events"]:
        m = re.search(r"resumed at step (\d+) from", e["reason"])
        if m:
            out.append(int(m.group(1)))
        elif "no complete checkpoint" in e["reason"] and "starting fresh" in e["reason"]:
            out.append(0)
    return out


def final_model_digest(server, job_id):
    """SHA-256 of the model the job ended with (its last checkpoint, taken at
    the final step: the final save, or a periodic one at that step)."""
    job = json.loads(server.ctl("-o", "json", "get", job_id).stdout)
    listed = json.loads(server.ctl("-o", "json", "checkpoints", job_id).stdout)
    final = [c for c in listed if c["ok"] and c["step"] == job["max_steps"] and c["type"] == "full"]
    assert final, f"{job_id}: no FULL checkpoint at step {job['max_steps']}"
    with open(os.path.join(final[-1]["path"], "model.safetensors"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def rank_pid(job_id, rank):
    """The pid of the job's worker of `rank`."""
    for pid in worker_pids(job_id):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode().split("\0")
        if "--rank" in args and args[args.index("--rank") + 1] == str(rank):
            return pid
    raise AssertionError(f"{job_id}: no worker of rank {rank}")


def submit(server, spec_path):
    r = server.ctl("-o", "json", "submit", spec_path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["id"]


class Faults(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-faults-")
        cls.server = Server(cls.tmp.name, slots=2)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def baseline(self, name, seed, steps, every=25, snapshots=0):
        spec = write_spec(self.tmp.name, f"{name}-base.yaml",
                          JOB % job_args(name=name + "-base", seed=seed, steps=steps, restarts=0, every=every,
                                     snapshots=snapshots))
        job_id = submit(self.server, spec)
        w = self.server.ctl("watch", job_id)
        self.assertEqual(w.returncode, 0, w.stdout + w.stderr)
        return final_model_digest(self.server, job_id)

    def test_1_chaos_kill_workers_20_times(self):
        s = self.server
        rng = random.Random(20261122)
        kills_total = 0
        lost_before = s.metric("trainyard_lost_steps_total")
        for j in range(4):
            name, seed, steps = f"chaos{j}", 100 + j, 1500
            expected = self.baseline(name, seed, steps, every=200)
            spec = write_spec(self.tmp.name, f"{name}.yaml",
                              JOB % job_args(name=name, seed=seed, steps=steps, restarts=8, every=200, snapshots=5))
            job_id = submit(s, spec)
            kills = 0
            killed_after = []  # the step rank 0 had reported when each kill came
            while kills < 5:
                job = s.job(job_id)
                if job["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                    break
                attempt = job["attempt"]
                # A restarted attempt first says where it resumed; the kill
                # comes 5 to 120 steps after that.
                target = rng.randint(5, 120)

                def ready():
                    jb = s.job(job_id)
                    if jb["state"] in ("SUCCEEDED", "FAILED"):
                        return True
                    if jb["state"] != "RUNNING" or jb["attempt"] != attempt or len(worker_pids(job_id)) != 2:
                        return False
                    resumed = resume_steps(jb)
                    if len(resumed) < kills:
                        return False
                    return jb["step"] >= (resumed[-1] if kills else 0) + target
                wait_for(ready, 120, f"{job_id} to train {target} steps in attempt {attempt}")
                pids = worker_pids(job_id)
                if s.job(job_id)["state"] != "RUNNING" or len(pids) != 2:
                    continue
                killed_after.append(s.job(job_id)["step"])
                os.kill(rng.choice(pids), signal.SIGKILL)
                kills += 1
                # The next kill hits the next attempt.
                wait_for(lambda: s.job(job_id)["attempt"] > attempt or
                         s.job(job_id)["state"] in ("SUCCEEDED", "FAILED"), 120, "the restart")
            w = s.ctl("watch", job_id)
            self.assertEqual(w.returncode, 0, w.stdout + w.stderr + s.ctl("logs", job_id).stdout[-3000:])
            job = s.job(job_id)
            self.assertEqual(job["state"], "SUCCEEDED")
            self.assertEqual(job["step"], steps)
            restarts = [e for e in job["events"] if e["reason"].startswith("restart ")]
            self.assertEqual(len(restarts), kills, job["events"])
            # Each restart's rank 0 says where it resumed (the first attempt
            # starts fresh and says nothing).
            resumed = resume_steps(job)
            self.assertEqual(len(resumed), kills, job["events"])
            for observed, at in zip(killed_after, resumed):
                self.assertGreaterEqual(at, observed - 5, f"{job_id}: killed after step {observed}, resumed at {at}")
            self.assertIn("in-memory snapshot", json.dumps(job["events"]))
            self.assertFalse(os.path.exists(f"/dev/shm/trainyard-job-{job_id}"), "snapshots left behind")
            self.assertEqual(final_model_digest(s, job_id), expected,
                             f"{job_id}: final parameters differ from the uninterrupted run")
            kills_total += kills
        self.assertEqual(kills_total, 20)
        self.assertIn("trainyard_restarts_total 20", s.scrape())
        # At most 5 steps lost per kill, as rank 0's reports and the first
        # step of each new attempt measure them.
        lost = s.metric("trainyard_lost_steps_total") - lost_before
        self.assertLessEqual(lost, 5 * kills_total)

    def test_2_hung_worker_is_diagnosed_detected_and_restarted(self):
        s = self.server
        spec = write_spec(self.tmp.name, "hang.yaml", JOB % job_args(name="hang", seed=7, steps=1500, restarts=1)
                          + "step_timeout_s: 8\n")
        job_id = submit(s, spec)
        wait_for(lambda: s.job(job_id)["state"] == "RUNNING" and s.job(job_id)["step"] > 40, 120, "training")
        pid = rank_pid(job_id, 1)
        os.kill(pid, signal.SIGSTOP)
        stopped_at = time.time()

        # Before the watchdog fires, `trainctl diagnose` names the stopped
        # rank and the collective rank 0 waits in for it.
        def diagnosis():
            r = s.ctl("-o", "json", "diagnose", job_id, "--wait", "1")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            d = json.loads(r.stdout)
            ranks = {x["rank"]: x for x in d["ranks"]}
            # Rank 0 has started a collective that has not ended.
            return d if 0 in ranks and ranks[0]["collectives"][-1]["end_unix_micros"] == 0 else None
        d = wait_for(diagnosis, 6, "rank 0 waiting in a collective")
        self.assertEqual(d["silent_ranks"], [1], d)
        self.assertEqual(d["behind_ranks"], [1], d)
        waiting = [x for x in d["ranks"] if x["rank"] == 0][0]["collectives"][-1]
        self.assertIn("rank 1 did not answer", d["verdict"])
        self.assertIn(f"rank 0 waits in collective #{waiting['seq']} of group {waiting['group']} ({waiting['op']},",
                      d["verdict"])
        table = s.ctl("diagnose", job_id, "--wait", "1")
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertIn("rank 1: no answer", table.stdout)
        self.assertIn("RUNNING for", table.stdout)

        # The watchdog asks the ranks too, and records what it learned.
        wait_for(lambda: any("hung" in e["reason"] for e in s.job(job_id)["events"]), 40, "the watchdog")
        events = s.job(job_id)["events"]
        detected = [e for e in events if "hung" in e["reason"]][0]
        diagnosed = [e for e in events if e["reason"].startswith("hang diagnosis: ")]
        self.assertTrue(diagnosed, events)
        self.assertIn("rank 1 did not answer", diagnosed[0]["reason"])
        self.assertRegex(diagnosed[0]["reason"], r"rank 0 waits in collective #\d+ of group \S+ \(\w+,")
        w = s.ctl("watch", job_id)
        self.assertEqual(w.returncode, 0, w.stdout + w.stderr)
        job = s.job(job_id)
        self.assertEqual(job["state"], "SUCCEEDED")
        self.assertEqual(job["attempt"], 2)
        hung_event = [e for e in job["events"] if e["reason"].startswith("restart 1 of 1")]
        self.assertTrue(hung_event, job["events"])
        self.assertIn("step_timeout_s", detected["reason"])
        self.assertLess(time.time() - stopped_at, 120)

    def test_3_sigterm_preemption_checkpoints_and_resumes(self):
        s = self.server
        expected = self.baseline("preempt", 11, 1500)
        spec = write_spec(self.tmp.name, "preempt.yaml",
                          JOB % job_args(name="preempt", seed=11, steps=1500, restarts=0) + "preemptible: true\n")
        job_id = submit(s, spec)
        wait_for(lambda: s.job(job_id)["state"] == "RUNNING" and s.job(job_id)["step"] > 60, 120, "training")
        pids = worker_pids(job_id)
        os.kill(max(pids), signal.SIGTERM)  # one rank is told; the control word tells the other
        w = s.ctl("watch", job_id)
        self.assertEqual(w.returncode, 0, w.stdout + w.stderr + s.ctl("logs", job_id).stdout[-2000:])
        job = s.job(job_id)
        self.assertEqual(job["state"], "SUCCEEDED")
        self.assertEqual(job["attempt"], 2)
        listed = json.loads(s.ctl("-o", "json", "checkpoints", job_id).stdout)
        self.assertIn("preemption", [c["trigger"] for c in listed])
        self.assertTrue(any("preempted" in e["reason"] for e in job["events"]), job["events"])
        self.assertEqual(final_model_digest(s, job_id), expected)


def uninterrupted_digests(server, state, template, seeds, steps):
    """Runs `template` once per name in `seeds` (name -> data seed) to the end
    without faults; returns name -> final_model_digest, the reference."""
    expected = {}
    for name, seed in seeds.items():
        base = write_spec(state, f"{name}-base.yaml",
                          template % job_args(name=name + "-base", seed=seed, steps=steps, restarts=0))
        job_id = submit(server, base)
        w = server.ctl("watch", job_id)
        assert w.returncode == 0, w.stdout + w.stderr
        expected[name] = final_model_digest(server, job_id)
    return expected


class CoordinatorRestarts(unittest.TestCase):
    """kill -9 the server 5 times while jobs run: workers keep training and
    reattach (RECOVERING → RUNNING); no job is lost or duplicated, all end
    SUCCEEDED with the model of an uninterrupted run, history complete."""

    def test_kill_9_the_server_five_times(self):
        tmp = tempfile.TemporaryDirectory(prefix="trainyard-coordinator-")
        state = tmp.name
        port = free_port()
        s = Server(state, slots=4, listen=f"127.0.0.1:{port}")
        try:
            ids = []
            expected = uninterrupted_digests(s, state, JOB, {"coord0": 300, "coord1": 301}, steps=3000)
            for j in range(2):
                name, seed = f"coord{j}", 300 + j
                spec = write_spec(state, f"{name}.yaml", JOB % job_args(name=name, seed=seed, steps=3000, restarts=2)
                                  + "reattach_timeout_s: 30\n")
                ids.append((submit(s, spec), name))
            for kill in range(5):
                wait_for(lambda: all(s.job(i)["state"] in ("RUNNING", "SUCCEEDED") for i, _ in ids), 120,
                         "both jobs running")
                if all(s.job(i)["state"] == "SUCCEEDED" for i, _ in ids):
                    break
                # Let training move on between kills: each job 20 more steps.
                marks = {i: s.job(i)["step"] for i, _ in ids}
                wait_for(lambda: all(s.job(i)["step"] >= marks[i] + 20 or s.job(i)["state"] == "SUCCEEDED"
                                     for i, _ in ids), 120, "training to move on")
                s.proc.kill()  # kill -9
                s.proc.wait()
                s.log.close()
                s = Server(state, slots=4, listen=f"127.0.0.1:{port}")
                kills = kill + 1
            for job_id, name in ids:
                w = s.ctl("watch", job_id)
                self.assertEqual(w.returncode, 0, w.stdout + w.stderr + s.ctl("logs", job_id).stdout[-2000:])
                job = s.job(job_id)
                self.assertEqual(job["state"], "SUCCEEDED")
                self.assertEqual(final_model_digest(s, job_id), expected[name], job_id)
                states = [e["state"] for e in job["events"]]
                self.assertIn("RECOVERING", states, job["events"])
                self.assertEqual(worker_pids(job_id), [])
            self.assertEqual(kills, 5)
            listed = json.loads(s.ctl("-o", "json", "list").stdout)
            self.assertEqual(sorted(j["id"] for j in listed if not j["name"].endswith("-base")),
                             sorted(i for i, _ in ids))  # nothing lost, nothing duplicated
        finally:
            s.stop()
            tmp.cleanup()


# Slower steps (about 6 ms for one job alone here, 13 ms for two) than JOB's, so that the jobs
# are still running after several server restarts.
UPGRADE_JOB = JOB.replace("hidden: [64]", "hidden: [512, 512]").replace("batch_size: 16", "batch_size: 64")
# Long enough that 3 server restarts (the workers train on while it is away)
# leave more than 800 steps each time. The test prints the steps its
# restarts used: about 475 under detach (3 restarts, each the server's stop,
# its start, the workers' reattachment within a second, and 20 steps) and
# about 160 under checkpoint (2), so 1,800 leaves ~1,300 at the last SIGTERM:
# restarts twice as slow still pass. (At 10,000 steps, when workers took
# ~10 s to find a restarted coordinator, 5 restarts used ~4,200.)
UPGRADE_STEPS = 1800


class WorkersWhileTheCoordinatorIsAway(unittest.TestCase):
    """A job that finishes while its coordinator is away (stopped with the
    default --on-shutdown detach): its workers wait to report; SIGTERM (as
    `systemctl stop` or `scancel` sends) makes them leave at once, and the
    next coordinator reads the exit codes they left and ends the job
    SUCCEEDED."""

    def test_a_waiting_worker_leaves_on_sigterm_and_its_result_is_kept(self):
        tmp = tempfile.TemporaryDirectory(prefix="trainyard-away-")
        state = tmp.name
        port = free_port()
        s = Server(state, slots=2, listen=f"127.0.0.1:{port}", extra=("--on-shutdown", "detach"))
        try:
            # Long enough to outlast the server's stop (a second or two; 800
            # steps take ~10 s), short enough to end while it is away.
            spec = write_spec(state, "away.yaml",
                              UPGRADE_JOB % job_args(name="away", seed=7, steps=800, restarts=0)
                              + "reattach_timeout_s: 120\n")
            job_id = submit(s, spec)
            wait_for(lambda: s.job(job_id)["step"] >= 20, 120, "training to start")
            s.proc.send_signal(signal.SIGTERM)
            self.assertEqual(s.proc.wait(timeout=60), 0)
            s.log.close()
            pids = worker_pids(job_id)
            self.assertEqual(len(pids), 2, "detach: the workers train on")
            logs = [os.path.join(state, "jobs", job_id, "attempt-1", f"rank-{r}.log") for r in (0, 1)]
            # Done training: the workers wait for a coordinator to take their result.
            wait_for(lambda: all(f"rank {r}: done at step 800 " in read(log) for r, log in enumerate(logs)), 300,
                     "both ranks to finish training")
            self.assertTrue(all(os.path.exists(f"/proc/{p}") for p in pids), "the workers wait")
            t0 = time.monotonic()
            for p in pids:
                os.kill(p, signal.SIGTERM)
            wait_for(lambda: not worker_pids(job_id), 30, "the waiting workers to leave")
            self.assertLess(time.monotonic() - t0, 15, "SIGTERM ends the wait for an absent coordinator")
            s = Server(state, slots=2, listen=f"127.0.0.1:{port}", extra=("--on-shutdown", "detach"))
            w = s.ctl("watch", job_id, timeout=120)
            job = s.job(job_id)
            reasons = [e["reason"] for e in job["events"]]
            self.assertEqual(job["state"], "SUCCEEDED", reasons)
            self.assertEqual(w.returncode, 0)
            # From the exit codes the workers left, not by a restart from the final checkpoint.
            self.assertEqual(job["attempt"], 1, reasons)
            self.assertFalse(any("was not running" in r for r in reasons), reasons)
        finally:
            s.stop()
            tmp.cleanup()


class CoordinatorUpgrades(unittest.TestCase):
    """SIGTERM the server (as `systemctl restart` does) while 2 jobs run,
    under each --on-shutdown mode: detach (3 times: workers keep training
    and reattach to the next server, no attempt restarted) and checkpoint (2
    times: each job checkpoints, stops and is queued, and resumes on the
    next server) end SUCCEEDED with the model of an uninterrupted run; stop
    ends both FAILED, saying why."""

    def test_sigterm_the_server_under_each_mode(self):
        tmp = tempfile.TemporaryDirectory(prefix="trainyard-upgrade-")
        state = tmp.name
        port = free_port()
        s = Server(state, slots=4, listen=f"127.0.0.1:{port}")
        try:
            expected = uninterrupted_digests(s, state, UPGRADE_JOB, {"up0": 500, "up1": 501}, steps=UPGRADE_STEPS)
            s.stop()
            for mode, sigterms in (("detach", 3), ("checkpoint", 2), ("stop", 1)):
                s = Server(state, slots=4, listen=f"127.0.0.1:{port}", extra=("--on-shutdown", mode))
                ids = []
                for j in range(2):
                    name, seed = f"up{j}", 500 + j
                    args = job_args(name=f"{name}-{mode}", seed=seed, steps=UPGRADE_STEPS, restarts=0)
                    spec = write_spec(state, f"{name}-{mode}.yaml", UPGRADE_JOB % args + "reattach_timeout_s: 30\n")
                    ids.append((submit(s, spec), name))
                done = 0
                for _ in range(sigterms):
                    wait_for(lambda: all(s.job(i)["state"] in ("RUNNING", "SUCCEEDED") for i, _ in ids), 120,
                             f"{mode}: both jobs running")
                    if any(s.job(i)["state"] == "SUCCEEDED" for i, _ in ids):
                        break
                    marks = {i: s.job(i)["step"] for i, _ in ids}
                    wait_for(lambda: all(s.job(i)["step"] >= marks[i] + 20 or s.job(i)["state"] == "SUCCEEDED"
                                         for i, _ in ids), 120, f"{mode}: training to move on")
                    # Enough left that neither job can finish while the server is away.
                    left = min(UPGRADE_STEPS - s.job(i)["step"] for i, _ in ids)
                    print(f"{mode}: SIGTERM {done + 1} of {sigterms} with {left} of {UPGRADE_STEPS} steps left",
                          flush=True)
                    self.assertGreater(left, 800, f"{mode}: the jobs are too fast for {sigterms} restarts")
                    s.proc.send_signal(signal.SIGTERM)
                    self.assertEqual(s.proc.wait(timeout=90), 0)
                    s.log.close()
                    alive = [worker_pids(i) for i, _ in ids]
                    if mode == "detach":
                        self.assertTrue(all(alive), "detach: the workers keep training")
                    else:
                        self.assertEqual(alive, [[], []], f"{mode}: the workers stopped")
                    done += 1
                    s = Server(state, slots=4, listen=f"127.0.0.1:{port}", extra=("--on-shutdown", mode))
                self.assertEqual(done, sigterms, f"{mode}: a job ended before the server was stopped {sigterms} times")
                for job_id, name in ids:
                    w = s.ctl("watch", job_id)
                    job = s.job(job_id)
                    reasons = [e["reason"] for e in job["events"]]
                    if mode == "stop":
                        self.assertEqual(job["state"], "FAILED", reasons)
                        self.assertEqual(job["reason"], "the coordinator shut down while the job was running")
                        continue
                    self.assertEqual(w.returncode, 0, w.stdout + w.stderr + s.ctl("logs", job_id).stdout[-2000:])
                    self.assertEqual(job["state"], "SUCCEEDED", reasons)
                    self.assertEqual(final_model_digest(s, job_id), expected[name], f"{mode} {job_id}")
                    self.assertEqual(worker_pids(job_id), [])
                    if mode == "detach":
                        self.assertEqual(job["attempt"], 1, reasons)  # never restarted
                        self.assertIn("RECOVERING", [e["state"] for e in job["events"]])
                    else:
                        self.assertEqual(job["attempt"], 1 + done, reasons)
                        self.assertEqual(sum("--on-shutdown checkpoint" in r for r in reasons), done, reasons)
                s.stop()
        finally:
            s.stop()
            tmp.cleanup()


def encode_varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field_bytes(num, payload):
    return encode_varint(num << 3 | 2) + encode_varint(len(payload)) + payload


def field_varint(num, value):
    return encode_varint(num << 3) + encode_varint(value)


class Security(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-security-")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_1_bearer_token_and_worker_tokens(self):
        state = os.path.join(self.tmp.name, "auth")
        os.makedirs(state)
        token_file = os.path.join(state, "token")
        with open(token_file, "w") as f:
            f.write("s3cret-token-0123456789\n")
        s = Server(state, extra=["--auth-token-file", token_file])
        try:
            r = s.ctl("list")
            self.assertEqual(r.returncode, 2)
            self.assertIn("UNAUTHENTICATED", r.stderr)
            bad = os.path.join(state, "bad")
            with open(bad, "w") as f:
                f.write("s3cret-token-0123456780")
            r = s.ctl("--token-file", bad, "list")
            self.assertEqual(r.returncode, 2)
            self.assertIn("UNAUTHENTICATED", r.stderr)
            ok = s.ctl("--token-file", token_file, "list")
            self.assertEqual(ok.returncode, 0, ok.stderr)
            env = dict(os.environ, TRAINYARD_TOKEN="s3cret-token-0123456789")
            r = subprocess.run([os.path.join(e2e_test.BIN, "trainctl"), "--server", s.addr, "list"],
                               capture_output=True, text=True, env=env, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            # A worker with a forged token is refused and changes nothing.
            spec = write_spec(state, "long.yaml", JOB % job_args(name="auth", seed=1, steps=10_000_000, restarts=0))
            r = s.ctl("--token-file", token_file, "-o", "json", "submit", spec)
            self.assertEqual(r.returncode, 0, r.stderr)
            job_id = json.loads(r.stdout)["id"]
            wait_for(lambda: json.loads(s.ctl("--token-file", token_file, "-o", "json", "get", job_id).stdout)
                     ["state"] == "RUNNING", 120, "the job to run")
            hello = field_bytes(1, field_bytes(1, job_id.encode()) + field_varint(2, 0) + field_varint(3, 1) +
                                field_bytes(4, b"forged"))
            ch = grpc.insecure_channel(s.addr)
            connect = ch.stream_stream("/trainyard.v1.WorkerService/Connect")
            with self.assertRaises(grpc.RpcError) as err:
                list(connect(iter([hello]), timeout=10))
            self.assertEqual(err.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
            ch.close()
            job = json.loads(s.ctl("--token-file", token_file, "-o", "json", "get", job_id).stdout)
            self.assertEqual(job["state"], "RUNNING")
            self.assertEqual(s.ctl("--token-file", token_file, "cancel", job_id).returncode, 0)
        finally:
            s.stop()

    def test_3_a_snapshot_directory_someone_else_made_is_not_used(self):
        """Job ids are public (ps, /metrics): another account may make
        /dev/shm/trainyard-job-<id> first, writable by all, for the job to
        write its snapshots into and to restart from what it leaves there."""
        d = os.path.join(self.tmp.name, "shm")
        os.makedirs(d)
        s = Server(d, slots=2)
        planted = None
        try:
            blocker = s.ctl("-o", "json", "submit", write_spec(d, "blocker.yaml", JOB % job_args(
                name="blocker", seed=6, steps=10000000, restarts=0)))
            self.assertEqual(blocker.returncode, 0, blocker.stderr)
            blocker = json.loads(blocker.stdout)["id"]
            wait_for(lambda: s.job(blocker)["state"] == "RUNNING", 60, "the blocker running")
            r = s.ctl("-o", "json", "submit", write_spec(d, "target.yaml", JOB % job_args(
                name="target", seed=7, steps=10000000, restarts=2, snapshots=5)))
            self.assertEqual(r.returncode, 0, r.stderr)
            job_id = json.loads(r.stdout)["id"]
            self.assertEqual(s.job(job_id)["state"], "QUEUED")
            # The stranger (uid 65534) makes the job's directory first, open to all.
            planted = f"/dev/shm/trainyard-job-{job_id}"
            os.mkdir(planted)
            os.chmod(planted, 0o777)
            with open(os.path.join(planted, "left-by-a-stranger"), "w") as f:
                f.write("x")
            os.chown(planted, 65534, 65534)
            self.assertEqual(s.ctl("cancel", blocker).returncode, 0)
            wait_for(lambda: s.job(job_id)["state"] == "RUNNING" and s.job(job_id)["step"] >= 20, 120,
                     "the job past its first snapshots")
            events = [e["reason"] for e in s.job(job_id)["events"]]
            self.assertTrue(any("in-memory snapshot refused" in e and "belongs to uid 65534" in e for e in events),
                            events)
            self.assertEqual(os.listdir(planted), ["left-by-a-stranger"], "the job wrote into a stranger's directory")
            # A restart reads nothing from it.
            os.kill(worker_pids(job_id)[-1], signal.SIGKILL)
            wait_for(lambda: s.job(job_id)["attempt"] == 2 and s.job(job_id)["state"] == "RUNNING", 120,
                     "the restarted attempt running")
            wait_for(lambda: any("in-memory snapshots ignored" in e["reason"] for e in s.job(job_id)["events"]), 60,
                     "the restart saying it ignored the directory")
            self.assertEqual(s.ctl("cancel", job_id).returncode, 0)
            # The server, as root, leaves the stranger's directory alone.
            self.assertEqual(os.listdir(planted), ["left-by-a-stranger"])
        finally:
            s.stop()
            if planted:
                shutil.rmtree(planted, ignore_errors=True)

    def test_4_streams_that_never_say_hello_hold_nothing_for_long(self):
        """WorkerService.Connect gives each stream a server thread before the
        hello (and its token) comes: 1,000 streams that never say it."""
        d = os.path.join(self.tmp.name, "hello")
        os.makedirs(d)
        s = Server(d)

        def threads():
            with open(f"/proc/{s.proc.pid}/status") as f:
                return int([line for line in f if line.startswith("Threads:")][0].split()[1])
        ch = grpc.insecure_channel(s.addr)
        silence = threading.Event()

        def nothing():
            silence.wait()
            return
            yield
        connect = ch.stream_stream("/trainyard.v1.WorkerService/Connect", request_serializer=lambda m: m,
                                   response_deserializer=lambda b: b)
        try:
            before = threads()
            calls = [connect(nothing()) for _ in range(1000)]
            wait_for(lambda: sum(c.code() is not None for c in calls if c.done()) >= 1000 - 256, 30,
                     "the streams over 256 from one host refused")
            refused = [c for c in calls if c.done() and c.code() == grpc.StatusCode.RESOURCE_EXHAUSTED]
            self.assertGreaterEqual(len(refused), 1000 - 256)
            self.assertLessEqual(threads(), before + 256 + 16)
            t0 = time.monotonic()
            self.assertEqual(s.ctl("list").returncode, 0)
            self.assertLess(time.monotonic() - t0, 1.0)
            # Within 5 s each waiting stream is cancelled: its thread is free again.
            wait_for(lambda: all(c.done() for c in calls), 30, "every silent stream ended")
            late = [c for c in calls if c.code() == grpc.StatusCode.CANCELLED]
            self.assertGreaterEqual(len(late), 200, set(str(c.code()) for c in calls))
            wait_for(lambda: threads() <= before + 16, 30, "the server's threads back to what they were",
                     lambda: threads())
        finally:
            silence.set()
            ch.close()
            s.stop()

    def test_5_slow_connections_do_not_block_metrics_or_the_web_ui(self):
        """Slow-loris: connections that send half a request and wait."""
        d = os.path.join(self.tmp.name, "slow")
        os.makedirs(d)
        s = Server(d)
        held = []
        try:
            for port in (s.metrics_port, s.http_port):
                for _ in range(12):
                    c = socket.create_connection(("127.0.0.1", port), timeout=10)
                    c.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
                    held.append(c)
            t0 = time.monotonic()
            self.assertIn("trainyard_jobs", s.scrape())
            with urllib.request.urlopen(f"http://127.0.0.1:{s.http_port}/ui/", timeout=10) as r:
                self.assertEqual(r.status, 200)
            self.assertLess(time.monotonic() - t0, 2.0)
            # 1,000 of them (500 on each port, connecting without waiting:
            # past the listen backlog a connect waits in the kernel) cost no
            # thread and leave the gRPC API answering at once; /metrics and
            # the UI wait their turn (the threat model says so: limit them
            # by firewall).
            with open(f"/proc/{s.proc.pid}/status") as f:
                before = int([line for line in f if line.startswith("Threads:")][0].split()[1])
            for port in (s.metrics_port, s.http_port):
                for _ in range(488):
                    c = socket.socket()
                    c.setblocking(False)
                    c.connect_ex(("127.0.0.1", port))
                    held.append(c)
            with open(f"/proc/{s.proc.pid}/status") as f:
                after = int([line for line in f if line.startswith("Threads:")][0].split()[1])
            self.assertLessEqual(after, before + 2, "slow connections cost threads")
            t0 = time.monotonic()
            self.assertEqual(s.ctl("list").returncode, 0)
            self.assertLess(time.monotonic() - t0, 1.0)
        finally:
            for c in held:
                c.close()
            s.stop()

    def test_6_a_flood_of_silent_streams_keeps_no_job_from_starting(self):
        """A local process without a token holds 300 streams open that never
        say hello, renewing each as the server ends it: the host's budget
        of streams waiting to say hello stays full. A job submitted
        meanwhile starts and succeeds (its ranks prove their job when their
        stream opens, and ask again while refused)."""
        d = os.path.join(self.tmp.name, "flood")
        os.makedirs(d)
        s = Server(d)
        ch = grpc.insecure_channel(s.addr)
        connect = ch.stream_stream("/trainyard.v1.WorkerService/Connect", request_serializer=lambda m: m,
                                   response_deserializer=lambda b: b)
        stop = threading.Event()
        refused = []

        def nothing():
            stop.wait(6)  # past the server's 5 s for a hello
            return
            yield

        def flood():
            calls = [connect(nothing()) for _ in range(300)]
            while not stop.is_set():
                for i, c in enumerate(calls):
                    if c.done():
                        if c.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                            refused.append(time.monotonic())
                        calls[i] = connect(nothing())
                stop.wait(0.2)
            for c in calls:
                c.cancel()
        flooder = threading.Thread(target=flood)
        flooder.start()
        try:
            wait_for(lambda: len(refused) >= 300 - 256, 30, "the flood over the host's budget refused")
            spec = write_spec(d, "job.yaml", JOB % job_args(name="flooded", seed=3, steps=40, restarts=0))
            job_id = submit(s, spec)
            refused_before = len(refused)
            wait_for(lambda: s.job(job_id)["state"] in ("SUCCEEDED", "FAILED"), 180, "the job to end")
            job = s.job(job_id)
            self.assertEqual(job["state"], "SUCCEEDED", [e["reason"] for e in job["events"]])
            self.assertEqual(job["attempt"], 1)
            # The budget was full all along: the flood's streams were refused meanwhile.
            self.assertGreater(len(refused), refused_before, "the flood did not keep the budget full")
        finally:
            stop.set()
            flooder.join(timeout=60)
            ch.close()
            s.stop()

    def test_7_a_hostile_hello_is_refused_and_neither_forges_nor_fills_the_log(self):
        """Five hellos with a 1 MiB job id, one whose id carries a newline
        and a forged log line, one with an escape sequence in its node."""
        d = os.path.join(self.tmp.name, "hostile-hello")
        os.makedirs(d)
        s = Server(d)
        log = os.path.join(d, "server.log")
        forged = b"\n[2099-01-01 00:00:00.000] [error] FORGED by a stranger"
        hellos = [field_bytes(1, field_bytes(1, b"job-" + b"0" * (1 << 20)) + field_bytes(4, b"t"))] * 5
        hellos.append(field_bytes(1, field_bytes(1, b"job-0123abcd" + forged) + field_bytes(4, b"t")))
        hellos.append(field_bytes(1, field_bytes(1, b"job-0123abcd") + field_bytes(4, b"t") +
                                  field_bytes(9, b"node\x1b]0;owned\x07")))
        ch = grpc.insecure_channel(s.addr, options=[("grpc.max_send_message_length", 8 << 20)])
        connect = ch.stream_stream("/trainyard.v1.WorkerService/Connect")
        try:
            size = os.path.getsize(log)
            for hello in hellos:
                with self.assertRaises(grpc.RpcError) as err:
                    list(connect(iter([hello]), timeout=10))
                self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, err.exception.details())
                self.assertLess(len(err.exception.details()), 200)
            self.assertIn("field 'node'", err.exception.details())
            wait_for(lambda: read(log).count("refused") >= len(hellos), 10, "the refusals logged")
            text = open(log, "rb").read()[size:]
            self.assertLess(len(text), 4096, text[:400])
            self.assertNotIn(forged, text)
            self.assertNotIn(b"\x1b", text)
        finally:
            ch.close()
            s.stop()

    def test_8_wrong_tokens_from_an_address_do_not_lock_out_the_right_one(self):
        """20 wrong tokens from 127.0.0.1 (every local user's address, and
        that of the TLS proxy in front): the right token still signs in."""
        d = os.path.join(self.tmp.name, "sign-in")
        os.makedirs(d)
        token_file = os.path.join(d, "token")
        with open(token_file, "w") as f:
            f.write("s3cret-token-0123456789\n")
        s = Server(d, extra=["--auth-token-file", token_file])

        def login(token):
            req = urllib.request.Request(f"http://127.0.0.1:{s.http_port}/ui/api/login",
                                         data=json.dumps({"token": token}).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return resp.status, resp.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()
        try:
            codes = [login(f"guess-{i:04d}-0123456789")[0] for i in range(20)]
            self.assertEqual(codes, [401] * 10 + [429] * 10)
            status, body = login("s3cret-token-0123456789")
            self.assertEqual(status, 200, body)
            self.assertTrue(json.loads(body)["admin"], body)
            self.assertEqual(login("guess-again-0123456789")[0], 429)  # wrong ones are still held back
        finally:
            s.stop()

    def test_2_tls(self):
        d = os.path.join(self.tmp.name, "tls")
        os.makedirs(d)

        def openssl(*args):
            subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
                "-days", "2", "-subj", "/CN=trainyard-test-ca")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
                "-subj", "/CN=localhost")
        with open(os.path.join(d, "ext.cnf"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
        openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
        s = Server(d, extra=["--tls-cert", os.path.join(d, "server.pem"), "--tls-key", os.path.join(d, "server.key"),
                             "--tls-client-ca", os.path.join(d, "ca.pem")])
        try:
            # Plain text against TLS: refused.
            r = subprocess.run([os.path.join(e2e_test.BIN, "trainctl"), "--server", s.addr, "--timeout", "3", "list"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2)
            # TLS without a client certificate: mutual TLS refuses it too.
            r = s.ctl("--ca", os.path.join(d, "ca.pem"), "--timeout", "3", "list")
            self.assertEqual(r.returncode, 2)
            self.assertIn("requires a client certificate", r.stderr)
            # Its web UI, which sees no certificate, lets nobody in: no
            # session, no sign-in, no API call (before: anyone was admin).
            def web(path, body=None):
                req = urllib.request.Request(f"http://127.0.0.1:{s.http_port}{path}",
                                             data=None if body is None else json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=10) as resp:
                        return resp.status, resp.read().decode()
                except urllib.error.HTTPError as e:
                    return e.code, e.read().decode()
            status, out = web("/ui/api/session")
            self.assertEqual(status, 401, out)
            status, out = web("/ui/api/login", {"token": "anything"})
            self.assertEqual(status, 401, out)
            self.assertIn("asks every caller for a client certificate (mutual TLS)", out)
            status, out = web("/ui/api/v1/SubmitJob", {"spec": "name: x\n"})
            self.assertEqual(status, 401, out)
            # A client certificate signed by another CA: refused in the TLS
            # handshake, and the error says so.
            openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "other-ca.key", "-out",
                    "other-ca.pem", "-days", "2", "-subj", "/CN=another-ca")
            openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "stranger.key", "-out", "stranger.csr",
                    "-subj", "/CN=stranger")
            openssl("x509", "-req", "-in", "stranger.csr", "-CA", "other-ca.pem", "-CAkey", "other-ca.key",
                    "-CAcreateserial", "-out", "stranger.pem", "-days", "2", "-extfile", "ext.cnf")
            r = s.ctl("--ca", os.path.join(d, "ca.pem"), "--cert", os.path.join(d, "stranger.pem"),
                      "--key", os.path.join(d, "stranger.key"), "--timeout", "3", "list")
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("handshake", r.stderr.lower(), r.stderr)
            # The server's own certificate is nobody's.
            r = s.ctl("--ca", os.path.join(d, "ca.pem"), "--cert", os.path.join(d, "server.pem"),
                      "--key", os.path.join(d, "server.key"), "--timeout", "3", "list")
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("the server's own", r.stderr)
            # With one signed by the CA: served, and a job's workers (which
            # present no certificate: the CA and their job's token) reach
            # the coordinator.
            openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.csr",
                    "-subj", "/CN=client")
            openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                    "-out", "client.pem", "-days", "2", "-extfile", "ext.cnf")
            client = ["--ca", os.path.join(d, "ca.pem"), "--cert", os.path.join(d, "client.pem"),
                      "--key", os.path.join(d, "client.key")]
            r = s.ctl(*client, "list")
            self.assertEqual(r.returncode, 0, r.stderr)
            spec = write_spec(d, "mtls.yaml", JOB % job_args(name="mtls", seed=4, steps=60, restarts=0))
            r = s.ctl(*client, "-o", "json", "submit", spec)
            self.assertEqual(r.returncode, 0, r.stderr)
            w = s.ctl(*client, "watch", json.loads(r.stdout)["id"])
            self.assertEqual(w.returncode, 0, w.stdout + w.stderr)
        finally:
            s.stop()
        # Server-side TLS only: trainctl --ca works and a job's workers
        # reach the coordinator over TLS.
        s = Server(d, extra=["--tls-cert", os.path.join(d, "server.pem"), "--tls-key", os.path.join(d, "server.key"),
                             "--tls-worker-ca", os.path.join(d, "ca.pem")])
        try:
            ca = os.path.join(d, "ca.pem")
            spec = write_spec(d, "job.yaml", JOB % job_args(name="tls", seed=3, steps=100, restarts=0))
            r = s.ctl("--ca", ca, "-o", "json", "submit", spec)
            self.assertEqual(r.returncode, 0, r.stderr)
            job_id = json.loads(r.stdout)["id"]
            w = s.ctl("--ca", ca, "watch", job_id)
            self.assertEqual(w.returncode, 0, w.stdout + w.stderr)
            r = subprocess.run([os.path.join(e2e_test.BIN, "trainctl"), "--server", s.addr, "--timeout", "3", "list"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2)
        finally:
            s.stop()


# Bad specs: (text, the field the error must name).
HOSTILE_SPECS = [
    ("name: [1, 2]\n", "name"),
    ("name: %s\n" % ("x" * 5000), "name"),
    ("name: 'a/b'\n", "name"),
    ("max_steps: -5\n", "max_steps"),
    ("max_steps: 99999999999999999999999\n", "max_steps"),
    ("max_steps: 1.5\n", "max_steps"),
    ("max_steps: '10'x\n", "not valid YAML"),
    ("num_processes: 0\n", "num_processes"),
    ("num_processes: 100000\n", "num_processes"),
    ("num_processes: {a: 1}\n", "num_processes"),
    ("seed: -1\n", "seed"),
    ("threads_per_process: 1000\n", "threads_per_process"),
    ("metrics_every_steps: 0\n", "metrics_every_steps"),
    ("device: gpu\n", "device"),
    ("distributed_type: XLA\n", "distributed_type"),
    ("mixed_precision: fp64\n", "mixed_precision"),
    ("max_grad_norm: .nan\n", "max_grad_norm"),
    ("clip_grad_value: -1\n", "clip_grad_value"),
    ("gradient_accumulation_steps: 1000000\n", "gradient_accumulation_steps"),
    ("max_restarts: 100000\n", "max_restarts"),
    ("step_timeout_s: 1e100\n", "step_timeout_s"),
    ("reattach_timeout_s: 0\n", "reattach_timeout_s"),
    ("preemptible: 2\n", "preemptible"),
    ("eval_batches: 0\n", "eval_batches"),
    ("loss: hinge\n", "loss"),
    ("model: {kind: mlp, hidden: [0]}\n", "model.hidden[0]"),
    ("model: {kind: mlp, hidden: %s}\n" % list(range(1, 100)), "model.hidden"),
    ("model: {kind: mlp, hidden: [a]}\n", "model.hidden[0]"),
    ("model: {kind: gpt, heads: 0}\n", "model.heads"),
    ("model: {kind: gpt, vocab: 99999999}\n", "model.vocab"),
    ("model: {kind: gpt, width: 30, heads: 4}\n", "model.heads"),
    ("model: {kind: 'torchscript:'}\n", "model.kind"),
    ("model: {kind: 'torchscript:/etc/passwd'}\n", "model.kind"),
    ("model: {kind: mlp, num_classes: 1}\n", "model.num_classes"),
    ("data: {kind: 'mnist:../../../etc'}\n", "data.kind"),
    ("data: {kind: 'tokens:/x.bin'}\n", "data.kind"),
    ("data: {batch_size: 0}\n", "data.batch_size"),
    ("data: {num_samples: -1}\n", "data.num_samples"),
    ("data: {shuffle: yes please}\n", "data.shuffle"),
    ("optimizer: {kind: lamb}\n", "optimizer.kind"),
    ("optimizer: {lr: 1e9}\n", "optimizer.lr"),
    ("optimizer: {kind: sgd, betas: [0.9, 0.99]}\n", "optimizer.betas"),
    ("optimizer: {betas: [2, 0.5]}\n", "optimizer.betas"),
    ("ddp: {bucket_cap_mb: -1}\n", "ddp.bucket_cap_mb"),
    ("ddp: {comm_hook: int8}\n", "ddp.comm_hook"),
    ("ddp: {comm_hook: power_sgd, comm_state_option: {matrix_approximation_rank: 999999}}\n",
     "ddp.comm_state_option.matrix_approximation_rank"),
    ("fsdp_config: {fsdp_sharding_strategy: -1}\n", "fsdp_config.fsdp_sharding_strategy"),
    ("fsdp_config: {fsdp_min_num_params: 0}\n", "fsdp_config.fsdp_min_num_params"),
    ("fsdp_config: {ranks_per_node: 3}\nnum_processes: 2\n", "fsdp_config.ranks_per_node"),
    ("checkpoint: {project_dir: /etc}\n", "checkpoint.project_dir"),
    ("checkpoint: {project_dir: ../../..}\n", "checkpoint.project_dir"),
    ("checkpoint: {resume_from: /proc/self}\n", "checkpoint.resume_from"),
    ("checkpoint: {every_steps: 1e30}\n", "checkpoint.every_steps"),
    ("checkpoint: {max_shard_size: 0}\n", "checkpoint.max_shard_size"),
    ("scheduler: {kind: cosine, warmup_steps: -3}\n", "scheduler.warmup_steps"),
    ("unknown_field: 1\n", "unknown_field"),
    ("a: &a [*a]\n", "a"),
    ("%s\n" % ("[" * 2000 + "]" * 2000), "not valid YAML"),
]


class HostileInput(unittest.TestCase):
    def test_a_slow_directory_stalls_only_its_own_submission(self):
        """A spec naming files on a mount that answers in seconds (a hung NFS
        server, a user's FUSE file system): its submission waits; nobody
        else's request does."""
        tmp = tempfile.TemporaryDirectory(prefix="trainyard-hostile-")
        s = Server(tmp.name)
        mnt = os.path.join(tmp.name, "slow")
        os.makedirs(mnt)
        fs = subprocess.Popen([sys.executable, os.path.join(HERE, "scripts", "slow_fs.py"), mnt, "1"])
        try:
            wait_for(lambda: os.path.ismount(mnt), 30, "the slow file system mounted")
            spec = write_spec(tmp.name, "slow.yaml", f"""
name: slow
model: {{kind: mlp, hidden: [64]}}
data: {{kind: tensors, path: {mnt}/data/train, inputs: x, targets: y, batch_size: 8}}
max_steps: 10
""")
            submitted = {}

            def submit():
                t0 = time.monotonic()
                submitted["r"] = s.ctl("--timeout", "120", "submit", spec)
                submitted["seconds"] = time.monotonic() - t0
            submitter = threading.Thread(target=submit)
            submitter.start()
            worst = 0.0
            while submitter.is_alive():
                t0 = time.monotonic()
                r = s.ctl("--timeout", "30", "list")
                worst = max(worst, time.monotonic() - t0)
                self.assertEqual(r.returncode, 0, r.stderr)
            submitter.join()
            self.assertGreaterEqual(submitted["seconds"], 1.0, "the submission did not wait for the slow mount")
            self.assertEqual(submitted["r"].returncode, 2, submitted["r"].stdout)
            self.assertIn("spec field 'data.kind'", submitted["r"].stderr)
            self.assertIn("does not exist", submitted["r"].stderr)
            self.assertLess(worst, 1.0, "trainctl list waited for another request's slow directory")
        finally:
            subprocess.run(["fusermount", "-u", mnt], capture_output=True)
            fs.wait(timeout=30)
            s.stop()
            tmp.cleanup()

    def test_a_users_checkpoint_directory_stalls_nobody(self):
        """A job's project_dir is its owner's: 400 sparse 64 MiB manifests
        there, and a failure with restarts left, once made the coordinator
        read them all under its lock; every other request waited."""
        tmp = tempfile.TemporaryDirectory(prefix="trainyard-hostile-")
        s = Server(tmp.name)
        try:
            proj = os.path.join(tmp.name, "proj")
            for i in range(1000, 1400):  # where the job's checkpoints go
                os.makedirs(os.path.join(proj, "checkpoints", f"checkpoint_{i}"))
                with open(os.path.join(proj, "checkpoints", f"checkpoint_{i}", "manifest.json"), "wb") as f:
                    f.truncate(64 << 20)
            spec = write_spec(tmp.name, "sparse.yaml", f"""
name: sparse
model: {{kind: mlp, hidden: [64]}}
data: {{kind: synthetic, batch_size: 16, num_samples: 2048, seed: 5}}
max_steps: 10000000
num_processes: 2
max_restarts: 3
checkpoint: {{project_dir: {proj}, every_steps: 20, total_limit: 0}}
""")
            r = s.ctl("-o", "json", "submit", spec)
            self.assertEqual(r.returncode, 0, r.stderr)
            job_id = json.loads(r.stdout)["id"]
            wait_for(lambda: s.job(job_id)["state"] == "RUNNING" and s.job(job_id)["step"] > 40, 120,
                     "the job running past its first checkpoints")
            worst, refused, stop = [0.0], [], threading.Event()

            def ask():
                while not stop.is_set():
                    t0 = time.monotonic()
                    r = s.ctl("--timeout", "30", "list")
                    worst[0] = max(worst[0], time.monotonic() - t0)
                    if r.returncode != 0:
                        refused.append(r.stderr)
            asker = threading.Thread(target=ask)
            asker.start()
            try:
                os.kill(worker_pids(job_id)[-1], signal.SIGKILL)
                wait_for(lambda: s.job(job_id)["attempt"] == 2 and s.job(job_id)["state"] == "RUNNING", 120,
                         "the restarted attempt running")
            finally:
                stop.set()
                asker.join()
            self.assertEqual(refused, [])
            self.assertLess(worst[0], 1.0, "trainctl list waited on a user's checkpoint files")
            restart = [e["reason"] for e in s.job(job_id)["events"] if "restart 1 of 3" in e["reason"]]
            self.assertTrue(restart and re.search(r"from checkpoint_\d+ \(step \d+\)", restart[0]), restart)
            s.ctl("cancel", job_id)
        finally:
            s.stop()
            tmp.cleanup()

    def test_bad_specs_and_requests_get_the_right_code_naming_the_field(self):
        tmp = tempfile.TemporaryDirectory(prefix="trainyard-hostile-")
        s = Server(tmp.name)
        try:
            self.assertGreaterEqual(len(HOSTILE_SPECS), 50)
            for i, (text, field) in enumerate(HOSTILE_SPECS):
                path = write_spec(tmp.name, f"bad{i}.yaml", text)
                r = s.ctl("submit", path)
                self.assertEqual(r.returncode, 2, (text[:80], r.stdout))
                self.assertIn("INVALID_ARGUMENT", r.stderr, text[:80])
                # "spec field 'x.y'": the field is named, quoted.
                self.assertIn(field if " " in field else f"'{field}'", r.stderr, text[:80])
            # Not UTF-8 at all.
            with open(os.path.join(tmp.name, "binary.yaml"), "wb") as f:
                f.write(b"name: \xff\xfe\n")
            r = s.ctl("submit", os.path.join(tmp.name, "binary.yaml"))
            self.assertIn("UTF-8", r.stderr)
            # Requests naming jobs that are not there, or bad fields.
            requests = [
                (("get", ""), "INVALID_ARGUMENT", "id"),
                (("get", "x" * 10000), "INVALID_ARGUMENT", "id"),
                (("get", "job-00000000"), "NOT_FOUND", "job-00000000"),
                (("cancel", "job-00000000"), "NOT_FOUND", "job-00000000"),
                (("checkpoint", "job-00000000"), "NOT_FOUND", "job-00000000"),
                (("checkpoints", "job-00000000"), "NOT_FOUND", "job-00000000"),
                (("resume", "job-00000000"), "NOT_FOUND", "job-00000000"),
                (("logs", "job-00000000"), "NOT_FOUND", "job-00000000"),
                (("watch", "job-00000000"), "NOT_FOUND", "job-00000000"),
                (("logs", "job-00000000", "--limit-bytes", "-5"), "INVALID_ARGUMENT", "tail_bytes"),
            ]
            for args, code, field in requests:
                r = s.ctl(*args)
                self.assertEqual(r.returncode, 2, args)
                self.assertIn(code, r.stderr, args)
                self.assertIn(field, r.stderr, args)
            # The server's memory stays bounded under a stream of bad input.
            def rss_kb():
                with open(f"/proc/{s.proc.pid}/status") as f:
                    return int([l for l in f if l.startswith("VmRSS:")][0].split()[1])
            ch = grpc.insecure_channel(s.addr)
            submit_rpc = ch.unary_unary("/trainyard.v1.JobService/SubmitJob")
            big = field_bytes(1, b"name: " + b"y" * 500000 + b"\n")
            for _ in range(30):  # warm up allocator pools
                with self.assertRaises(grpc.RpcError):
                    submit_rpc(big, timeout=10)
            before = rss_kb()
            # 300 of 500 kB: a server keeping half of each request grows 75 MB.
            for _ in range(300):
                with self.assertRaises(grpc.RpcError) as err:
                    submit_rpc(big, timeout=10)
                self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            after = rss_kb()
            self.assertLess(after - before, 64 * 1024, f"RSS grew from {before} kB to {after} kB")
            # Too large for a message at all.
            with self.assertRaises(grpc.RpcError) as err:
                submit_rpc(field_bytes(1, b"x" * (5 << 20)), timeout=10)
            self.assertEqual(err.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            ch.close()
            self.assertEqual(s.ctl("list").returncode, 0)  # still serving
        finally:
            s.stop()
            tmp.cleanup()


if __name__ == "__main__":
    e2e_test.BIN = sys.argv.pop(1)
    test_clock.main()
