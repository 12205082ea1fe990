"""Elastic jobs end to end: a real server, workers and trainctl.

- `trainctl scale` shrinks a 3-replica elastic job to 1 and grows it back
  to 3 while it trains: the job never restarts (same attempt, rank 0 the
  same process throughout), no rank's committed step goes back, all
  members hold bitwise-equal parameters after every commit (the workers'
  hash lines, TRAINYARD_REPLICA_HASH=1), and the job trains exactly the
  samples of its fault-free run (the final sample cursor). The live world
  size is on /metrics.
- On a full server, a high-priority 1-slot job shrinks a low-priority
  elastic job instead of preempting it (no requeue, no checkpoint), runs,
  and the elastic job grows back to full size.

Run by ctest with the build's bin directory as the first argument.
"""
import json
import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_test  # noqa: E402
from e2e_test import URGENT_JOB, priority_server, wait_for, worker_pids, write_spec  # noqa: E402
from replica_e2e import commits, job_logs, submit  # noqa: E402
import test_clock  # noqa: E402

JOB = """
name: %(name)s
model: {kind: mlp, hidden: [64]}
data: {kind: synthetic, batch_size: 16, num_samples: 480}
optimizer: {kind: adamw, lr: 0.003}
max_steps: %(steps)d
num_processes: 3
seed: 5
metrics_every_steps: 1
fault_tolerance: {mode: replica, min_replicas: 1}
elastic: {min_processes: 1}
preemptible: true
%(extra)s
"""


class Elastic(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-elastic-")
        os.environ["TRAINYARD_REPLICA_HASH"] = "1"  # the workers inherit it from the server
        cls.server = priority_server(cls.tmp.name, slots=3)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def replicas(self, job_id):
        return self.server.job(job_id).get("replicas") or {}

    def live(self, job_id, n, what, timeout=120):
        """Waits until exactly ranks 0..n-1 train together, nobody leaving or joining."""
        def ok():
            jb = self.server.job(job_id)
            r = jb.get("replicas") or {}
            return jb["state"] == "RUNNING" and sorted(r.get("live", [])) == list(range(n)) \
                and not r.get("leaving") and not r.get("healing") and len(worker_pids(job_id)) == n
        wait_for(ok, timeout, what, lambda: json.dumps(self.server.job(job_id), indent=1)[-3000:])

    def check_commits(self, job_id, samples):
        """The workers' hash lines: no step goes back in any rank log, one
        (hash, cursor) and one epoch per step, and the final cursor."""
        rows = commits(job_logs(self.tmp.name, job_id))
        self.assertTrue(rows, "no replica hash lines in the rank logs")
        last, seen, epochs = {}, {}, {}
        for path, rank, epoch, step, cursor, digest in rows:
            self.assertGreaterEqual(step, last.get(path, 0), f"{path}: step went back to {step}")
            last[path] = step
            seen.setdefault(step, set()).add((digest, cursor))
            epochs.setdefault(step, set()).add(epoch)
        for step, s in seen.items():
            self.assertEqual(len(s), 1, f"step {step}: members disagree (hash, cursor): {s}")
            self.assertEqual(len(epochs[step]), 1, f"step {step} committed under epochs {epochs[step]}")
        self.assertEqual(max(r[4] for r in rows), samples, "the samples of the fault-free run, none twice")
        return rows

    def test_1_scale_down_and_up_loses_nothing(self):
        s = self.server
        steps = 3000
        job_id = submit(s, write_spec(self.tmp.name, "scaled.yaml",
                                      JOB % dict(name="scaled", steps=steps, extra="")))
        self.live(job_id, 3, "three live replicas")
        rank0 = min(worker_pids(job_id))
        wait_for(lambda: s.job(job_id)["step"] >= 100, 120, "100 steps at full size")
        r = s.ctl("scale", job_id, "1", timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"{job_id}: 1 rank trains", r.stdout)
        self.live(job_id, 1, "one live replica")
        self.assertEqual(s.metric(f'trainyard_job_world_size{{job_id="{job_id}"}}'), 1)
        at_one = s.job(job_id)["step"]
        wait_for(lambda: s.job(job_id)["step"] >= at_one + 100, 120, "100 steps at size 1")
        # Out of bounds and a job that is not elastic say what is wrong.
        r = s.ctl("scale", job_id, "4")
        self.assertEqual(r.returncode, 2)
        self.assertIn("between 1 (elastic.min_processes) and 3 (num_processes) ranks; asked for 4", r.stderr)
        r = s.ctl("scale", job_id, "3", timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.live(job_id, 3, "three live replicas again")
        self.assertEqual(s.metric(f'trainyard_job_world_size{{job_id="{job_id}"}}'), 3)
        self.assertIn(rank0, worker_pids(job_id), "rank 0 trained on throughout")
        w = s.ctl("watch", job_id, timeout=900)
        self.assertEqual(w.returncode, 0, w.stdout[-2000:] + w.stderr)
        job = s.job(job_id)
        self.assertEqual(job["attempt"], 1)
        events = " | ".join(e["reason"] for e in job["events"])
        self.assertIn("(ranks 1,2 leave: scaled to 1)", events)
        self.assertIn("rank 1 left", events)
        self.assertIn("growing to 3 ranks (scaled to 3): launching ranks 1,2", events)
        self.assertIn("joined: the job grows", events)
        self.assertNotIn("restart", events)
        rows = self.check_commits(job_id, steps * 3 * 16)
        self.assertGreater(max(r[3] for r in rows), steps, "steps at size 1 train fewer samples: more steps")

    def test_2_a_high_priority_job_shrinks_an_elastic_job_which_grows_back(self):
        s = self.server
        steps = 4000
        job_id = submit(s, write_spec(self.tmp.name, "low.yaml",
                                      JOB % dict(name="low", steps=steps, extra="priority: low")))
        self.live(job_id, 3, "three live replicas")
        wait_for(lambda: s.job(job_id)["step"] >= 50, 120, "50 steps at full size")
        submitted = time.monotonic()
        urgent = submit(s, write_spec(self.tmp.name, "urgent.yaml", URGENT_JOB))
        wait_for(lambda: s.job(urgent)["step"] > 0 or s.job(urgent)["state"] == "SUCCEEDED", 60,
                 "the urgent job's first step", lambda: json.dumps(s.job(urgent))[-2000:])
        first_step = time.monotonic() - submitted
        wait_for(lambda: s.job(urgent)["state"] in ("SUCCEEDED", "FAILED"), 120, "the urgent job to end")
        self.assertEqual(s.job(urgent)["state"], "SUCCEEDED")
        ended = time.monotonic()
        self.live(job_id, 3, "the elastic job back at full size")
        regrown = time.monotonic() - ended
        print(f"\nshrink for priority: urgent job's first step {first_step:.1f} s after submit; "
              f"elastic job back to 3 ranks {regrown:.1f} s after it ended", flush=True)
        job = s.job(job_id)
        events = " | ".join(e["reason"] for e in job["events"])
        self.assertIn(f"(rank 2 leaves: shrunk for job {urgent} (priority 1000))", events)
        self.assertIn("the job grows", events)
        self.assertNotIn("preempted", events)
        self.assertEqual(job["attempt"], 1, "not requeued")
        self.assertEqual(job["state"], "RUNNING")
        self.assertEqual(json.loads(s.ctl("-o", "json", "checkpoints", job_id).stdout), [], "no checkpoint needed")
        s.ctl("cancel", job_id)


if __name__ == "__main__":
    e2e_test.BIN = sys.argv.pop(1)
    test_clock.main()
