"""Replica fault tolerance end to end: a real server, workers and trainctl.

- Kills: a 3-replica DDP job (fault_tolerance.mode replica) loses a random
  replica to SIGKILL 20 times. The job never restarts as a group: each kill
  starts a new membership of the survivors, a replacement is launched and
  heals from a live peer. From the workers' own logs (one line per committed
  step, TRAINYARD_REPLICA_HASH=1): no rank's committed step goes back, all
  members hold bitwise-equal parameters after every commit, and no step is
  committed under two epochs. The job trains exactly the samples of the
  fault-free run (the final sample cursor) and ends within 1% of its eval
  loss. The job is built to converge to one point whatever its path: every
  step of the three replicas is the whole (48-sample) dataset, with weight
  decay and a cosine schedule to zero; on data it has not converged on, the
  extra, smaller steps of the degraded memberships alone move the loss by
  a few percent.
- Below min_replicas the job falls back to a whole-group restart.
- A replica slowed to a fraction of its speed (SIGSTOP/SIGCONT
  cycling, as a throttled or oversubscribed host would) is named by the
  coordinator, evicted and replaced; the others train on.
- FSDP HYBRID_SHARD with 2 shard groups of 2 ranks: a killed rank takes
  its shard group out and back in; the other group trains on; the replicas
  of each shard agree bitwise after every commit, and the job trains the
  fault-free run's samples to within 1% of its eval loss.
- A kill -9 of the coordinator is not a stall: the replicas train on while
  it is away, one of them is killed meanwhile, and the restarted
  coordinator takes the group on (same worker processes) and heals it.

Run by ctest with the build's bin directory as the first argument.
"""
import collections
import json
import math
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_test  # noqa: E402  (Server, wait_for, worker_pids, write_spec)
from e2e_test import Server, free_port, read, wait_for, worker_pids, write_spec  # noqa: E402
import test_clock  # noqa: E402

JOB = """
name: %(name)s
model: {kind: mlp, hidden: [64]}
data: {kind: synthetic, batch_size: 16, num_samples: 48}
optimizer: {kind: adamw, lr: 0.003, weight_decay: 0.05}
scheduler: {kind: cosine, warmup_steps: 100}
max_steps: %(steps)d
num_processes: 3
seed: 11
metrics_every_steps: 1
eval_every_steps: %(eval_every)d
eval_batches: 8
fault_tolerance: {mode: replica, min_replicas: %(min_replicas)d}
max_restarts: %(restarts)d
"""

HASH_LINE = re.compile(r"replica rank (\d+) epoch (\d+) step (\d+) cursor (\d+) hash (\w+)")


def submit(server, path):
    r = server.ctl("-o", "json", "submit", path)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)["id"]


def job_logs(state_dir, job_id):
    """Every rank log of the job: {path: text}."""
    out = {}
    base = os.path.join(state_dir, "jobs", job_id)
    for root, _, files in os.walk(base):
        for f in files:
            if f.startswith("rank-") and f.endswith(".log"):
                out[os.path.join(root, f)] = read(os.path.join(root, f))
    return out


def commits(logs):
    """(rank log, rank, epoch, step, cursor, hash) of every committed step, in log order."""
    rows = []
    for path, text in sorted(logs.items()):
        for m in HASH_LINE.finditer(text):
            rows.append((path, int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5)))
    return rows


def forks(rows):
    """The steps whose commits disagree other than by a fork a rank took to
    its end: [(step, {(hash, cursor): [(log, rank, epoch)]})]. A rank whose
    gradient allreduce completed while a peer's failed applies a step its
    peers drop (docs/design/fault-tolerance.md, Commits); taken out of the
    membership, it commits nothing more in that epoch, and the others commit
    the step again, with their state, in a later one. Anything else — two
    states of a step in one epoch, or a forked state its rank went on from —
    is members disagreeing."""
    top = {}
    for path, rank, epoch, step, cursor, digest in rows:
        key = (path, rank, epoch)
        top[key] = max(top.get(key, 0), step)
    by_step = collections.defaultdict(lambda: collections.defaultdict(list))
    for path, rank, epoch, step, cursor, digest in rows:
        by_step[step][(digest, cursor)].append((path, rank, epoch))
    bad = []
    for step, variants in sorted(by_step.items()):
        if len(variants) == 1:
            continue
        first = {v: min(e for _, _, e in where) for v, where in variants.items()}
        kept = max(first, key=first.get)
        forked = [w for v, where in variants.items() if v != kept for w in where]
        if not all(e < first[kept] and top[w] == step for w in forked for e in [w[2]]):
            bad.append((step, {v: where for v, where in variants.items()}))
    return bad


def last_eval(logs):
    """The eval loss of the job's last evaluation, as its ranks logged it."""
    best = None
    for text in logs.values():
        for m in re.finditer(r"rank \d+ step (\d+) eval loss (\S+)", text):
            if best is None or int(m.group(1)) >= best[0]:
                best = (int(m.group(1)), float(m.group(2)))
    assert best is not None, "no eval loss in the rank logs"
    return best[1]


def three_live(server, job_id):
    """Whether the job runs with 3 live replicas, none healing, past step 50."""
    jb = server.job(job_id)
    r = jb.get("replicas") or {}
    return jb["state"] == "RUNNING" and len(r.get("live", [])) == 3 and not r.get("healing") \
        and len(worker_pids(job_id)) == 3 and jb["step"] >= 50


def ready_to_kill(server, job_id, ranks, heals, killed, gap):
    """The job's record once it ended, or once all `ranks` are live members
    again, `heals` heals are in its events (each kill's replacements
    committed a step) and it trained `gap` steps since the last kill
    (`killed`: (pid, step) pairs); None before."""
    jb = server.job(job_id)
    if jb["state"] in ("SUCCEEDED", "FAILED"):
        return jb
    reps = jb.get("replicas") or {}
    if jb["state"] != "RUNNING" or len(worker_pids(job_id)) != ranks or len(reps.get("live", [])) != ranks \
            or reps.get("healing"):
        return None
    if sum(" healed in " in e["reason"] for e in jb["events"]) < heals:
        return None
    return jb if jb["step"] >= (killed[-1][1] if killed else 0) + gap else None


class Replicas(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-replica-")
        os.environ["TRAINYARD_REPLICA_HASH"] = "1"  # the workers inherit it from the server
        cls.server = Server(cls.tmp.name, slots=3)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def run_job(self, name, steps, min_replicas=1, restarts=0, kills=0, rng=None):
        """Submits the job, kills `kills` random replicas while it runs, waits for its end."""
        s = self.server
        spec = write_spec(self.tmp.name, f"{name}.yaml",
                          JOB % dict(name=name, steps=steps, eval_every=steps, min_replicas=min_replicas,
                                     restarts=restarts))
        job_id = submit(s, spec)
        killed = []
        for k in range(kills):
            # Every replica is a member again (the last kill healed) and the
            # job has trained 5 to 40 steps since.
            gap = rng.randint(5, 40)

            try:
                jb = wait_for(lambda: ready_to_kill(s, job_id, 3, len(killed), killed, gap), 120,
                              f"{job_id}: three live replicas before kill {k + 1}")
            except AssertionError as e:
                self.fail(f"{e}\n{self.describe(job_id)}")
            if jb["state"] != "RUNNING":
                break
            pid = rng.choice(worker_pids(job_id))
            os.kill(pid, signal.SIGKILL)
            killed.append((pid, jb["step"], time.monotonic()))
        w = s.ctl("watch", job_id, timeout=900)
        self.assertEqual(w.returncode, 0, w.stdout[-2000:] + w.stderr + s.ctl("logs", job_id).stdout[-3000:])
        return job_id, killed

    def describe(self, job_id):
        """The job's last events and the end of each rank log, for a failure's message."""
        jb = self.server.job(job_id)
        lines = [f"{e['reason']}" for e in jb["events"][-12:]]
        for path, text in sorted(job_logs(self.tmp.name, job_id).items()):
            tail = [ln for ln in text.splitlines() if "replica rank" not in ln][-12:]
            lines.append(f"--- {os.path.basename(path)}")
            lines.extend(tail)
        return "\n".join(lines)

    def test_1_twenty_kills_lose_nothing(self):
        s = self.server
        rng = random.Random(35)
        steps = 12000
        base_id, _ = self.run_job("replica-base", steps)
        base = s.job(base_id)
        base_logs = job_logs(self.tmp.name, base_id)
        base_cursor = max(r[4] for r in commits(base_logs))
        self.assertEqual(base_cursor, steps * 3 * 16)
        base_eval = last_eval(base_logs)

        job_id, killed = self.run_job("replica-kills", steps, kills=20, rng=rng)
        self.assertEqual(len(killed), 20, "the job ended before 20 kills")
        job = s.job(job_id)
        self.assertEqual(job["state"], "SUCCEEDED")
        self.assertEqual(job["attempt"], 1, "a kill restarted the whole group")
        events = " | ".join(e["reason"] for e in job["events"])
        self.assertNotIn("restart ", events)
        self.assertGreaterEqual(events.count("membership"), 40, events)  # a loss and a heal per kill
        self.assertGreaterEqual(events.count("healed"), 20, events)

        # The workers' own account of every commit.
        logs = job_logs(self.tmp.name, job_id)
        rows = commits(logs)
        self.assertTrue(rows, "no replica hash lines in the rank logs")
        last = {}
        by_step = collections.defaultdict(set)
        epochs_of_step = collections.defaultdict(set)
        for path, rank, epoch, step, cursor, digest in rows:
            # A log file is one launch rank: its processes in turn. Their
            # committed steps never go back (a replacement heals to a live
            # peer's step, ahead of its predecessor's last).
            self.assertGreaterEqual(step, last.get(path, 0), f"{path}: step went back to {step}")
            last[path] = step
            by_step[step].add((digest, cursor))
            epochs_of_step[step].add(epoch)
        for step, seen in by_step.items():
            self.assertEqual(len(seen), 1, f"step {step}: members disagree (hash, cursor): {seen}")
            self.assertEqual(len(epochs_of_step[step]), 1, f"step {step} committed under epochs {epochs_of_step[step]}")
        # Every sample of the fault-free run, none twice: the cursor ends
        # where the fault-free run's did.
        self.assertEqual(max(r[4] for r in rows), base_cursor)
        self.assertGreaterEqual(job["step"], base["step"])
        evals = last_eval(logs)
        print(f"\n20 kills: {job['step']} steps (fault-free {base['step']}), eval loss {evals} "
              f"(fault-free {base_eval})", flush=True)
        # Both learned (chance is ln 10 = 2.30), and the kills cost no more
        # than their smaller batches do: the same samples in ~10% more steps
        # move a learning model's eval loss by a few percent, where a heal
        # that lost state would set it back toward chance.
        self.assertLess(base_eval, 0.6 * math.log(10), "the fault-free run did not learn")
        self.assertLess(abs(evals - base_eval), 0.05 * abs(base_eval), f"eval loss {evals} vs fault-free {base_eval}")

    def test_3_a_slow_replica_is_evicted_and_replaced(self):
        s = self.server
        # The throttle below stops the rank 20 ms of every 24. Its forward
        # pass (what the straggler rule measures) must span whole periods:
        # one of ~2 ms on a fast CPU fits in the 4 ms it runs, so the stops
        # land in the step's collectives instead and the forward looks
        # barely slower (the eviction then hangs on the CPU's speed). A
        # forward of ~10 ms or more of CPU is stopped about 5/6 of its time
        # on any machine: ~6x the others'.
        job = JOB % dict(name="replica-slow", steps=100000, eval_every=100000, min_replicas=1, restarts=0)
        job = job.replace("hidden: [64]", "hidden: [1024, 1024]").replace("batch_size: 16", "batch_size: 128")
        spec = write_spec(self.tmp.name, "replica-slow.yaml", job)
        job_id = submit(s, spec)

        wait_for(lambda: three_live(s, job_id), 120, "three live replicas trained 50 steps")
        victim = next(p for p in worker_pids(job_id) if "--rank 1 " in read(f"/proc/{p}/cmdline").replace("\0", " "))
        stop = threading.Event()

        def throttle():  # stopped 20 ms of every 24: its forward passes about 4x slower
            while not stop.is_set():
                try:
                    os.kill(victim, signal.SIGSTOP)
                    time.sleep(0.02)
                    os.kill(victim, signal.SIGCONT)
                    time.sleep(0.004)
                except ProcessLookupError:
                    return
        thread = threading.Thread(target=throttle)
        thread.start()
        try:
            wait_for(lambda: any("evicted as slow" in e["reason"] for e in s.job(job_id)["events"]), 120,
                     "the slow replica to be evicted", lambda: self.describe(job_id))
        finally:
            stop.set()
            thread.join()
        events = " | ".join(e["reason"] for e in s.job(job_id)["events"])
        self.assertIn("rank 1 evicted as slow: its own work per step (forward and loss) took", events)
        print([e["reason"] for e in s.job(job_id)["events"] if "evicted as slow" in e["reason"]], flush=True)
        self.assertNotIn("rank 0 evicted", events)
        self.assertNotIn("rank 2 evicted", events)
        wait_for(lambda: "rank 1 healed in" in " | ".join(e["reason"] for e in s.job(job_id)["events"]), 60,
                 "its replacement to heal", lambda: self.describe(job_id))
        self.assertNotIn(victim, worker_pids(job_id))
        self.assertEqual(s.job(job_id)["attempt"], 1)
        s.ctl("cancel", job_id)

    def test_2_below_min_replicas_the_group_restarts(self):
        s = self.server
        job_id, killed = self.run_job("replica-min", 2000, min_replicas=3, restarts=2, kills=1, rng=random.Random(2))
        self.assertEqual(len(killed), 1)
        job = s.job(job_id)
        self.assertEqual(job["state"], "SUCCEEDED")
        self.assertEqual(job["attempt"], 2, job["events"])
        self.assertIn("restart 1 of 2", " | ".join(e["reason"] for e in job["events"]))


HYBRID_JOB = """
name: %(name)s
model: {kind: mlp, hidden: [64]}
data: {kind: synthetic, batch_size: 16, num_samples: 64}
optimizer: {kind: adamw, lr: 0.003, weight_decay: 0.05}
scheduler: {kind: cosine, warmup_steps: 100}
max_steps: %(steps)d
num_processes: 4
distributed_type: FSDP
fsdp_config: {fsdp_sharding_strategy: HYBRID_SHARD, ranks_per_node: 2}
seed: 11
metrics_every_steps: 1
eval_every_steps: %(steps)d
eval_batches: 8
fault_tolerance: {mode: replica, min_replicas: 1}
"""


class ShardGroups(unittest.TestCase):
    """FSDP HYBRID_SHARD, 2 shard groups of 2 ranks: each shard group is a
    replica. A killed rank takes its shard group out (the other rank is told
    and leaves) and back in (both replaced, healed shard by shard from the
    other group); the other group trains on."""

    def test_a_dead_rank_takes_its_shard_group_out_and_back_in(self):
        tmp = tempfile.TemporaryDirectory(prefix="trainyard-replica-hybrid-")
        os.environ["TRAINYARD_REPLICA_HASH"] = "1"
        s = Server(tmp.name, slots=4)
        try:
            rng = random.Random(36)
            # The 5 kills come by step ~650 (each waits for both ranks healed
            # and 20-60 steps more; the steps are printed): 2,000 leave them
            # room three times over, and both runs learn (eval ~1.05 < 0.6 ln 10).
            steps = 2000

            def run(name, kills):
                job_id = submit(s, write_spec(tmp.name, f"{name}.yaml", HYBRID_JOB % dict(name=name, steps=steps)))
                killed = []
                for k in range(kills):
                    gap = rng.randint(20, 60)

                    # Both ranks of each killed shard group healed.
                    jb = wait_for(lambda: ready_to_kill(s, job_id, 4, 2 * len(killed), killed, gap), 120,
                                  f"{job_id}: four live ranks before kill {k + 1}",
                                  lambda: json.dumps(s.job(job_id)["events"][-10:], indent=1))
                    if jb["state"] != "RUNNING":
                        break
                    pid = rng.choice(worker_pids(job_id))
                    os.kill(pid, signal.SIGKILL)
                    killed.append((pid, jb["step"]))
                w = s.ctl("watch", job_id, timeout=600)
                self.assertEqual(w.returncode, 0, w.stdout[-2000:] + w.stderr + s.ctl("logs", job_id).stdout[-3000:])
                return job_id, killed

            base_id, _ = run("hybrid-base", 0)
            base_logs = job_logs(tmp.name, base_id)
            base_cursor = max(r[4] for r in commits(base_logs))
            self.assertEqual(base_cursor, steps * 4 * 16)
            base_eval = last_eval(base_logs)

            job_id, killed = run("hybrid-kills", 5)
            self.assertEqual(len(killed), 5, "the job ended before 5 kills")
            job = s.job(job_id)
            events = " | ".join(e["reason"] for e in job["events"])
            self.assertEqual(job["state"], "SUCCEEDED")
            self.assertEqual(job["attempt"], 1, "a kill restarted the whole group: " + events)
            self.assertEqual(events.count("of its shard group leaves with it"), 5, events)
            self.assertGreaterEqual(events.count(" healed in "), 10, events)  # both ranks of each group
            self.assertRegex(events, r"ranks (0,1|2,3) joined: their replacements connected")

            rows = commits(job_logs(tmp.name, job_id))
            last = {}
            members = collections.defaultdict(set)
            for path, rank, epoch, step, cursor, digest in rows:
                self.assertGreaterEqual(step, last.get(path, 0), f"{path}: step went back to {step}")
                last[path] = step
                members[(epoch, step)].add(rank)
            # Shard groups come and go whole: a step an epoch committed has a
            # whole group among its lines (a rank killed at the commit itself
            # may miss it; a rank that missed only the commit's collective
            # applies it when the next membership forms, with a line under
            # the epoch that committed it). The one exception is a commit
            # that only ranks of a group about to leave saw (its shard-mate
            # killed just after the collective): the survivors drop that
            # step and train it again, so such a line must be its process's
            # last, and the step is committed again by a whole group.
            whole = {key for key, ranks in members.items() if {0, 1} <= ranks or {2, 3} <= ranks}
            last_line = {path: (epoch, step) for path, _, epoch, step, _, _ in rows}
            by_shard = collections.defaultdict(set)
            cursors = collections.defaultdict(set)
            for path, rank, epoch, step, cursor, digest in rows:
                if (epoch, step) in whole:
                    by_shard[(step, rank % 2)].add(digest)
                    cursors[step].add(cursor)
                else:
                    self.assertEqual(last_line[path], (epoch, step),
                                     f"epoch {epoch} step {step}: ranks {members[(epoch, step)]} committed it without"
                                     f" a whole group, and {path} went on")
            top = max(r[3] for r in rows)
            self.assertEqual(sorted({step for _, step in whole}), list(range(1, top + 1)),
                             "a step no whole shard group committed")
            for key, seen in by_shard.items():
                self.assertEqual(len(seen), 1, f"step {key[0]}, shard {key[1]}: replicas differ: {seen}")
            for step, seen in cursors.items():
                self.assertEqual(len(seen), 1, f"step {step}: members disagree on the cursor: {seen}")
            self.assertTrue(any(len(r) == 2 for r in members.values()), "no step trained by one shard group alone")
            self.assertEqual(max(r[4] for r in rows), base_cursor)
            evals = last_eval(job_logs(tmp.name, job_id))
            print(f"\nHYBRID_SHARD, 5 kills at steps {[at for _, at in killed]}: {job['step']} steps, "
                  f"eval loss {evals} (fault-free {base_eval})",
                  flush=True)
            self.assertLess(base_eval, 0.6 * math.log(10), "the fault-free run did not learn")
            self.assertLess(abs(evals - base_eval), 0.05 * abs(base_eval),  # as in test_1_twenty_kills_lose_nothing
                            f"eval loss {evals} vs fault-free {base_eval}")
        finally:
            s.stop()
            tmp.cleanup()


class CoordinatorKill(unittest.TestCase):
    def test_a_replica_group_trains_on_through_a_coordinator_kill_and_heals_after(self):
        tmp = tempfile.TemporaryDirectory(prefix="trainyard-replica-coordinator-")
        os.environ["TRAINYARD_REPLICA_HASH"] = "1"
        port = free_port()
        s = Server(tmp.name, slots=3, listen=f"127.0.0.1:{port}")
        try:
            spec = write_spec(tmp.name, "coord.yaml", JOB % dict(name="coord", steps=100000, eval_every=100000,
                                                                  min_replicas=1, restarts=0))
            job_id = submit(s, spec)

            wait_for(lambda: three_live(s, job_id), 120, "three live replicas trained 50 steps")
            pids = sorted(worker_pids(job_id))
            s.proc.kill()  # kill -9
            s.proc.wait()
            s.log.close()
            # The replicas train on while it is away: their commits go on.
            before = len(commits(job_logs(tmp.name, job_id)))
            wait_for(lambda: len(commits(job_logs(tmp.name, job_id))) >= before + 90, 60,
                     "commits while the coordinator is away")
            victim = pids[2]
            os.kill(victim, signal.SIGKILL)
            started = time.monotonic()
            s = Server(tmp.name, slots=3, listen=f"127.0.0.1:{port}")
            wait_for(lambda: s.job(job_id)["state"] == "RUNNING", 60, "the group re-adopted",
                     lambda: json.dumps(s.job(job_id))[-2000:])
            adopted = time.monotonic() - started
            survivors = [p for p in pids if p != victim]
            self.assertTrue(set(survivors) <= set(worker_pids(job_id)), "a surviving worker was restarted")
            wait_for(lambda: any(" healed in " in e["reason"] for e in s.job(job_id)["events"]), 120,
                     "the replica killed while the coordinator was away to heal",
                     lambda: json.dumps(s.job(job_id)["events"][-10:], indent=1))
            healed = time.monotonic() - started
            print(f"\ncoordinator kill -9: re-adopted {adopted:.1f} s after the restart, the lost replica healed "
                  f"{healed:.1f} s after", flush=True)
            job = s.job(job_id)
            events = " | ".join(e["reason"] for e in job["events"])
            self.assertEqual(job["attempt"], 1, events)
            self.assertRegex(events, r"\(the coordinator restarted; rank \d ended while it was away\)")
            self.assertNotIn("restart from", events)
            self.assertTrue(set(survivors) <= set(worker_pids(job_id)))
            mark = job["step"]
            wait_for(lambda: s.job(job_id)["step"] >= mark + 50, 120, "training to go on after the heal")
            # The workers' own account: no step went back, one state per step.
            last, seen = {}, collections.defaultdict(set)
            for path, rank, epoch, step, cursor, digest in commits(job_logs(tmp.name, job_id)):
                self.assertGreaterEqual(step, last.get(path, 0), f"{path}: step went back to {step}")
                last[path] = step
                seen[step].add((digest, cursor))
            for step, states in seen.items():
                self.assertEqual(len(states), 1, f"step {step}: members disagree: {states}")
            s.ctl("cancel", job_id)
        finally:
            s.stop()
            if os.environ.get("KEEP_TMP"):
                import shutil
                shutil.copytree(tmp.name, "/tmp/kept", dirs_exist_ok=True, ignore_dangling_symlinks=True)
            tmp.cleanup()


if __name__ == "__main__":
    e2e_test.BIN = sys.argv.pop(1)
    test_clock.main()
